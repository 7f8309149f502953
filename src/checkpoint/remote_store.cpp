// Remote checkpoints: upload, list, download, verify, retention (see remote_store.h).
#include "checkpoint/remote_store.h"

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

}  // namespace dlrun::ckpt
