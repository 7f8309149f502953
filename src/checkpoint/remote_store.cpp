// Remote checkpoints: upload, list, download, verify, retention (see remote_store.h).
#include "checkpoint/remote_store.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/fsutil.h"
#include "base/host.h"
#include "base/json_limits.h"
#include "base/log.h"
#include "base/sha256.h"
#include "checkpoint/layout.h"

namespace dlrun::ckpt {

namespace {

[[noreturn]] void fail_remote_verify(const std::string& where, const std::string& reason) {
  throw Error(ExitCode::kBadInput, fmt::format("{}: checkpoint does not verify: {}", where, reason),
              "`dlrun ckpt list s3://...` shows which remote checkpoints are complete");
}

/// The remote manifest's record of the server-side encryption its objects were stored with.
constexpr const char* kEncryptionKey = "server_side_encryption";

/// The record in `manifest` (nothing asked when there is none); a malformed one does not verify.
remote::Encryption recorded_encryption(const nlohmann::json& manifest, const std::string& where) {
  if (!manifest.contains(kEncryptionKey)) return {};
  const auto& r = manifest[kEncryptionKey];
  const bool ok = r.is_object() && r.contains("algorithm") && r["algorithm"].is_string() &&
                  (!r.contains("kms_key_id") || r["kms_key_id"].is_string()) &&
                  (!r.contains("bucket_key") || r["bucket_key"].is_boolean());
  if (!ok) fail_remote_verify(where, fmt::format("manifest.json: malformed '{}' (needs an algorithm)", kEncryptionKey));
  return {r["algorithm"].get<std::string>(), r.value("kms_key_id", std::string()), r.value("bucket_key", false)};
}

}  // namespace

std::string remote_hint(const remote::S3Error& e, const std::string& credentials) {
  const std::string from = credentials.empty() ? "" : " (from " + credentials + ")";
  if (e.transient()) return "the storage service did not answer or failed on its side; try again later";
  if (e.code() == remote::kMalformed)
    return "the endpoint does not answer as S3 does: check checkpoint.remote_endpoint (--remote-endpoint)";
  if (e.code() == remote::kTlsRefused)
    return "the store's certificate must verify: name the CA that signed it with checkpoint.remote_ca_bundle "
           "(--remote-ca-bundle) or AWS_CA_BUNDLE (a private CA), and check the endpoint's host name and the "
           "certificate's dates; checkpoint.remote_tls_min: 1.3 (--remote-tls-min) needs a store that speaks TLS 1.3";
  if (e.code() == remote::kNotEncrypted)
    return "the store did not apply checkpoint.remote_sse (--remote-sse): some S3-compatible stores have no "
           "server-side encryption";
  if (e.status() == 403 && e.code() == "AccessDenied") {
    // Encryption a bucket policy requires concerns writes only (a read of a data shard, a listing: no).
    const bool write = std::string(e.what()).find("s3:PutObject") != std::string::npos;
    return fmt::format("give the credentials{} the permission named above: docs/security.md, \"Least privilege\", "
                       "has the policy dlrun needs{}",
                       from, write ? " (a bucket policy may also require encryption: checkpoint.remote_sse)" : "");
  }
  return fmt::format("check the credentials{} (docs/checkpoints.md, \"Credentials\"), the bucket and prefix, the "
                     "endpoint (checkpoint.remote_endpoint, --remote-endpoint) and the region",
                     from);
}

Patience::Patience(double budget_s, std::function<bool()> stop, std::function<void(double)> sleep)
    : budget_s_(budget_s), stop_(std::move(stop)), sleep_(std::move(sleep)) {}

void Patience::wait(const std::string& what, const remote::S3Error& e) {
  const double now = mono_now();
  if (first_failure_ < 0) first_failure_ = now;
  const double spent = now - first_failure_, left = budget_s_ - spent;
  if (left <= 0 || (stop_ && stop_()))
    throw Error(ExitCode::kInterrupted,
                stop_ && stop_() ? fmt::format("{}: a stop was requested while the store did not answer ({})", what, e.what())
                                 : fmt::format("{}: the store did not answer for {:.0f} s (checkpoint.remote_wait_s): {}; "
                                               "exiting 75 to be tried again later, never starting over",
                                               what, spent, e.what()),
                "nothing was trained or written; requeue the job (the exit code asks for it) once the store answers");
  const double delay = std::min(delay_, left);
  ++retries_;
  log::warn("{}: {}; retry {} in {:.0f} s ({:.0f} s of checkpoint.remote_wait_s left)", what, e.what(), retries_, delay, left);
  if (sleep_) {
    sleep_(delay);
  } else {  // in slices, so that a signal ends the wait at once
    for (double until = mono_now() + delay; mono_now() < until && !(stop_ && stop_());)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  delay_ = std::min(30.0, delay_ * 2);
}

RemoteStore::RemoteStore(remote::S3Config config, remote::S3Url url)
    : config_(config), client_(std::move(config), url.bucket), url_(std::move(url)) {
  client_.set_cancel(&cancelled_);
}

void RemoteStore::check_access() {
  // Each request of a run, once: what the store refuses now would otherwise fail hours later.
  const std::string probe = url_.key(fmt::format(".dlrun-access-check.{}.{}", hostname("host"), ::getpid()));
  try {
    client_.list(url_.dir(), "/");            // s3:ListBucket (resume, retention)
    latest();                                 // s3:GetObject (absent is an answer too)
    client_.pending_uploads(url_.dir());      // s3:ListBucketMultipartUploads (retention)
    client_.remove(probe);                    // s3:DeleteObject (absent: nothing to delete)
    client_.put_bytes(probe, "written by dlrun to check its access; removed at once\n", "text/plain");  // s3:PutObject, KMS
    client_.get(probe, [](const char*, size_t) {});  // kms:Decrypt where SSE-KMS applies
    client_.remove(probe);
    try {  // s3:AbortMultipartUpload: an upload that does not exist is 404 to whoever may abort it
      client_.abort_upload({probe, "dlrun-access-check"});
    } catch (const remote::S3Error& e) {
      if (e.transient() || e.status() == 403 || e.code() == remote::kTlsRefused || e.code() == remote::kCancelled) throw;
    }
  } catch (const remote::S3Error& e) {
    if (e.transient()) fail_runtime("checkpoint.remote {}: {}", url_.str(), e.what());
    throw Error(ExitCode::kBadInput, fmt::format("checkpoint.remote {}: bucket {}: {}", url_.str(), url_.bucket, e.what()),
                remote_hint(e, config_.credentials->source()));
  }
}

uint64_t RemoteStore::upload(const std::string& local_dir) {
  const VerifyResult v = detail::read_manifest(local_dir);
  if (!v.ok) throw remote::S3Error(fmt::format("{}: not uploaded: {}", local_dir, v.reason), 0, remote::kLocal);
  // Named by its step, whatever the local directory is called (--resume /models/best).
  const std::string name = dir_name(v.step);
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
  const std::string manifest = local_dir + "/" + detail::kManifest, manifest_key = url_.key(name + "/" + detail::kManifest);
  const remote::Encryption& sse = config_.sse;
  if (sse.algorithm.empty() && !v.manifest.contains(kEncryptionKey)) {  // the local manifest as it is
    uint64_t manifest_bytes = 0;
    const std::string manifest_sha = sha256_file(manifest, &manifest_bytes);
    client_.put_file(manifest_key, manifest, manifest_bytes, manifest_sha);
    sent += manifest_bytes;
  } else {  // with the record of the encryption this upload asked for (and the service confirmed)
    nlohmann::json m = v.manifest;
    m.erase(kEncryptionKey);  // a downloaded checkpoint's record is of its earlier upload
    if (!sse.algorithm.empty())
      m[kEncryptionKey] = {{"algorithm", sse.algorithm}, {"kms_key_id", sse.kms_key_id}, {"bucket_key", sse.bucket_key}};
    const std::string text = m.dump(1) + "\n";
    client_.put_bytes(manifest_key, text, "application/json");
    sent += text.size();
  }
  fault::at_upload_point("manifest");
  client_.put_bytes(url_.key(detail::kLatest), name + "\n", "text/plain");
  fault::at_upload_point("latest");
  return sent;
}

namespace {

/// The checkpoint directories of a listing: those without a suffix, or (`aside`) those with one.
std::vector<RemoteEntry> entries_of(const std::vector<remote::ObjectInfo>& objects, const std::string& base, bool aside) {
  std::map<std::pair<int64_t, std::string>, RemoteEntry> by_dir;
  for (const auto& obj : objects) {
    const std::string rel = obj.key.substr(base.size());  // the client checked the prefix
    const auto slash = rel.find('/');
    if (slash == std::string::npos) continue;
    const std::string dir = rel.substr(0, slash);
    int64_t step = -1;
    std::string suffix;
    if (!detail::parse_dir_name(dir, &step, &suffix) || suffix.empty() == aside) continue;
    RemoteEntry& e = by_dir[{step, suffix}];
    e.name = dir;
    e.step = step;
    e.suffix = suffix;
    e.bytes += obj.size;
    e.complete |= rel.substr(slash + 1) == detail::kManifest;
  }
  std::vector<RemoteEntry> out;
  for (auto& kv : by_dir) out.push_back(std::move(kv.second));
  return out;
}

}  // namespace

std::vector<RemoteEntry> RemoteStore::list() { return entries_of(client_.list(url_.dir()).objects, url_.dir(), false); }

std::vector<RemoteEntry> RemoteStore::list_set_aside() {
  return entries_of(client_.list(url_.dir()).objects, url_.dir(), true);
}

std::optional<std::string> RemoteStore::latest() {
  try {
    return detail::pointer_name(client_.get_bytes(url_.key(detail::kLatest)));
  } catch (const remote::S3Error& e) {
    if (e.status() == 404) return std::nullopt;
    throw;
  }
}

FileSet RemoteStore::download(const std::string& name, bool keep) {
  const std::string where = url_.str(name);
  std::string manifest_text;
  remote::Encryption manifest_sse;
  try {
    manifest_sse = client_.get(url_.key(name + "/" + detail::kManifest), [&](const char* p, size_t n) {
      if (manifest_text.size() + n > size_t(detail::kMaxManifestBytes))  // the local reader's cap
        fail_remote_verify(where, fmt::format("manifest.json: larger than {} bytes, not a dlrun manifest",
                                       detail::kMaxManifestBytes));
      manifest_text.append(p, n);
    });
  } catch (const remote::S3Error& e) {
    if (e.status() == 404) fail_remote_verify(where, "missing manifest.json (an upload cut short?)");
    throw;
  }
  FileSet set;
  set.name = name;
  try {
    set.manifest = parse_json_capped(manifest_text, detail::kMaxJsonDepth);
  } catch (const std::exception& e) {
    fail_remote_verify(where, fmt::format("manifest.json: not valid JSON ({})", e.what()));
  }
  if (!set.manifest.is_object() || !set.manifest.contains("files") || !set.manifest["files"].is_array())
    fail_remote_verify(where, "manifest.json: malformed (needs a 'files' list)");
  for (const char* key : {"step", "epoch"})
    if (set.manifest.contains(key) && !set.manifest[key].is_number_integer())
      fail_remote_verify(where, fmt::format("manifest.json: '{}' is not an integer", key));
  bool newer = false;
  if (const std::string why = detail::format_problem(set.manifest, &newer); !why.empty()) {
    if (newer)
      throw NewerFormatError(ExitCode::kBadInput, fmt::format("{}: {}", where, why),
                             "this run was continued by a newer dlrun: use that version (or start a new run with "
                             "--run-dir and another checkpoint.remote prefix)");
    fail_remote_verify(where, why);
  }
  // Every object must be stored as the manifest records (an object replaced by one written
  // without encryption is not this checkpoint's).
  const remote::Encryption recorded = recorded_encryption(set.manifest, where);
  auto check_stored = [&](const std::string& file, const remote::Encryption& got) {
    if (!remote::satisfies(got, recorded))
      fail_remote_verify(where, fmt::format("{}: stored with server-side encryption {}; manifest.json records {}", file,
                                     got.describe(), recorded.describe()));
  };
  check_stored(detail::kManifest, manifest_sse);
  for (const auto& f : set.manifest["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_unsigned() || !f.contains("sha256") || !f["sha256"].is_string())
      fail_remote_verify(where, "manifest.json: malformed file entry (needs name, bytes, sha256)");
    const auto file = f["name"].get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      fail_remote_verify(where, fmt::format("manifest.json: invalid file name '{}'", file));
    Sha256 h;
    std::vector<char> bytes;
    uint64_t size = 0;
    remote::Encryption stored;
    const auto expected = f["bytes"].get<uint64_t>();
    try {
      stored = client_.get(url_.key(name + "/" + file), [&](const char* p, size_t n) {
        if (size + n > expected)  // never hold more than the manifest promises
          fail_remote_verify(where, fmt::format("{}: larger than the {} bytes manifest.json lists", file, expected));
        h.update(p, n);
        size += n;
        if (keep) bytes.insert(bytes.end(), p, p + n);
      });
    } catch (const remote::S3Error& e) {
      if (e.status() == 404) fail_remote_verify(where, file + ": missing (listed in manifest.json)");
      throw;
    }
    const std::string why = detail::file_mismatch(f, size, h.hex());
    if (!why.empty()) fail_remote_verify(where, why);
    check_stored(file, stored);
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

void RemoteStore::remove_entry(const std::string& name) {
  // The manifest first: a removal cut short leaves an incomplete checkpoint, never one that
  // looks complete with files missing.
  const std::string base = url_.key(name) + "/";
  client_.remove(base + detail::kManifest);
  for (const auto& obj : client_.list(base).objects) client_.remove(obj.key);
}

std::vector<std::string> RemoteStore::apply_retention(int64_t keep_last, int64_t keep_every, int64_t uploaded) {
  std::vector<std::string> removed;
  const auto latest_name = latest();
  const std::vector<RemoteEntry> entries = list();
  std::vector<const RemoteEntry*> complete;
  for (const auto& e : entries)
    if (e.complete && e.step <= uploaded) complete.push_back(&e);
  const int64_t newest_complete = complete.empty() ? -1 : complete.back()->step;
  int64_t kept = 0;
  for (auto it = complete.rbegin(); it != complete.rend() && keep_last > 0; ++it) {
    if (kept < keep_last) {
      ++kept;
      continue;
    }
    const RemoteEntry& e = **it;
    if ((keep_every > 0 && e.step % keep_every == 0) || (latest_name && *latest_name == e.name)) continue;
    remove_entry(e.name);
    removed.push_back(e.name);
  }
  // Incomplete step prefixes older than the newest complete checkpoint: an upload cut short,
  // which nothing will finish or read.
  for (const auto& e : entries) {
    if (e.complete || e.step >= newest_complete) continue;
    for (const auto& obj : client_.list(url_.key(e.name) + "/").objects) client_.remove(obj.key);
    removed.push_back(e.name + " (incomplete)");
  }
  // Multipart uploads of checkpoint files that were started and never finished.
  for (const auto& u : client_.pending_uploads(url_.dir())) {
    const std::string rel = u.key.substr(url_.dir().size());
    int64_t step = -1;
    std::string suffix;
    if (!detail::parse_dir_name(rel.substr(0, rel.find('/')), &step, &suffix) || !suffix.empty()) continue;
    client_.abort_upload(u);
    removed.push_back(rel + " (unfinished multipart upload)");
  }
  return removed;
}

namespace {

constexpr const char* kHistory = "history";
constexpr uint64_t kMaxHistoryFile = uint64_t{1} << 30;

/// The history files of a run directory: metrics.jsonl and the TensorBoard event files.
bool history_name(const std::string& name) {
  return name == "metrics.jsonl" ||
         (name.rfind("events.out.tfevents.", 0) == 0 && name.find('/') == std::string::npos && name.size() < 256);
}

/// `path` as it is now, up to its last whole record (the training thread may be appending one):
/// for metrics.jsonl its last whole line, for an event file its last whole TFRecord frame
/// (8-byte length, 4-byte CRC, the data, 4-byte CRC).
std::string snapshot_of(const std::string& path, bool jsonl) {
  std::string bytes = fsutil::read_file(path);
  if (jsonl) {
    const size_t nl = bytes.rfind('\n');
    bytes.resize(nl == std::string::npos ? 0 : nl + 1);
    return bytes;
  }
  size_t whole = 0;
  while (bytes.size() - whole >= 12) {
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(bytes[whole + i]);
    if (len > bytes.size() - whole - 12 || bytes.size() - whole - 12 - len < 4) break;
    whole += 16 + len;
  }
  bytes.resize(whole);
  return bytes;
}

}  // namespace

uint64_t RemoteStore::put_history(const std::string& run_dir) {
  uint64_t sent = 0;
  std::set<std::string> local;
  for (const auto& name : fsutil::list_names(run_dir)) {
    if (!history_name(name) || !fsutil::is_regular_file(run_dir + "/" + name)) continue;
    const std::string bytes = snapshot_of(run_dir + "/" + name, name == "metrics.jsonl");
    client_.put_bytes(url_.key(std::string(kHistory) + "/" + name), bytes, "application/octet-stream");
    sent += bytes.size();
    local.insert(name);
  }
  // The store's history mirrors this run directory's: a process that started fresh removes, once,
  // the event files an earlier start under this prefix left (one that resumed fetched them).
  if (!history_pruned_) {
    const std::string base = url_.key(kHistory) + "/";
    for (const auto& obj : client_.list(base).objects)
      if (!local.count(obj.key.substr(base.size()))) client_.remove(obj.key);
    history_pruned_ = true;
  }
  return sent;
}

int RemoteStore::fetch_history(const std::string& run_dir) {
  if (fsutil::path_exists(run_dir + "/metrics.jsonl")) return 0;  // a run directory with records of its own
  const std::string base = url_.key(kHistory) + "/";
  int written = 0;
  for (const auto& obj : client_.list(base).objects) {
    const std::string name = obj.key.substr(base.size());
    if (!history_name(name)) {
      log::warn("{}: not a history file dlrun writes; left alone", url_.str(std::string(kHistory) + "/" + name));
      continue;
    }
    DLRUN_CHECK_INPUT(obj.size <= kMaxHistoryFile, "{}: {} bytes, more than a run's history holds (1 GiB)",
                      url_.str(std::string(kHistory) + "/" + name), obj.size);
    std::string bytes;
    client_.get(obj.key, [&](const char* p, size_t n) {
      DLRUN_CHECK_INPUT(bytes.size() + n <= kMaxHistoryFile, "{}: larger than it was listed",
                        url_.str(std::string(kHistory) + "/" + name));
      bytes.append(p, n);
    });
    fsutil::write_file_atomic(run_dir + "/" + name, bytes);
    ++written;
  }
  return written;
}

std::vector<std::string> RemoteStore::set_aside_after(int64_t step, const std::string& suffix) {
  std::vector<std::string> moved;
  if (step < 0) {  // the whole run set aside (--resume never --force): its history with it
    const std::string from = url_.key(kHistory) + "/", to = url_.key(std::string(kHistory) + suffix) + "/";
    for (const auto& obj : client_.list(from).objects) {
      client_.copy(obj.key, to + obj.key.substr(from.size()), obj.size);
      client_.remove(obj.key);
    }
  }
  int64_t newest_left = -1;
  std::string newest_left_name;
  for (const auto& e : list()) {
    if (e.step <= step) {
      if (e.complete) newest_left = e.step, newest_left_name = e.name;
      continue;
    }
    const std::string from = url_.key(e.name) + "/", to = url_.key(e.name + suffix) + "/";
    for (const auto& obj : client_.list(from).objects) client_.copy(obj.key, to + obj.key.substr(from.size()), obj.size);
    remove_entry(e.name);
    moved.push_back(e.name);
  }
  const auto latest_name = latest();
  int64_t latest_step = -1;
  std::string latest_suffix;
  if (latest_name && (!detail::parse_dir_name(*latest_name, &latest_step, &latest_suffix) || latest_step > step)) {
    if (newest_left >= 0) client_.put_bytes(url_.key(detail::kLatest), newest_left_name + "\n", "text/plain");
    else client_.remove(url_.key(detail::kLatest));
  }
  return moved;
}

}  // namespace dlrun::ckpt
