// The commit protocol (docs/checkpoints.md): write every file of a checkpoint into
// step-N.tmp/, fsync each, write manifest.json last, rename the directory into place, fsync
// the parent, then replace LATEST atomically.
//
// Saving a step that already exists never destroys anything that could be needed: a stale
// step-N.tmp/ is set aside (step-N.partial-<time>/); an existing step-N/ that fails
// verification is set aside (step-N.corrupt-<time>/) for the user to inspect; one that
// verifies is swapped with the new copy in one renameat2(RENAME_EXCHANGE), so step-N/ is at
// every instant one complete checkpoint, and only then removed. Where the file system cannot
// exchange, the old copy is renamed to step-N.old-<pid>/ first.
#include <unistd.h>

#include <cstdio>
#include <string_view>


#include "base/build_info.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "base/sha256.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/tensor_file.h"

namespace dlrun::ckpt {

std::string dir_name(int64_t step) { return fmt::format("step-{:08d}", step); }

TensorDict host_copy(const TensorDict& tensors, bool pinned) {
  const bool pin = pinned && torch::cuda::is_available();
  TensorDict out;
  out.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    auto src = t.detach();
    torch::Tensor dst = torch::empty(src.sizes(), src.options().device(torch::kCPU).pinned_memory(pin));
    dst.copy_(src);  // blocking, so the snapshot is complete when this returns
    out.emplace_back(name, dst);
  }
  return out;
}

std::vector<std::string> fault_points() { return {"file", "files", "manifest", "rename", "latest"}; }

namespace {

void check_stem(const std::string& stem) {
  DLRUN_CHECK(!stem.empty() && stem.find('/') == std::string::npos && stem != "." && stem != "..",
              ExitCode::kRuntime, "checkpoint: invalid tensor file name '{}'", stem);
}

/// `dir` renamed to "<dir>.<what>-<unix time>" (a free name), durably. Returns the new path.
std::string set_aside(const std::string& dir, const char* what) {
  const auto t = static_cast<int64_t>(wall_now());
  std::string aside = fmt::format("{}.{}-{}", dir, what, t);
  for (int n = 1; fsutil::path_exists(aside); ++n) aside = fmt::format("{}.{}-{}-{}", dir, what, t, n);
  fsutil::rename_durable(dir, aside);
  return aside;
}

/// Move the complete `tmp` to `final_dir`, keeping the old `final_dir` intact until then.
void install(const std::string& tmp, const std::string& final_dir, const std::string& parent) {
  if (!fsutil::path_exists(final_dir)) {
    fsutil::rename_durable(tmp, final_dir);
    return;
  }
  const VerifyResult old = verify(final_dir);
  if (!old.ok) {
    const std::string aside = set_aside(final_dir, "corrupt");
    log::warn("{} is saved again, and the existing copy does not verify ({}): kept as {}", final_dir, old.reason, aside);
    fsutil::rename_durable(tmp, final_dir);
    return;
  }
  if (fsutil::exchange_paths(tmp, final_dir)) {
    fsutil::fsync_dir(parent);
    fsutil::remove_tree(tmp);  // the old, verified copy of the same step
    fsutil::fsync_dir(parent);
    return;
  }
  const std::string old_copy = final_dir + ".old-" + std::to_string(::getpid());
  fsutil::rename_durable(final_dir, old_copy);
  fsutil::rename_durable(tmp, final_dir);
  fsutil::remove_tree(old_copy);
  fsutil::fsync_dir(parent);
}

}  // namespace

uint64_t FileSet::bytes() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.second.size();
  return n;
}

const std::vector<char>* FileSet::find(const std::string& name) const {
  for (const auto& [file, data] : files)
    if (file == name) return &data;
  return nullptr;
}

