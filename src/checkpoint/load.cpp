// Loading a checkpoint into a Snapshot. Each file the manifest lists is read once into
// memory (read_set), its size and SHA-256 compared with the manifest, and only then parsed
// (parse): a checkpoint that does not verify is bad input (exit 2, with the reason and the
// path), and no byte is read or hashed twice (resume time bounds how fast a requeued job gets
// back to work). A downloaded checkpoint is parsed from its checked bytes the same way.
#include <sys/stat.h>

#include "base/error.h"
#include "base/fsutil.h"
#include "base/json_limits.h"
#include "base/sha256.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/tensor_file.h"

namespace dlrun::ckpt {

namespace {

[[noreturn]] void fail_verify(const std::string& dir, const std::string& reason) {
  throw Error(ExitCode::kBadInput, fmt::format("{}: checkpoint does not verify: {}", dir, reason),
              "`dlrun ckpt list RUN_DIR` shows which checkpoints are valid");
}

}  // namespace

FileSet read_set(const std::string& ckpt_dir) {
  const VerifyResult v = detail::read_manifest(ckpt_dir);
  if (!v.ok) fail_verify(ckpt_dir, v.reason);
  FileSet set;
  set.name = fsutil::base_name(ckpt_dir);
  set.manifest = v.manifest;
  for (const auto& f : v.manifest["files"]) {
    const auto name = f["name"].get<std::string>();
    const std::string path = ckpt_dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) fail_verify(ckpt_dir, name + ": missing (listed in manifest.json)");
    if (const std::string why = detail::not_a_plain_file(st, name); !why.empty()) fail_verify(ckpt_dir, why);
    // Sizes first: a file far larger than the manifest says is not read into memory at all.
    if (const std::string why = detail::file_mismatch(f, static_cast<uint64_t>(st.st_size), ""); !why.empty())
      fail_verify(ckpt_dir, why);
    std::vector<char> bytes;
    try {
      bytes = fsutil::read_bytes(path);
    } catch (const Error& e) {
      fail_verify(ckpt_dir, fmt::format("{}: cannot read ({})", name, e.message()));
    }
    const std::string why = detail::file_mismatch(f, bytes.size(), sha256_hex(bytes.data(), bytes.size()));
    if (!why.empty()) fail_verify(ckpt_dir, why);
    set.files.emplace_back(name, std::move(bytes));
  }
  set.files.emplace_back(detail::kManifest, fsutil::read_bytes(ckpt_dir + "/" + detail::kManifest));
  return set;
}

Snapshot parse(const FileSet& set, const std::string& where) {
  const auto& m = set.manifest;
  Snapshot snap;
  snap.step = m.value("step", int64_t{0});
  snap.epoch = m.contains("epoch") && m["epoch"].is_number_integer() ? std::max<int64_t>(0, m["epoch"].get<int64_t>()) : 0;
  if (m.contains("config_hash") && m["config_hash"].is_string()) snap.config_hash = m["config_hash"].get<std::string>();
  if (m.contains("world_size") && m["world_size"].is_number_integer()) snap.world_size = m["world_size"].get<int>();
  for (const auto& [name, bytes] : set.files) {
    const std::string what = where + "/" + name;
    if (name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0) {
      snap.tensor_files[name.substr(0, name.size() - 3)] = tensors_from_bytes(bytes, what);
    } else if (name == detail::kState) {
      try {
        snap.state = parse_json_capped(std::string(bytes.begin(), bytes.end()), detail::kMaxJsonDepth);
      } catch (const std::exception& e) {
        fail_input("{}: not valid JSON: {}", what, e.what());
      }
    } else if (name == detail::kConfig) {
      snap.config_yaml.assign(bytes.begin(), bytes.end());
    }
  }
  return snap;
}

Snapshot load(const std::string& ckpt_dir) { return parse(read_set(ckpt_dir), ckpt_dir); }

std::optional<Loaded> load_newest(const std::string& checkpoints_dir,
                                  const std::function<void(const std::string&, const std::string&)>& on_skip) {
  if (!fsutil::is_directory(checkpoints_dir)) return std::nullopt;
  auto entries = detail::scan(checkpoints_dir);
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->partial) {
      // A leftover step-N.tmp/ is worth a word; directories dlrun set aside itself
      // (.partial-, .corrupt-, .old-) were reported when they were, and are not candidates.
      const bool tmp = it->name.size() > 4 && it->name.compare(it->name.size() - 4, 4, ".tmp") == 0;
      if (tmp && on_skip) on_skip(it->path, "partial: never committed (interrupted writer); ignored, not deleted");
      continue;
    }
    try {
      return Loaded{it->path, load(it->path)};
    } catch (const Error& e) {
      if (e.code() != ExitCode::kBadInput) throw;
      // A checkpoint this dlrun cannot read because a newer one wrote it is not damage:
      // skipping it would start the run over beside it. Stop and say so.
      if (const VerifyResult v = detail::read_manifest(it->path); v.newer_format)
        throw Error(ExitCode::kBadInput, fmt::format("{}: {}", it->path, v.reason),
                    "this run was continued by a newer dlrun: use that version (or start a new run with --run-dir)");
      if (on_skip) on_skip(it->path, e.message());
    }
  }
  return std::nullopt;
}

}  // namespace dlrun::ckpt

namespace dlrun::ckpt {

std::optional<Loaded> load_preferred(const std::string& checkpoints_dir,
                                     const std::function<void(const std::string&, const std::string&)>& on_skip) {
  if (const auto latest = read_latest(checkpoints_dir)) {
    const std::string path = checkpoints_dir + "/" + *latest;
    int64_t step = -1;
    std::string suffix;
    if (detail::parse_dir_name(*latest, &step, &suffix) && suffix.empty() && fsutil::is_directory(path)) {
      try {
        return Loaded{path, load(path)};
      } catch (const Error& e) {
        // Damaged: load_newest() below tries it again among the others and reports it (or
        // refuses it, when a newer dlrun wrote it).
        if (e.code() != ExitCode::kBadInput) throw;
      }
    }
  }
  return load_newest(checkpoints_dir, on_skip);
}

}  // namespace dlrun::ckpt
