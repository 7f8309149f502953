// The commit protocol (DESIGN.md §4): write every file of a checkpoint into step-N.tmp/,
// fsync each, write manifest.json last, rename the directory into place, fsync the parent,
// then replace LATEST atomically. Also the fault-injection points the crash tests use.
//
// Re-committing a step that already exists (e.g. the final save of a resumed run that had
// nothing left to do) never destroys the committed copy before the new one is complete: the
// new step-N.tmp/ is swapped with step-N/ in one renameat2(RENAME_EXCHANGE), so step-N/ is at
// every instant one complete checkpoint; the old copy, now in step-N.tmp/, is removed after.
// Where the file system cannot exchange, the old copy is renamed to step-N.old-<pid>/ first.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <torch/version.h>

#include "base/build_info.h"
#include "base/error.h"
#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/fsutil.h"
#include "checkpoint/layout.h"
#include "checkpoint/sha256.h"
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

void fault_point(const char* point) {
  const char* env = std::getenv("DLRUN_FAULT");
  if (env == nullptr || point == nullptr || *point == '\0') return;
  std::string_view v(env);
  if (v.substr(0, 5) != "ckpt:" || v.substr(5) != point) return;
  std::fprintf(stderr, "dlrun: fault injection: DLRUN_FAULT=%s reached, aborting\n", env);
  std::fflush(stderr);
  std::abort();
}

namespace {

struct Written {
  nlohmann::json files = nlohmann::json::array();
  void add(const std::string& dir, const std::string& name, std::string_view data) {
    detail::write_file_durable(dir + "/" + name, data);
    files.push_back({{"name", name}, {"bytes", data.size()}, {"sha256", detail::sha256_hex(data.data(), data.size())}});
  }
};

void check_stem(const std::string& stem) {
  DLRUN_CHECK(!stem.empty() && stem.find('/') == std::string::npos && stem != "." && stem != "..",
              ExitCode::kRuntime, "checkpoint: invalid tensor file name '{}'", stem);
}

/// Move the complete `tmp` to `final_dir`, keeping the old `final_dir` intact until then.
void install(const std::string& tmp, const std::string& final_dir, const std::string& parent) {
  if (!detail::path_exists(final_dir)) {
    detail::rename_durable(tmp, final_dir);
    return;
  }
  if (detail::exchange_paths(tmp, final_dir)) {
    detail::fsync_dir(parent);
    detail::remove_tree(tmp);  // the old copy
    detail::fsync_dir(parent);
    return;
  }
  const std::string old = final_dir + ".old-" + std::to_string(::getpid());
  detail::rename_durable(final_dir, old);
  detail::rename_durable(tmp, final_dir);
  detail::remove_tree(old);
  detail::fsync_dir(parent);
}

}  // namespace

std::string commit(const Snapshot& snap, const std::string& checkpoints_dir) {
  DLRUN_CHECK(snap.tensor_files.count("model") == 1, ExitCode::kRuntime,
              "checkpoint step {}: the snapshot has no 'model' tensors", snap.step);
  if (!detail::is_directory(checkpoints_dir)) {
    detail::make_dirs(checkpoints_dir);
    detail::fsync_dir(detail::parent_of(checkpoints_dir));
  }
  const std::string name = dir_name(snap.step);
  const std::string final_dir = checkpoints_dir + "/" + name;
  const std::string tmp = final_dir + ".tmp";
  if (detail::path_exists(tmp)) {
    log::warn("{}: removing a partial checkpoint of the same step left by an interrupted writer", tmp);
    detail::remove_tree(tmp);
  }
  detail::make_dirs(tmp);
  detail::fsync_dir(checkpoints_dir);

  Written w;
  // model first: "file" fires after the first tensor file, with others still to come.
  std::vector<std::string> stems = {"model"};
  for (const auto& kv : snap.tensor_files)
    if (kv.first != "model") stems.push_back(kv.first);
  for (const auto& stem : stems) {
    check_stem(stem);
    const auto bytes = tensors_to_bytes(snap.tensor_files.at(stem));
    w.add(tmp, stem + ".pt", std::string_view(bytes.data(), bytes.size()));
    if (stem == "model") fault_point("file");
  }
  const nlohmann::json state = snap.state.is_null() ? nlohmann::json::object() : snap.state;
  w.add(tmp, detail::kState, state.dump(2) + "\n");
  w.add(tmp, detail::kConfig, snap.config_yaml);
  fault_point("files");

  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  nlohmann::json manifest = {
      {"format", "dlrun-checkpoint"},
      {"format_version", detail::kFormatVersion},
      {"step", snap.step},
      {"epoch", snap.epoch},
      {"config_hash", snap.config_hash},
      {"world_size", snap.world_size},
      {"versions", {{"dlrun", build::version()}, {"git", build::git_revision()}, {"torch", TORCH_VERSION}}},
      {"created_unix", now},
      {"files", w.files},
  };
  detail::write_file_durable(tmp + "/" + detail::kManifest, manifest.dump(2) + "\n");
  detail::fsync_dir(tmp);
  fault_point("manifest");

  install(tmp, final_dir, checkpoints_dir);
  fault_point("rename");

  detail::write_file_atomic(checkpoints_dir + "/" + detail::kLatest, name + "\n");
  fault_point("latest");
  return final_dir;
}

}  // namespace dlrun::ckpt
