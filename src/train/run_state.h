// What the training loop carries across a checkpoint besides tensors (step, epoch, sample
// cursor, preemption accounting), and the conversion between a live training session and a
// checkpoint Snapshot: make_snapshot() at a step boundary, restore() on resume with the
// compatibility checks of DESIGN.md §4.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <string>

#include "checkpoint/checkpoint.h"
#include "config/options.h"
#include "models/model.h"
#include "train/amp.h"

namespace dlrun::train {

struct RunState {
  int64_t step = 0;     ///< optimizer steps done
  int64_t epoch = 0;    ///< epoch in progress (0-based)
  int64_t cursor = 0;   ///< samples of this epoch already consumed by all ranks
  int64_t steps_lost_total = 0;   ///< steps computed but lost to interruptions (at least)
  int64_t steps_lost_last = 0;    ///< lost by the interruption this process resumed from
  int64_t resumed_from_step = -1; ///< -1: fresh start
  nlohmann::json preemption;      ///< the preempt event of this process, if any
};

/// "dlrun 0.1.0 (git abc), torch 2.11.0"
std::string version_line();

/// Host copy of everything a resume needs (model, optimizer, scaler, RNG, position, config).
ckpt::Snapshot make_snapshot(const Config& cfg, models::Model& model, torch::optim::Optimizer& optim,
                             const GradScaler& scaler, const RunState& st, int64_t total_steps,
                             const torch::Device& device);

/// Restore from a loaded checkpoint. Refuses (exit 2, naming the difference) a different
/// architecture or optimizer type; warns when the schedule length, global batch size or
/// world size changed.
void restore(const ckpt::Snapshot& snap, const Config& cfg, models::Model& model, torch::optim::Optimizer& optim,
             GradScaler& scaler, RunState& st, int64_t total_steps);

/// After a resume: read metrics.jsonl for the furthest step the interrupted process logged,
/// and account the steps beyond the checkpoint as lost.
void note_resume(RunState& st, const std::string& metrics_path);

/// Write model weights as a torch.load-able dict of tensors.
void save_weights(const torch::nn::Module& model, const std::string& path);

}  // namespace dlrun::train
