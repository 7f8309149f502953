// Known checkpoint contents shared by the C++ checkpoint tests and the dlrun_ckpt_fault
// helper, so every test (and the Python one, through `dlrun_ckpt_fault dump`) can check the
// exact values that were saved. Values depend on the step, so steps are distinguishable.
#pragma once

#include <torch/torch.h>

#include <string>

#include "checkpoint/checkpoint.h"

namespace dlrun::testing {

/// Model tensors of every dtype export supports, a 0-dim scalar and a non-contiguous view.
inline ckpt::TensorDict sample_model(int64_t step) {
  const double s = static_cast<double>(step);
  auto base = torch::arange(12, torch::kFloat32).reshape({3, 4}) * 0.25 + s;  // (3, 4)
  ckpt::TensorDict m;
  m.emplace_back("conv.weight", base);
  m.emplace_back("conv.weight_t", base.t());  // (4, 3), non-contiguous view
  m.emplace_back("fc.bias", torch::linspace(-1, 1, 5, torch::kFloat64) * s);
  m.emplace_back("half", torch::arange(4, torch::kFloat16) + static_cast<int>(step));
  m.emplace_back("bf16", torch::arange(4, torch::kBFloat16) - static_cast<int>(step));
  m.emplace_back("bn.num_batches_tracked", torch::tensor(step * 10, torch::kInt64));  // 0-dim
  m.emplace_back("ids", torch::arange(6, torch::kInt32).reshape({2, 3}) * static_cast<int>(step));
  m.emplace_back("bytes", torch::arange(8, torch::kUInt8));
  m.emplace_back("mask", torch::tensor({true, false, step % 2 == 1}));
  return m;
}

inline ckpt::Snapshot sample_snapshot(int64_t step, int64_t epoch = 0) {
  ckpt::Snapshot snap;
  snap.step = step;
  snap.epoch = epoch;
  snap.tensor_files["model"] = sample_model(step);
  snap.tensor_files["optim"] = {{"state.0.momentum_buffer", torch::full({3, 4}, 0.5 * step)},
                                {"state.0.step", torch::tensor(static_cast<double>(step))}};
  snap.tensor_files["rng-rank00000"] = {{"cpu", torch::arange(16, torch::kUInt8)}};
  snap.state = {{"step", step}, {"epoch", epoch}, {"sample_cursor", step * 32}, {"optimizer", "sgd"}};
  snap.config_yaml = "model:\n  name: convnet\ntrain:\n  epochs: 3\n";
  snap.config_hash = "0123abcd";
  return snap;
}

/// True when both dicts have the same names in the same order and equal tensors (dtype,
/// shape, values).
inline bool same_tensors(const ckpt::TensorDict& a, const ckpt::TensorDict& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) return false;
    const auto& x = a[i].second;
    const auto& y = b[i].second;
    if (x.scalar_type() != y.scalar_type() || x.sizes() != y.sizes() || !torch::equal(x, y)) return false;
  }
  return true;
}

}  // namespace dlrun::testing
