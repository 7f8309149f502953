// Loading a checkpoint back into a Snapshot: verify first (a checkpoint that fails is bad
// input, exit 2, with the reason and the path), then read every tensor file, state.json and
// config.yaml that the manifest lists.
#include "base/error.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/fsutil.h"
#include "checkpoint/layout.h"
#include "checkpoint/tensor_file.h"

namespace dlrun::ckpt {

Snapshot load(const std::string& ckpt_dir) {
  const VerifyResult v = verify(ckpt_dir);
  if (!v.ok)
    throw Error(ExitCode::kBadInput, fmt::format("{}: checkpoint does not verify: {}", ckpt_dir, v.reason),
                "`dlrun ckpt list RUN_DIR` shows which checkpoints are valid");
  const auto& m = v.manifest;
  Snapshot snap;
  snap.step = v.step;
  snap.epoch = v.epoch < 0 ? 0 : v.epoch;
  if (m.contains("config_hash") && m["config_hash"].is_string()) snap.config_hash = m["config_hash"].get<std::string>();
  if (m.contains("world_size") && m["world_size"].is_number_integer()) snap.world_size = m["world_size"].get<int>();
  for (const auto& f : m["files"]) {
    const auto name = f["name"].get<std::string>();
    const std::string path = ckpt_dir + "/" + name;
    if (name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0) {
      snap.tensor_files[name.substr(0, name.size() - 3)] = load_tensor_file(path);
    } else if (name == detail::kState) {
      try {
        snap.state = nlohmann::json::parse(detail::read_file(path));
      } catch (const nlohmann::json::exception& e) {
        fail_input("{}: not valid JSON: {}", path, e.what());
      }
    } else if (name == detail::kConfig) {
      snap.config_yaml = detail::read_file(path);
    }
  }
  return snap;
}

}  // namespace dlrun::ckpt
