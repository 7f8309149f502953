// Everything a run computes with, built by one function for train, eval and bench, so the
// three cannot disagree about the model, the data or the device.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "config/options.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "models/model.h"
#include "train/device.h"
#include "train/schedule.h"

namespace dlrun::train {

/// What the components are for: train builds everything; eval the model and the evaluation
/// data; bench the model and its optimizer (no data).
enum class Purpose { kTrain, kEval, kBench };

/// The opened splits of the configured dataset, checked against the model options.
struct Datasets {
  std::shared_ptr<data::Dataset> train, eval;  ///< train is null for Purpose::kEval
  data::DatasetInfo info;
};

/// Open the splits `purpose` needs and check that the dataset fits the model: channels equal
/// model.in_channels, classes at most model.num_classes, a training set of at least one
/// global batch (exit 2 naming the key otherwise).
/// Corrupt or missing data files are exit 2 naming the file.
Datasets open_datasets(const Config& cfg, Purpose purpose);

struct Components {
  Placement placement;
  Datasets data;
  std::shared_ptr<models::Model> model;                  ///< on placement.device
  std::unique_ptr<torch::optim::Optimizer> optimizer;    ///< train and bench
  std::unique_ptr<data::Loader> train_loader;            ///< train
  std::unique_ptr<data::Loader> eval_loader;             ///< train and eval
  int64_t steps_per_epoch = 0;                           ///< train
  int64_t total_steps = 0;                               ///< train
  ScheduleSpec schedule;                                 ///< train
};

/// Build the components `purpose` needs, in the order that fails cheapest first: data files
/// (and their fit with the model) before the model is allocated on the device.
Components build_components(const Config& cfg, const Placement& placement, Purpose purpose);

/// The checks `dlrun train` makes before it allocates anything, for `dlrun config validate`:
/// the device exists, the dataset opens and fits the model (channels, classes, at least one
/// global batch), the preemption notice source can be watched. Throws dlrun::Error (exit 2).
void preflight(const Config& cfg);

}  // namespace dlrun::train
