// Everything a run computes with, built by one function for train, eval and bench, so the
// three cannot disagree about the model, the data or the device.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "config/options.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "models/model.h"
#include "train/averaging/averages.h"
#include "train/step/device.h"
#include "train/step/schedule.h"

namespace dlrun::train {

/// What the components are for: train builds everything; eval the model and the evaluation
/// data; bench the model and its optimizer (no data).
enum class Purpose { kTrain, kEval, kBench };

/// The opened splits of the configured dataset, checked against the model options.
struct Datasets {
  std::shared_ptr<data::Dataset> train, eval;  ///< train is null for Purpose::kEval
  /// The validation split, or null: data.val_fraction of the training set held out, or an
  /// image_folder's root/val when root/test holds the test split (eval is then that test split).
  std::shared_ptr<data::Dataset> val;
  data::DatasetInfo info;
  /// "50000 train / 10000 eval samples", or "45000 train / 5000 validation / 10000 test samples".
  std::string describe() const;
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
  /// train: the weights' averages the config asks for (train/averaging/averages.h)
  Averages averages;
  /// train: makes a loader of the training split read as an evaluation reads (no augmentation,
  /// in order, all of it on every rank), for what an average needs at the end (SWA's BatchNorm
  /// statistics); made when asked (with data.device_resident a loader holds a copy)
  LoaderMaker train_as_eval;
  std::unique_ptr<torch::optim::Optimizer> optimizer;    ///< train and bench
  std::unique_ptr<data::Loader> train_loader;            ///< train
  std::unique_ptr<data::Loader> eval_loader;             ///< train and eval
  std::unique_ptr<data::Loader> val_loader;              ///< train, with a validation split
  int64_t steps_per_epoch = 0;                           ///< train
  int64_t total_steps = 0;                               ///< train: the schedule's length (never changed)
  ScheduleSpec schedule;                                 ///< train
};

/// Build the components `purpose` needs, in the order that fails cheapest first: data files
/// (and their fit with the model) before the model is allocated on the device.
Components build_components(const Config& cfg, const Placement& placement, Purpose purpose);

/// What a checkpoint records of the data the model was trained on, for `dlrun predict` on a
/// machine without it (state.json "dataset"): the dataset, its class names, channels, the
/// input side and the normalization.
nlohmann::json dataset_record(const Config& cfg, const data::DatasetInfo& info);

/// The checks `dlrun train` makes before it allocates anything, for `dlrun config validate`:
/// the device exists, the dataset opens and fits the model (channels, classes, at least one
/// global batch), model.init reads and fits the model, the preemption notice source can be
/// watched. Throws dlrun::Error (exit 2).
void preflight(const Config& cfg);

}  // namespace dlrun::train
