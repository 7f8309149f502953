// This process's random generators as tensors: what a checkpoint stores per rank and a resume
// puts back, so dropout and every other draw continue exactly.
#pragma once

#include <torch/torch.h>

#include <string>

#include "checkpoint/checkpoint.h"

namespace dlrun::ckpt {

/// This process's RNG states: "cpu", and "cuda" of `device` when it is a CUDA device.
TensorDict rng_states(const torch::Device& device);

/// Put back states from rng_states() ("cuda" only when `device` is a CUDA device).
void set_rng_states(const TensorDict& states, const torch::Device& device);

/// The file stem of rank `rank`'s RNG state in a checkpoint: "rng-rank00003".
std::string rng_file(int rank);

}  // namespace dlrun::ckpt
