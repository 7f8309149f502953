// --format safetensors: the weights as a safetensors file (checkpoint/safetensors.h), which
// safetensors.torch.load_file reads; its metadata says where they came from.
#include <map>
#include <string>

#include "base/build_info.h"
#include "checkpoint/safetensors.h"
#include "export/format.h"

namespace dlrun::exporting {

size_t write_as_safetensors(const std::string& path, const Weights& w) {
  const nlohmann::json& m = w.manifest;
  std::map<std::string, std::string> meta = {{"format", "pt"},
                                             {"dlrun_version", build::version()},
                                             {"torch_version", build::torch_version()},
                                             {"step", std::to_string(w.step)},
                                             {"epoch", std::to_string(w.epoch)}};
  if (m.contains("config_hash") && m["config_hash"].is_string()) meta["config_hash"] = m["config_hash"].get<std::string>();
  if (w.folded_batchnorm) meta["folded_batchnorm"] = "true";
  meta["weights"] = w.weights;
  if (w.dataset.is_object()) meta["dlrun_dataset"] = w.dataset.dump();  // what `dlrun predict` needs
  ckpt::write_safetensors(path, w.tensors, meta);
  return w.tensors.size();
}

}  // namespace dlrun::exporting
