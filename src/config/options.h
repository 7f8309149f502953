// The typed options of every section of an experiment file, with their defaults.
//
// These structs ARE the config schema: src/config/schema.cpp lists each field once, with
// its YAML name, a one-line doc, its range or choices. Parsing (loader.cpp), printing
// (emit.cpp) and validation (validate.cpp) all work from that list. Components take the
// section they need (`const ModelOptions&`), never the YAML.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"

namespace dlrun {

struct RunOptions {
  std::string name = "run";        ///< experiment name; default run dir is runs/<name>
  std::string dir;                 ///< run directory (empty: runs/<name>); --run-dir overrides
  int64_t seed = 0;                ///< seed of init, sampling and augmentation
  std::string device = "auto";     ///< auto | cpu | cuda | cuda:N
  int64_t threads = 0;             ///< intra-op CPU threads (0: torch's default)
  bool deterministic = false;      ///< deterministic algorithms (bitwise-repeatable on CPU)
};

struct ModelOptions {
  std::string name;                       ///< mlp | convnet | resnet18 | resnet34 | resnet50 (required)
  int64_t num_classes = 10;               ///< output classes
  int64_t in_channels = 1;                ///< input image channels
  std::string stem = "imagenet";          ///< ResNet stem: imagenet (7x7/2 + maxpool) | cifar (3x3/1)
  std::vector<int64_t> hidden = {512, 256};  ///< mlp hidden layer widths
  double dropout = 0.0;                   ///< dropout before the classifier
  int64_t width = 32;                     ///< convnet base channel count
  bool channels_last = false;             ///< NHWC memory format for conv models
};

struct DataOptions {
  std::string name;                       ///< synthetic | fashion_mnist | mnist | cifar10 | cifar100 | image_folder (required)
  std::string root;                       ///< data directory (empty: the dataset's default)
  int64_t batch_size = 128;               ///< GLOBAL batch size per optimizer step (all ranks, all accumulation steps)
  int64_t eval_batch_size = 256;          ///< batch size for evaluation
  int64_t workers = 2;                    ///< loader worker threads (0: load in the training thread)
  int64_t prefetch = 2;                   ///< batches prepared ahead per worker
  bool pin_memory = true;                 ///< pinned host memory for CUDA copies
  bool device_resident = false;           ///< keep the whole set on the device; augment there
  bool shuffle = true;                    ///< shuffle training samples every epoch
  std::vector<std::string> augment;       ///< train transforms: flip, vflip, crop, resized_crop, rotate, translate, erase
  int64_t image_size = 0;                 ///< resize/crop target (0: native size)
  int64_t crop_padding = 4;               ///< padding of `crop`
  std::vector<double> resized_crop_scale = {0.08, 1.0};  ///< area range of `resized_crop`
  double rotate_degrees = 15.0;           ///< max rotation of `rotate`
  double translate_frac = 0.1;            ///< max shift of `translate`, fraction of the size
  double erase_p = 0.5;                   ///< probability of `erase` (random erasing)
  bool normalize = true;                  ///< normalize with mean/std
  std::vector<double> mean;               ///< per-channel mean (empty: dataset default)
  std::vector<double> std;                ///< per-channel std (empty: dataset default)
  std::vector<int64_t> synthetic_shape = {1, 28, 28};  ///< synthetic: C, H, W
  int64_t synthetic_train_size = 4096;    ///< synthetic: training samples
  int64_t synthetic_eval_size = 1024;     ///< synthetic: evaluation samples
  int64_t limit_train = 0;                ///< use only the first N training samples (0: all)
  int64_t limit_eval = 0;                 ///< use only the first N evaluation samples (0: all)
};

struct OptimOptions {
  std::string name = "sgd";               ///< sgd | adamw
  double lr = 0.1;                        ///< peak learning rate
  double momentum = 0.9;                  ///< sgd momentum
  bool nesterov = false;                  ///< sgd Nesterov momentum
  double weight_decay = 5e-4;             ///< weight decay (decoupled for adamw)
  std::vector<double> betas = {0.9, 0.999};  ///< adamw betas
  double eps = 1e-8;                      ///< adamw epsilon
  bool no_decay_norm_bias = false;        ///< no weight decay on norm layers and biases
};

struct SchedOptions {
  std::string name = "constant";          ///< constant | step | multistep | cosine | onecycle
  double warmup_epochs = 0.0;             ///< linear warmup length in epochs (fractions allowed)
  int64_t warmup_steps = 0;               ///< linear warmup length in steps (added to warmup_epochs)
  double step_size = 30.0;                ///< step: epochs between decays
  std::vector<double> milestones = {};    ///< multistep: epochs at which lr *= gamma
  double gamma = 0.1;                     ///< step/multistep decay factor
  double min_lr = 0.0;                    ///< cosine: final learning rate
  double pct_start = 0.3;                 ///< onecycle: fraction of steps spent rising
  double div_factor = 25.0;               ///< onecycle: initial lr = lr / div_factor
  double final_div_factor = 1e4;          ///< onecycle: final lr = initial lr / final_div_factor
};

struct TrainOptions {
  int64_t epochs = 1;                     ///< epochs to train (ignored when max_steps > 0)
  int64_t max_steps = 0;                  ///< optimizer steps to train (0: use epochs)
  int64_t grad_accum = 1;                 ///< micro-batches per optimizer step
  double clip_grad_norm = 0.0;            ///< clip the global gradient norm (0: off)
  double label_smoothing = 0.0;           ///< cross-entropy label smoothing
  int64_t eval_every_epochs = 1;          ///< evaluate every N epochs (0: only at the end)
  int64_t eval_every_steps = 0;           ///< evaluate every N steps (0: off)
  bool eval_at_end = true;                ///< evaluate once more after the last step
};

struct AmpOptions {
  bool enabled = false;                   ///< CUDA automatic mixed precision
  std::string dtype = "fp16";             ///< fp16 (with dynamic loss scaling) | bf16
  double init_scale = 65536.0;            ///< fp16: initial loss scale
  int64_t growth_interval = 2000;         ///< fp16: steps without overflow before the scale doubles
};

struct DistOptions {
  std::string backend = "auto";           ///< auto | nccl | cpu (auto: nccl on CUDA, cpu otherwise)
  double timeout_s = 300.0;               ///< collective / rendezvous timeout
  double bucket_mb = 25.0;                ///< gradient all-reduce bucket size
};

struct CheckpointOptions {
  std::string dir;                        ///< checkpoint directory (empty: RUN_DIR/checkpoints)
  int64_t every_steps = 0;                ///< save every N optimizer steps (0: off)
  double every_minutes = 0.0;             ///< save every N minutes of wall clock (0: off)
  int64_t keep_last = 3;                  ///< keep the newest N checkpoints (0: keep all)
  int64_t keep_every = 0;                 ///< also keep every checkpoint whose step is a multiple of N (0: off)
  bool async = true;                      ///< write in a background thread after a host copy
  bool at_end = true;                     ///< save when training finishes
  bool at_epoch_end = false;              ///< save at the end of every epoch
};

struct PreemptionOptions {
  std::string watch = "none";             ///< none | aws | gcp | azure | file
  std::string endpoint;                   ///< notice URL or file path (empty: the provider's default)
  double poll_s = 5.0;                    ///< seconds between polls
};

struct LogOptions {
  int64_t every_steps = 50;               ///< write a metrics line every N steps
  bool tensorboard = true;                ///< write TensorBoard event files
  std::string progress = "auto";          ///< auto (bar on a TTY) | bar | lines | none
};

/// A whole experiment: every section, plus where each value came from.
struct Config {
  RunOptions run;
  ModelOptions model;
  DataOptions data;
  OptimOptions optim;
  SchedOptions sched;
  TrainOptions train;
  AmpOptions amp;
  DistOptions dist;
  CheckpointOptions checkpoint;
  PreemptionOptions preemption;
  LogOptions log;

  /// The top-level file the config was loaded from ("" for a default-constructed one).
  std::string source_file;
  /// Dotted key -> where its value was set (file, line, column). Defaults are absent.
  std::map<std::string, SourceLoc> origin;

  /// Location of a key's value, or {source_file} when it was left at its default.
  SourceLoc where(const std::string& key) const;
};

}  // namespace dlrun
