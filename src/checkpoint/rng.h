// This process's random generators as tensors: what a checkpoint stores per rank and a resume
// puts back, so dropout and every other draw continue exactly.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "checkpoint/checkpoint.h"

namespace dlrun::ckpt {

/// This process's RNG states: "cpu", and "cuda" of `device` when it is a CUDA device.
TensorDict rng_states(const torch::Device& device);

/// Put back states from rng_states() ("cuda" only when `device` is a CUDA device).
void set_rng_states(const TensorDict& states, const torch::Device& device);

/// The seed of rank `rank`'s generators for optimizer step `step` (1-based) of a multi-process
/// run: each step of such a run starts its draws (dropout) from it, so the generators at any
/// step boundary are a function of (run.seed, rank, step) -- every rank can write any rank's,
/// a lost one's too (docs/design.md, "A peer lost without notice").
uint64_t step_seed(uint64_t run_seed, int rank, int64_t step);

/// Seed this process's generators (CPU, and every CUDA device's) with `seed`.
void seed_all(uint64_t seed);

/// The states rng_states() returns right after seed_all(seed), without touching this process's
/// generators.
TensorDict seeded_rng_states(uint64_t seed, const torch::Device& device);

/// The file stem of rank `rank`'s RNG state in a checkpoint: "rng-rank00003".
std::string rng_file(int rank);

}  // namespace dlrun::ckpt
