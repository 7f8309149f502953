// Remote checkpoints and their background uploader (see remote.h).
#include "checkpoint/remote.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>

#include "base/clock.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/fsutil.h"
#include "base/json_limits.h"
#include "base/log.h"
#include "base/sha256.h"
#include "checkpoint/layout.h"

namespace dlrun::ckpt {

namespace {

[[noreturn]] void fail_verify(const std::string& where, const std::string& reason) {
  throw Error(ExitCode::kBadInput, fmt::format("{}: checkpoint does not verify: {}", where, reason),
              "`dlrun ckpt list s3://...` shows which remote checkpoints are complete");
}

}  // namespace

RemoteStore::RemoteStore(remote::S3Config config, remote::S3Url url)
    : config_(config), client_(std::move(config), url.bucket), url_(std::move(url)) {
  client_.set_cancel(&cancelled_);
}

void RemoteStore::check_access() {
  try {
    client_.list(url_.dir(), "/");
  } catch (const remote::S3Error& e) {
    if (e.transient()) fail_runtime("checkpoint.remote {}: {}", url_.str(), e.what());
    throw Error(ExitCode::kBadInput, fmt::format("checkpoint.remote {}: bucket {}: {}", url_.str(), url_.bucket, e.what()),
                "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, the bucket name, checkpoint.remote_endpoint and "
                "checkpoint.remote_region");
  }
}

uint64_t RemoteStore::upload(const std::string& local_dir) {
  const std::string name = fsutil::base_name(local_dir);
  const VerifyResult v = detail::read_manifest(local_dir);
  if (!v.ok) throw remote::S3Error(fmt::format("{}: not uploaded: {}", local_dir, v.reason), 0, "local");
  // The same step may be there from an earlier timeline (a resume from an older checkpoint):
  // its manifest goes first, so the step is incomplete, never a mix that looks complete.
  client_.remove(url_.key(name + "/" + detail::kManifest));
  uint64_t sent = 0;
  for (const auto& f : v.manifest["files"]) {
    const auto file = f["name"].get<std::string>();
    const auto bytes = f["bytes"].get<uint64_t>();
    client_.put_file(url_.key(name + "/" + file), local_dir + "/" + file, bytes, f["sha256"].get<std::string>());
    sent += bytes;
  }
  fault::at_upload_point("files");
  uint64_t manifest_bytes = 0;
  const std::string manifest = local_dir + "/" + detail::kManifest;
  const std::string manifest_sha = sha256_file(manifest, &manifest_bytes);
  client_.put_file(url_.key(name + "/" + detail::kManifest), manifest, manifest_bytes, manifest_sha);
  sent += manifest_bytes;
  fault::at_upload_point("manifest");
  client_.put_bytes(url_.key(detail::kLatest), name + "\n", "text/plain");
  fault::at_upload_point("latest");
  return sent;
}

std::vector<RemoteEntry> RemoteStore::list() {
  const std::string base = url_.dir();
  std::map<int64_t, RemoteEntry> by_step;
  for (const auto& obj : client_.list(base).objects) {
    const std::string rel = obj.key.substr(base.size());
    const auto slash = rel.find('/');
    if (slash == std::string::npos) continue;
    const std::string dir = rel.substr(0, slash);
    int64_t step = -1;
    std::string suffix;
    if (!detail::parse_dir_name(dir, &step, &suffix) || !suffix.empty()) continue;
    RemoteEntry& e = by_step[step];
    e.name = dir;
    e.step = step;
    e.bytes += obj.size;
    e.complete |= rel.substr(slash + 1) == detail::kManifest;
  }
  std::vector<RemoteEntry> out;
  for (auto& kv : by_step) out.push_back(std::move(kv.second));
  return out;
}

std::optional<std::string> RemoteStore::latest() {
  try {
    std::string s = client_.get_bytes(url_.key(detail::kLatest));
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    if (s.empty() || s.find('/') != std::string::npos) return std::nullopt;
    return s;
  } catch (const remote::S3Error& e) {
    if (e.status() == 404) return std::nullopt;
    throw;
  }
}

FileSet RemoteStore::download(const std::string& name, bool keep) {
  const std::string where = url_.str(name);
  std::string manifest_text;
  try {
    client_.get(url_.key(name + "/" + detail::kManifest), [&](const char* p, size_t n) {
      if (manifest_text.size() + n > size_t(detail::kMaxManifestBytes))  // the local reader's cap
        fail_verify(where, fmt::format("manifest.json: larger than {} bytes, not a dlrun manifest",
                                       detail::kMaxManifestBytes));
      manifest_text.append(p, n);
    });
  } catch (const remote::S3Error& e) {
    if (e.status() == 404) fail_verify(where, "missing manifest.json (an upload cut short?)");
    throw;
  }
  FileSet set;
  set.name = name;
  try {
    set.manifest = parse_json_capped(manifest_text, detail::kMaxJsonDepth);
  } catch (const std::exception& e) {
    fail_verify(where, fmt::format("manifest.json: not valid JSON ({})", e.what()));
  }
  if (!set.manifest.is_object() || !set.manifest.contains("files") || !set.manifest["files"].is_array())
    fail_verify(where, "manifest.json: malformed (needs a 'files' list)");
  for (const char* key : {"step", "epoch"})
    if (set.manifest.contains(key) && !set.manifest[key].is_number_integer())
      fail_verify(where, fmt::format("manifest.json: '{}' is not an integer", key));
  bool newer = false;
  if (const std::string why = detail::format_problem(set.manifest, &newer); !why.empty()) {
    if (newer)
      throw NewerFormatError(ExitCode::kBadInput, fmt::format("{}: {}", where, why),
                             "this run was continued by a newer dlrun: use that version (or start a new run with "
                             "--run-dir and another checkpoint.remote prefix)");
    fail_verify(where, why);
  }
  for (const auto& f : set.manifest["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_unsigned() || !f.contains("sha256") || !f["sha256"].is_string())
      fail_verify(where, "manifest.json: malformed file entry (needs name, bytes, sha256)");
    const auto file = f["name"].get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      fail_verify(where, fmt::format("manifest.json: invalid file name '{}'", file));
    Sha256 h;
    std::vector<char> bytes;
    uint64_t size = 0;
    const auto expected = f["bytes"].get<uint64_t>();
    try {
      client_.get(url_.key(name + "/" + file), [&](const char* p, size_t n) {
        if (size + n > expected)  // never hold more than the manifest promises
          fail_verify(where, fmt::format("{}: larger than the {} bytes manifest.json lists", file, expected));
        h.update(p, n);
        size += n;
        if (keep) bytes.insert(bytes.end(), p, p + n);
      });
    } catch (const remote::S3Error& e) {
      if (e.status() == 404) fail_verify(where, file + ": missing (listed in manifest.json)");
      throw;
    }
    const std::string why = detail::file_mismatch(f, size, h.hex());
    if (!why.empty()) fail_verify(where, why);
    set.files.emplace_back(file, std::move(bytes));
  }
  set.files.emplace_back(detail::kManifest, std::vector<char>(manifest_text.begin(), manifest_text.end()));
  return set;
}

FileSet RemoteStore::fetch(const std::string& name) { return download(name, true); }

VerifyResult RemoteStore::verify(const std::string& name) {
  VerifyResult r;
  try {
    const FileSet set = download(name, false);
    r.ok = true;
    r.manifest = set.manifest;
    r.step = set.manifest.value("step", int64_t{-1});
    r.epoch = set.manifest.value("epoch", int64_t{-1});
  } catch (const Error& e) {
    r.reason = e.message();
  }
  return r;
}

std::vector<std::string> RemoteStore::apply_retention(int64_t keep_last, int64_t keep_every) {
  std::vector<std::string> removed;
  if (keep_last <= 0) return removed;
  const auto latest_name = latest();
  std::vector<RemoteEntry> complete;
  for (auto& e : list())
    if (e.complete) complete.push_back(std::move(e));
  int64_t kept = 0;
  for (auto it = complete.rbegin(); it != complete.rend(); ++it) {
    if (kept < keep_last) {
      ++kept;
      continue;
    }
    if ((keep_every > 0 && it->step % keep_every == 0) || (latest_name && *latest_name == it->name)) continue;
    // The manifest first: a removal cut short leaves an incomplete checkpoint, never one that
    // looks complete with files missing.
    const std::string base = url_.key(it->name) + "/";
    client_.remove(base + detail::kManifest);
    for (const auto& obj : client_.list(base).objects) client_.remove(obj.key);
    removed.push_back(it->name);
  }
  return removed;
}

// ---- the uploader ---------------------------------------------------------------------------

Uploader::Uploader(RemoteStore& store, CheckpointOptions opts) : store_(store), opts_(std::move(opts)) {
  thread_ = std::thread([this] { run(); });
}

Uploader::~Uploader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    store_.cancel(true);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  store_.cancel(false);
}

void Uploader::supersede_older(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  // The older upload, or the remote retention after it: both can wait for the next upload.
  if (busy_ && uploading_step_ < step && pending_ && pending_->second == step) {
    superseded_ = true;
    store_.cancel(true);
  }
}

void Uploader::submit(const std::string& local_dir, int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = std::make_pair(local_dir, step);  // a newer checkpoint replaces one still waiting
  }
  cv_.notify_all();
}