FileSet serialize(const Snapshot& snap) {
  DLRUN_CHECK(snap.tensor_files.count("model") == 1, ExitCode::kRuntime,
              "checkpoint step {}: the snapshot has no 'model' tensors", snap.step);
  FileSet set;
  set.name = dir_name(snap.step);
  nlohmann::json listed = nlohmann::json::array();
  auto add = [&](const std::string& name, std::vector<char> bytes) {
    listed.push_back({{"name", name}, {"bytes", bytes.size()}, {"sha256", sha256_hex(bytes.data(), bytes.size())}});
    set.files.emplace_back(name, std::move(bytes));
  };
  // model first: the "file" fault point fires after the first file, with others still to come.
  std::vector<std::string> stems = {"model"};
  for (const auto& kv : snap.tensor_files)
    if (kv.first != "model") stems.push_back(kv.first);
  for (const auto& stem : stems) {
    check_stem(stem);
    add(stem + ".pt", tensors_to_bytes(snap.tensor_files.at(stem)));
  }
  const nlohmann::json state = snap.state.is_null() ? nlohmann::json::object() : snap.state;
  const std::string state_text = state.dump(2) + "\n";
  add(detail::kState, std::vector<char>(state_text.begin(), state_text.end()));
  add(detail::kConfig, std::vector<char>(snap.config_yaml.begin(), snap.config_yaml.end()));
  set.manifest = {
      {"format", "dlrun-checkpoint"},
      {"format_version", detail::kFormatVersion},
      {"step", snap.step},
      {"epoch", snap.epoch},
      {"config_hash", snap.config_hash},
      {"world_size", snap.world_size},
      {"versions", {{"dlrun", build::version()}, {"git", build::git_revision()}, {"torch", build::torch_version()}}},
      {"created_unix", wall_now()},
      {"files", listed},
  };
  const std::string manifest = set.manifest.dump(2) + "\n";
  set.files.emplace_back(detail::kManifest, std::vector<char>(manifest.begin(), manifest.end()));
  return set;
}

std::string commit(const Snapshot& snap, const std::string& checkpoints_dir) {
  return commit_files(serialize(snap), checkpoints_dir);
}

std::string commit_files(const FileSet& set, const std::string& checkpoints_dir) {
  DLRUN_CHECK(!set.files.empty() && set.files.back().first == detail::kManifest, ExitCode::kRuntime,
              "checkpoint {}: a file set must end with its manifest", set.name);
  if (!fsutil::is_directory(checkpoints_dir)) {
    fsutil::make_dirs(checkpoints_dir);
    fsutil::fsync_dir(fsutil::parent_of(checkpoints_dir));
  }
  const std::string final_dir = checkpoints_dir + "/" + set.name;
  const std::string tmp = final_dir + ".tmp";
  if (fsutil::path_exists(tmp)) {
    const std::string aside = set_aside(tmp, "partial");
    log::warn("{}: a partial checkpoint of the same step left by an interrupted writer; kept as {}", tmp, aside);
  }
  try {
    fsutil::make_dirs(tmp);
    fsutil::fsync_dir(checkpoints_dir);
    for (size_t i = 0; i + 1 < set.files.size(); ++i) {
      const auto& [name, bytes] = set.files[i];
      fsutil::write_file_durable(tmp + "/" + name, std::string_view(bytes.data(), bytes.size()));
      if (i == 0) fault::at_checkpoint_point("file");
    }
    fault::at_checkpoint_point("files");
    const auto& manifest = set.files.back().second;
    fsutil::write_file_durable(tmp + "/" + detail::kManifest, std::string_view(manifest.data(), manifest.size()));
    fsutil::fsync_dir(tmp);
  } catch (const Error&) {
    // A write that failed here (a full disk, an I/O error, a read-only file system) leaves a
    // partial step-N.tmp/ that this process made and nothing refers to: remove it, so a full
    // disk gets its space back for the next save (committed checkpoints are not touched).
    try {
      fsutil::remove_tree(tmp);
    } catch (const Error& e) {
      log::warn("could not remove the partial checkpoint {}: {}", tmp, e.message());
    }
    throw;
  }
  fault::at_checkpoint_point("manifest");

  install(tmp, final_dir, checkpoints_dir);
  fault::at_checkpoint_point("rename");

  fsutil::write_file_atomic(checkpoints_dir + "/" + detail::kLatest, set.name + "\n");
  fault::at_checkpoint_point("latest");
  return final_dir;
}

}  // namespace dlrun::ckpt
