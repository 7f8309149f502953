// build_components and its checks (see components.h).
#include "train/components.h"

#include <fmt/ranges.h>

#include "base/error.h"
#include "base/log.h"
#include "config/remote_options.h"
#include "config/validate.h"
#include "data/subset.h"
#include "preempt/preempt.h"
#include "train/observe/outputs.h"
#include "checkpoint/remote_store.h"
#include "train/state/checkpointer.h"
#include "train/state/init_weights.h"
#include "train/step/optim.h"

namespace dlrun::train {

namespace {

// The image side the model is built for: the dataset's native size, else data.image_size
// (only mlp depends on it; the conv models pool adaptively).
int64_t input_side(const Config& c, const data::DatasetInfo& info) {
  if (info.height > 0) return info.height;
  return c.data.image_size > 0 ? c.data.image_size : 224;
}

// A model built for one image side (ViT and Swin, any model given model.image_size, the mlp)
// cannot evaluate at another: said before training, not at the first evaluation.
void check_eval_side(const Config& c, int64_t train_side) {
  const int64_t eval_side = c.data.eval_image_size;
  if (eval_side <= 0 || eval_side == train_side) return;
  for (const models::ZooEntry& z : models::zoo())
    if (z.name == c.model.name && (z.fixed_image_size || c.model.image_size > 0 || z.family == "mlp"))
      throw Error(ExitCode::kBadInput, SourceLoc{}, "data.eval_image_size",
                  fmt::format("{} is built for {}x{} images, and the evaluation crops {}x{}", c.model.name,
                              train_side, train_side, eval_side, eval_side),
                  "leave data.eval_image_size unset (0: the training side) for this model");
}

}  // namespace

Datasets open_datasets(const Config& c, Purpose purpose) {
  Datasets d;
  if (purpose == Purpose::kBench) return d;
  config::check_data_present(c);
  if (purpose == Purpose::kTrain) {
    d.train = data::open(c.data, data::Split::kTrain, c.run.seed);
    if (c.data.val_fraction > 0) {
      data::Holdout h = data::holdout(d.train->size(), c.data.val_fraction);
      const auto full = d.train;
      d.val = data::subset(full, std::move(h.val));
      d.train = data::subset(full, std::move(h.train));
    } else if (c.data.name == "image_folder" && data::image_folder_has_test(c.data.root)) {
      d.val = data::open(c.data, data::Split::kVal, c.run.seed);
    }
  }
  // (a webdataset run that reads no evaluation split may have no data.eval_shards)
  if (!(purpose == Purpose::kTrain && c.data.name == "webdataset" && c.data.eval_shards.empty() &&
        !config::reads_eval_split(c)))
    d.eval = data::open(c.data, data::Split::kEval, c.run.seed);
  d.info = (d.train ? d.train : d.eval)->info();
  if (d.info.channels != c.model.in_channels)
    c.refuse("model.in_channels",
        fmt::format("data.name={} has {} channel(s) but model.in_channels is {}", c.data.name, d.info.channels,
                    c.model.in_channels));
  if (d.info.num_classes > c.model.num_classes)
    c.refuse("model.num_classes",
        fmt::format("data.name={} has {} classes but model.num_classes is {}", c.data.name, d.info.num_classes,
                    c.model.num_classes));
  if (d.train && d.train->size() < c.data.batch_size)
    c.refuse("data.batch_size",
        fmt::format("the training set ({} samples) is smaller than one global batch ({})", d.train->size(),
                    c.data.batch_size));
  return d;
}

/// optim.swa_start_epoch must leave at least one epoch end to average at: the average takes the
/// weights at epoch ends from epoch swa_start_epoch on (0-based: the end of that epoch, step
/// (start + 1) x steps per epoch), so a run that ends before it averages nothing. `train` and
/// `config validate` both check it.
static int64_t total_steps_of(const Config& c, int64_t steps_per_epoch) {
  return c.train.max_steps > 0 ? c.train.max_steps : c.train.epochs * steps_per_epoch;
}

static void check_swa_averages(const Config& c, int64_t steps_per_epoch) {
  if (c.optim.swa_start_epoch <= 0) return;
  const int64_t total_steps = total_steps_of(c, steps_per_epoch);
  const int64_t first_average = (c.optim.swa_start_epoch + 1) * steps_per_epoch;
  if (first_average > total_steps)
    throw Error(ExitCode::kBadInput, c.where("optim.swa_start_epoch"), "optim.swa_start_epoch",
                fmt::format("the first average would be taken at the end of epoch {} (step {}, {} steps an epoch), "
                            "but the run ends at step {}{}: nothing would be averaged",
                            c.optim.swa_start_epoch + 1, first_average, steps_per_epoch, total_steps,
                            c.train.max_steps > 0 ? " (train.max_steps)" : ""),
                "averages are taken at epoch ends: start it a few epochs before the end (the SWA paper averages "
                "the last 25 % of the epochs)");
}

Components build_components(const Config& c, const Placement& placement, Purpose purpose) {
  Components out;
  out.placement = placement;
  out.data = open_datasets(c, purpose);

  data::LoaderSpec spec;
  spec.seed = c.run.seed;
  spec.rank = placement.rank;
  spec.world_size = placement.world_size;
  spec.grad_accum = c.train.grad_accum;
  spec.device = placement.device;
  if (out.data.train) {
    out.train_loader = std::make_unique<data::Loader>(out.data.train, c.data, spec);
    out.steps_per_epoch = out.train_loader->steps_per_epoch();
    out.total_steps = total_steps_of(c, out.steps_per_epoch);
    out.schedule = ScheduleSpec{c.sched, c.optim.lr, out.total_steps, out.steps_per_epoch,
                                c.optim.swa_start_epoch, c.optim.swa_lr, c.optim.swa_anneal_epochs};
    check_swa_averages(c, out.steps_per_epoch);
  }
  if (out.data.train) {  // what an average reads at the end (update_bn): every rank reads all of it
    data::LoaderSpec whole = spec;
    whole.train = false;
    whole.rank = 0;
    whole.world_size = 1;
    whole.grad_accum = 1;
    out.train_as_eval = [train = out.data.train, &opts = c.data, whole] {
      return std::make_unique<data::Loader>(train, opts, whole);
    };
  }
  if (out.data.eval) {
    spec.train = false;
    out.eval_loader = std::make_unique<data::Loader>(out.data.eval, c.data, spec);
    if (out.data.val) out.val_loader = std::make_unique<data::Loader>(out.data.val, c.data, spec);
  }

  if (out.eval_loader || out.val_loader) check_eval_side(c, input_side(c, out.data.info));
  out.model = models::build(c.model, c.run.seed, input_side(c, out.data.info));
  out.model->to(placement.device);
  out.model->use_fused_conv_bn_relu(use_fused_kernels(c, placement.device));
  // Inside the fused operators on CUDA: dlrun's kernels or cuDNN's fused BatchNorm-activation.
  kernels::set_cuda_bn_path(batchnorm_path(c, placement.device).path == kernels::BnPath::kCudnn ? kernels::BnPath::kCudnn
                                                                                             : kernels::BnPath::kDlrun);
  // A self-check that finds the fused kernels wrong: true and cudnn fail the run (exit 1), auto
  // falls back.
  const auto asked = c.model.fused_conv_bn_relu;
  kernels::set_on_mismatch(asked == FusedKernels::kOn || asked == FusedKernels::kCudnn ? kernels::OnMismatch::kFail
                                                                                     : kernels::OnMismatch::kFallBack);
  if (purpose == Purpose::kTrain)  // each average in a model built as the model is (same weights, device, flags)
    out.averages = build_averages(c, *out.model, [&] {
      auto copy = models::build(c.model, c.run.seed, input_side(c, out.data.info));
      copy->to(placement.device);
      copy->use_fused_conv_bn_relu(out.model->fused_conv_bn_relu());
      copy->eval();
      return copy;
    });
  if (purpose == Purpose::kEval) {
    out.model->eval();
  } else {
    out.model->train();
    out.optimizer = build_optimizer(c.optim, *out.model);
  }
  return out;
}

std::string Datasets::describe() const {
  const int64_t n_train = train ? train->size() : 0, n_eval = eval ? eval->size() : 0;
  return val ? fmt::format("{} train / {} validation / {} test samples", n_train, val->size(), n_eval)
             : fmt::format("{} train / {} eval samples", n_train, n_eval);
}

nlohmann::json dataset_record(const Config& c, const data::DatasetInfo& info) {
  const auto& mean = c.data.mean.empty() ? info.mean : c.data.mean;
  const auto& std = c.data.std.empty() ? info.std : c.data.std;
  return {{"name", c.data.name}, {"classes", info.class_names}, {"channels", info.channels},
          {"image_size", input_side(c, info)}, {"mean", mean}, {"std", std}};
}

void preflight(const Config& cfg) {
  const torch::Device device = resolve_device(cfg.run);
  config::check_device_fit(cfg, device.is_cuda(), device.str());
  const Datasets d = open_datasets(cfg, Purpose::kTrain);
  if (d.eval || d.val) check_eval_side(cfg, input_side(cfg, d.info));
  if (!cfg.model.init.empty()) {  // read and fitted on the CPU, as a fresh run would load it
    auto model = models::build(cfg.model, cfg.run.seed, input_side(cfg, d.info));
    load_init_weights(cfg, *model);
  }
  preempt::check_notice_source(cfg.preemption);
  // What `train` meets before its first step, checked the same way.
  if (d.train) check_swa_averages(cfg, d.train->size() / cfg.data.batch_size);
  // The store as train checks it before anything is written: credentials, bucket, every
  // permission, TLS (a probe object written, read and removed).
  if (!cfg.checkpoint.remote.empty()) (void)Checkpointer::connect_checked(cfg.checkpoint);
  (void)open_endpoint(cfg, Placement{});  // log.metrics_port free (bound, then closed again)
}

}  // namespace dlrun::train
