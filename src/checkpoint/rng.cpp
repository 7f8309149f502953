// Generator states in and out of tensors (see rng.h).
#include "checkpoint/rng.h"

#include <fmt/format.h>

#include <mutex>

namespace dlrun::ckpt {

std::string rng_file(int rank) { return fmt::format("rng-rank{:05d}", rank); }

TensorDict rng_states(const torch::Device& device) {
  TensorDict out;
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    out.emplace_back("cpu", gen.get_state());
  }
  if (device.is_cuda()) {
    auto gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    out.emplace_back("cuda", gen.get_state());
  }
  return out;
}

void set_rng_states(const TensorDict& states, const torch::Device& device) {
  for (const auto& [name, t] : states) {
    if (name == "cpu") {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(t);
    } else if (name == "cuda" && device.is_cuda()) {
      auto gen = at::globalContext().defaultGenerator(device);
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(t);
    }
  }
}

}  // namespace dlrun::ckpt
