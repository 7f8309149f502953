// What a checkpoint costs the training loop (see checkpoint_cost.h).
#include "train/checkpoint_cost.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

#include "base/clock.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "checkpoint/checkpoint.h"
#include "config/options.h"
#include "config/validate.h"
#include "distributed/replicas.h"
#include "models/model.h"
#include "run/state.h"
#include "train/components.h"
#include "train/state/parts.h"
#include "train/step/device.h"
#include "train/step/micro_batch.h"
#include "train/step/optimizers.h"
#include "train/step/precision.h"

namespace fs = std::filesystem;

namespace dlrun::train {

CheckpointCost measure_checkpoint_cost(const CheckpointCostOptions& o) {
  Config cfg;
  cfg.model.name = o.model;
  cfg.model.in_channels = 3;
  cfg.model.num_classes = 1000;
  cfg.optim.name = OptimName::kSgd;
  cfg.data.name = "synthetic";
  cfg.data.synthetic_shape = {3, 224, 224};  // a loader of one batch: its position is part of the state
  cfg.data.batch_size = cfg.data.synthetic_train_size = cfg.data.synthetic_eval_size = 8;
  cfg.data.augment.clear();
  cfg.run.device = o.device;
  config::validate(cfg);
  auto c = build_components(cfg, place(cfg), Purpose::kTrain);
  auto& model = c.model;
  auto& optim = c.optimizer;
  // One step so the optimizer has its momentum buffers (the state a real checkpoint holds).
  for (auto& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
  optim->step();
  Precision precision(cfg.amp, cfg.train.nonfinite, c.placement.device);  // the step's parts a checkpoint holds
  MicroBatchSplit micro_batches(cfg.train.micro_batch);
  TrainState st;
  dist::Replicas replicas(nullptr, cfg, c.placement.device);
  Optimizers optimizers(cfg.optim, *optim, *model);
  CheckpointParts parts({cfg, *model, optimizers, precision.scaler(), micro_batches, st,
                         *c.train_loader, replicas, 1000, c.placement.device});
  std::string dir = o.dir;
  if (dir.empty()) {  // a fresh private directory (mkdtemp: mode 0700, a name nobody could have prepared)
    std::string tmpl = (fs::temp_directory_path() / "dlrun-bench-ckpt-XXXXXX").string();
    DLRUN_CHECK(::mkdtemp(tmpl.data()) != nullptr, ExitCode::kRuntime, "cannot create a directory under {}",
                fs::temp_directory_path().string());
    dir = tmpl;
  }
  fsutil::make_dirs(dir);
  CheckpointOptions copts;
  copts.keep_last = 1;
  copts.async = true;
  ckpt::Writer writer(dir, copts);
  CheckpointCost cost;
  cost.device = c.placement.device;
  cost.parameters = models::num_parameters(*model);
  for (int i = 0; i < o.repeat; ++i) {
    st.step = i + 1;
    const double t0 = mono_now();
    auto snap = *parts.snapshot();
    const double t1 = mono_now();
    writer.save(std::move(snap));
    const double t2 = mono_now();
    writer.wait();
    const double t3 = mono_now();
    cost.checkpoint_bytes = 0;
    for (const auto& e : fs::directory_iterator(fs::path(dir) / ckpt::dir_name(st.step)))
      cost.checkpoint_bytes += fs::file_size(e.path());
    cost.saves.push_back({t1 - t0, t2 - t0, t3 - t1});
  }
  writer.wait();
  if (o.dir.empty()) fsutil::remove_tree(dir);  // not fs::remove_all: docs/development.md
  return cost;
}

}  // namespace dlrun::train
