// params_sha256 (see fingerprint.h).
#include "models/fingerprint.h"

#include "base/endian.h"
#include "base/sha256.h"
#include "models/model.h"

namespace dlrun::models {

std::string params_sha256(const torch::nn::Module& model) {
  static_assert(host_is_little_endian(), "params_sha256 assumes a little-endian host");
  Sha256 h;
  for (const auto& [name, t] : state_dict(model)) {
    auto c = t.detach().to(torch::kCPU).contiguous();
    h.update(c.data_ptr(), c.numel() * c.element_size());
  }
  return h.hex();
}

}  // namespace dlrun::models
