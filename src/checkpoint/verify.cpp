// Checkpoint verification: a checkpoint is valid only when its manifest.json (written last by
// the commit) is present and parseable and every file it lists exists with the listed size
// and SHA-256. The first problem found is returned as a reason a user can act on.
#include <sys/stat.h>

#include <exception>

#include "base/error.h"
#include "base/strings.h"
#include "base/fsutil.h"
#include "base/json_limits.h"
#include "base/sha256.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"

namespace dlrun::ckpt {
namespace detail {
namespace {

VerifyResult fail(VerifyResult r, std::string reason) {
  r.ok = false;
  r.reason = std::move(reason);
  return r;
}

}  // namespace

std::string not_a_plain_file(const struct stat& st, const std::string& name) {
  // A checkpoint holds regular files only: a symbolic link could point anywhere (and be
  // followed by retention's deletes), a FIFO or device would block a reader forever.
  if (S_ISLNK(st.st_mode)) return name + ": a symbolic link; a checkpoint holds regular files only";
  if (S_ISDIR(st.st_mode)) return name + ": a directory where a file is expected";
  if (!S_ISREG(st.st_mode)) return name + ": not a regular file (a FIFO, socket or device)";
  return "";
}

std::string format_problem(const nlohmann::json& m, bool* newer) {
  if (m.contains("format") && m["format"] != "dlrun-checkpoint")
    return fmt::format("manifest.json: format {} is not a dlrun checkpoint", m["format"].dump());
  if (!m.contains("format_version")) return "";  // written before the field existed: version 1
  const auto& v = m["format_version"];
  if (!v.is_number_integer() || v.get<int64_t>() < 1)
    return fmt::format("manifest.json: format_version {} is not a version number", v.dump());
  if (newer) *newer = v.get<int64_t>() > kFormatVersion;
  if (v.get<int64_t>() > kFormatVersion)
    return fmt::format("manifest.json: format version {} was written by a newer dlrun (this one reads version {}); "
                       "upgrade dlrun to resume from it",
                       v.get<int64_t>(), kFormatVersion);
  return "";
}

VerifyResult read_manifest(const std::string& ckpt_dir) {
  VerifyResult r;
  const std::string name = fsutil::base_name(ckpt_dir);
  if (ends_with(name, ".tmp"))
    return fail(r, fmt::format("partial checkpoint: {} was never committed (interrupted writer)", name));
  struct stat st {};
  if (::stat(ckpt_dir.c_str(), &st) != 0) return fail(r, "checkpoint directory not found");
  if (!S_ISDIR(st.st_mode)) return fail(r, "not a directory");
  const std::string mpath = ckpt_dir + "/" + kManifest;
  if (::lstat(mpath.c_str(), &st) != 0) {
    // A checkpoint cut short still holds some of its files; a folder with none of them is not one.
    struct stat other {};
    const bool partial = ::lstat((ckpt_dir + "/" + kModelFile).c_str(), &other) == 0 ||
                         ::lstat((ckpt_dir + "/" + kStateFile).c_str(), &other) == 0;
    return fail(r, partial ? "missing manifest.json (partial write?)"
                           : "not a checkpoint directory: no manifest.json, model.pt or state.json in it (a checkpoint "
                             "is RUN_DIR/checkpoints/step-N; a run directory works too)");
  }
  if (const std::string why = not_a_plain_file(st, kManifest); !why.empty()) return fail(r, why);
  if (st.st_size > kMaxManifestBytes)
    return fail(r, fmt::format("manifest.json: {} bytes, more than a manifest can be ({})", st.st_size,
                               kMaxManifestBytes));

  nlohmann::json m;
  try {
    m = parse_json_capped(fsutil::read_file(mpath), kMaxJsonDepth);
  } catch (const std::exception& e) {
    return fail(r, fmt::format("manifest.json: not valid JSON ({})", e.what()));
  }
  if (!m.is_object() || !m.contains("files") || !m["files"].is_array() || !m.contains("step") ||
      !json_int64(m["step"]).has_value() || *json_int64(m["step"]) < 0 ||
      (m.contains("epoch") && !json_int64(m["epoch"]).has_value()) ||
      (m.contains("world_size") && !(json_int64(m["world_size"]).value_or(0) >= 1 &&
                                     *json_int64(m["world_size"]) <= (int64_t{1} << 24))))
    return fail(r, "manifest.json: malformed (needs a non-negative integer 'step', integer 'epoch' and 'world_size', "
                   "and a 'files' list)");
  if (const std::string why = format_problem(m, &r.newer_format); !why.empty()) return fail(r, why);
  r.manifest = m;
  r.step = m["step"].get<int64_t>();
  r.epoch = m.contains("epoch") && m["epoch"].is_number_integer() ? m["epoch"].get<int64_t>() : -1;

  bool has_model = false, has_state = false;
  for (const auto& f : m["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("bytes") ||
        !f["bytes"].is_number_unsigned() || !f.contains("sha256") || !f["sha256"].is_string())
      return fail(r, "manifest.json: malformed file entry (needs name, bytes, sha256)");
    const auto fname = f["name"].get<std::string>();
    if (fname.empty() || fname.find('/') != std::string::npos || fname == "." || fname == "..")
      return fail(r, fmt::format("manifest.json: invalid file name '{}'", fname));
    has_model |= fname == kModel;
    has_state |= fname == kState;
  }
  if (!has_model) return fail(r, "manifest.json does not list model.pt");
  if (!has_state) return fail(r, "manifest.json does not list state.json");
  r.ok = true;
  return r;
}

std::string file_mismatch(const nlohmann::json& entry, uint64_t size, const std::string& sha256) {
  const auto fname = entry["name"].get<std::string>();
  const auto expected = entry["bytes"].get<uint64_t>();
  if (size != expected) return fmt::format("{}: size {} != {} in manifest (truncated or changed)", fname, size, expected);
  if (!sha256.empty() && sha256 != entry["sha256"].get<std::string>())
    return fmt::format("{}: SHA-256 mismatch (file changed or corrupt)", fname);
  return "";
}

VerifyResult verify_dir(const std::string& ckpt_dir, bool hashes) {
  VerifyResult r = read_manifest(ckpt_dir);
  if (!r.ok) return r;
  for (const auto& f : r.manifest["files"]) {
    const auto fname = f["name"].get<std::string>();
    const std::string path = ckpt_dir + "/" + fname;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return fail(r, fmt::format("{}: missing (listed in manifest.json)", fname));
    std::string why = not_a_plain_file(st, fname);
    if (why.empty()) why = file_mismatch(f, static_cast<uint64_t>(st.st_size), "");
    if (why.empty() && hashes) {
      try {
        uint64_t bytes = 0;
        const std::string digest = sha256_file(path, &bytes);
        why = file_mismatch(f, bytes, digest);
      } catch (const Error& e) {
        why = fmt::format("{}: cannot read ({})", fname, e.message());
      }
    }
    if (!why.empty()) return fail(r, why);
  }
  return r;
}

}  // namespace detail

VerifyResult verify(const std::string& ckpt_dir) { return detail::verify_dir(ckpt_dir, true); }

}  // namespace dlrun::ckpt
