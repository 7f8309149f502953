// Generator states in and out of tensors (see rng.h).
#include "checkpoint/rng.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <mutex>

#include "data/sample_rng.h"

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

uint64_t step_seed(uint64_t run_seed, int rank, int64_t step) {
  uint64_t k = data::mix64(run_seed ^ 0x5f3759df9e3779b9ULL);
  k = data::mix64(k ^ (static_cast<uint64_t>(rank) + 0x2545f4914f6cdd1dULL));
  return data::mix64(k ^ (static_cast<uint64_t>(step) * 0xd1342543de82ef95ULL));
}

void seed_all(uint64_t seed) { torch::manual_seed(seed); }

TensorDict seeded_rng_states(uint64_t seed, const torch::Device& device) {
  TensorDict out;
  // A generator of our own for the CPU state; the CUDA one seeded and read back under the default
  // generator's lock (a Philox seed and offset: nothing is drawn).
  auto cpu = at::detail::createCPUGenerator(seed);
  out.emplace_back("cpu", cpu.get_state());
  if (device.is_cuda()) {
    auto gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    const at::Tensor saved = gen.get_state();
    gen.set_current_seed(seed);
    out.emplace_back("cuda", gen.get_state());
    gen.set_state(saved);
  }
  return out;
}

}  // namespace dlrun::ckpt
