// params_sha256: SHA-256 over every parameter and buffer of a model, in state-dict order,
// as raw little-endian bytes (docs/design.md) — a fingerprint users compare across runs.
#pragma once

#include <torch/torch.h>

#include <string>

namespace dlrun::models {

std::string params_sha256(const torch::nn::Module& model);

}  // namespace dlrun::models