bool Uploader::wait(double deadline, bool retention) {
  std::unique_lock<std::mutex> lock(mu_);
  auto idle = [&] { return (!busy_ || (retaining_ && !retention)) && !pending_; };
  if (deadline <= 0) {
    cv_.wait(lock, idle);
    return true;
  }
  const double left = deadline - mono_now();
  return left > 0 ? cv_.wait_for(lock, std::chrono::duration<double>(left), idle) : idle();
}

std::vector<std::string> Uploader::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  if (!uploading_.empty()) out.push_back(uploading_);
  if (pending_) out.push_back(pending_->first);
  return out;
}

std::vector<Uploader::Result> Uploader::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Result> out;
  out.swap(results_);
  return out;
}

Uploader::Totals Uploader::totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

void Uploader::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || pending_.has_value(); });
    if (stop_) return;
    const auto [dir, step] = *pending_;
    pending_.reset();
    busy_ = true;
    uploading_ = dir;
    uploading_step_ = step;
    for (int attempt = 1; attempt <= kAttempts; ++attempt) {
      superseded_ = false;
      store_.cancel(false);  // under the lock: supersede_older() sets it only while we upload
      lock.unlock();
      Result r;
      r.step = step;
      r.url = store_.url().str(fsutil::base_name(dir));
      r.attempt = attempt;
      bool transient = true;
      const double t0 = mono_now();
      try {
        r.bytes = store_.upload(dir);
        r.seconds = mono_now() - t0;
        r.ok = r.final = true;
      } catch (const remote::S3Error& e) {
        r.error = e.what();
        transient = e.transient();
      } catch (const std::exception& e) {
        r.error = e.what();
        transient = false;
      }
      r.wall_time = wall_now();
      lock.lock();
      if (r.ok) {
        ++totals_.uploaded;
        totals_.last_step = step;
        totals_.last_url = r.url;
        totals_.bytes += r.bytes;
        totals_.seconds += r.seconds;
        totals_.last_seconds = r.seconds;
        results_.push_back(r);
        retaining_ = true;  // the checkpoint is up: a stop waiting for it may go on
        cv_.notify_all();
        lock.unlock();
        try {
          for (const auto& gone : store_.apply_retention(opts_.keep_last, opts_.keep_every))
            log::debug("remote retention: removed {}", store_.url().str(gone));
        } catch (const remote::S3Error& e) {
          if (e.code() != "cancelled") log::warn("remote retention in {} failed: {}", store_.url().str(), e.what());
        } catch (const std::exception& e) {
          log::warn("remote retention in {} failed: {}", store_.url().str(), e.what());
        }
        lock.lock();
        retaining_ = false;
        break;
      }
      if (stop_) break;  // abandoned by the destructor: nothing to report any more
      if (superseded_) {  // a stop wants a newer checkpoint up first
        log::info("upload of step {} abandoned for the newer checkpoint", step);
        break;
      }
      ++totals_.failed_attempts;
      totals_.last_error = r.error;
      r.final = !transient || attempt == kAttempts;
      r.retry_in_s = r.final ? 0 : std::min(60.0, static_cast<double>(1 << (attempt - 1)));
      if (r.final) ++totals_.given_up;
      results_.push_back(r);
      if (r.final) break;
      // Back off; a stop or a newer checkpoint ends the wait (the newer one supersedes this).
      if (cv_.wait_for(lock, std::chrono::duration<double>(r.retry_in_s), [&] { return stop_ || pending_.has_value(); }))
        break;
    }
    busy_ = false;
    uploading_.clear();
    uploading_step_ = -1;
    cv_.notify_all();
  }
}

}  // namespace dlrun::ckpt
