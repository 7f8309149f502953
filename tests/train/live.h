// A live run's objects for the resume and snapshot tests: the components of a config (model,
// optimizer, loaders), a step runner (its loss scaler and micro-batch split), the train state, a world of one, and the checkpoint parts
// over them — what the trainer holds, without the loop.
#pragma once

#include <memory>

#include "config/loader.h"
#include "train/components.h"
#include "train/state/parts.h"
#include "train/step/step.h"

namespace dlrun::testing {

struct Live {
  Config cfg;
  train::Components c;
  train::StepRunner runner;
  train::TrainState st;
  dist::Replicas replicas;
  train::Optimizers optimizers;
  train::CheckpointParts parts;
  explicit Live(Config config, const torch::Device& device = torch::kCPU)
      : cfg(std::move(config)),
        c(train::build_components(cfg, train::Placement{device, 0, 1}, train::Purpose::kTrain)),
        runner(cfg.train, cfg.amp, *c.model, *c.optimizer, device),
        replicas(nullptr, cfg, device),
        optimizers(cfg.optim, *c.optimizer, *c.model),
        parts({cfg, *c.model, optimizers, runner.precision().scaler(), runner.micro_batches(), st, *c.train_loader,
               replicas, c.total_steps, device}) {}
  models::Model& model() { return *c.model; }
  torch::optim::Optimizer& optim() { return *c.optimizer; }
  data::Loader& loader() { return *c.train_loader; }
  ckpt::Snapshot snapshot() { return *parts.snapshot(); }
};

}  // namespace dlrun::testing
