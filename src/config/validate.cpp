// Cross-field validation (see validate.h). Each rule reports the key whose value is wrong.
#include "config/validate.h"

#include <arpa/inet.h>

#include <algorithm>
#include <filesystem>

#include "base/fsutil.h"
#include "base/http.h"
#include "config/remote_options.h"
#include "remote/s3.h"

namespace fs = std::filesystem;

namespace dlrun::config {
namespace {

// The config layer is below the models, so it knows families by their names' prefixes
// (src/models/resnet.cpp: resnet*, resnext*, wide_resnet*; regnet.cpp: regnet_*; convnext.cpp:
// convnext_*; swin.cpp: swin_*).
bool starts_with_any(const std::string& name, std::initializer_list<const char*> prefixes) {
  for (const char* prefix : prefixes)
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}
bool resnet_family(const std::string& name) { return starts_with_any(name, {"resnet", "resnext", "wide_resnet"}); }
// The families built of stages.
bool has_stages(const std::string& name) {
  return resnet_family(name) || starts_with_any(name, {"regnet_", "convnext_", "swin_"});
}

}  // namespace

void check_device_fit(const Config& c, bool cuda, const std::string& device) {
  if (cuda) return;
  // Name what resolved the device when the config did not say cpu itself (run.device: auto).
  const std::string why = c.run.device == device ? "run.device is " + device
                                                 : fmt::format("run.device={} resolves to {} here (no CUDA device is "
                                                               "visible: see `dlrun info`)", c.run.device, device);
  if (c.amp.enabled && c.amp.dtype == AmpDtype::kFp16)
    c.refuse("amp.dtype", "fp16 autocast needs a CUDA device, but " + why, "use amp.dtype: bf16 on the CPU");
  if (c.train.cuda_graphs) c.refuse("train.cuda_graphs", "CUDA graphs need a CUDA device, but " + why);
  if (c.dist.backend == DistBackend::kNccl)
    c.refuse("dist.backend", "nccl needs CUDA devices, but " + why, "use dist.backend=gloo (or auto)");
}

bool reads_eval_split(const Config& c) {
  const bool periodic = c.train.eval_every_epochs > 0 || c.train.eval_every_steps > 0;
  return c.train.eval_at_end || (periodic && !(c.data.val_fraction > 0)) || c.optim.swa_start_epoch > 0;
}

void check_data_present(const Config& c) {
  const std::string& ds = c.data.name;
  if (ds == "webdataset" || ds == "synthetic") return;  // shards are opened (and named) by the dataset
  const std::string root = c.data.root_or_default();
  if (!fs::is_directory(root))
    c.refuse(c.data.root.empty() ? "data.name" : "data.root", "data directory does not exist: " + root,
        ds == "fashion_mnist" && c.data.root.empty() ? "install Debian's dataset-fashion-mnist (scripts/setup.sh does)"
        : c.data.root.empty()                        ? ""
                                                     : "check data.root (set in the config or an override)");
}

std::vector<std::string> validate(const Config& c, const LaunchContext& ctx) {
  std::vector<std::string> warnings;

  const std::string& dev = c.run.device;
  const bool cuda_index = dev.size() > 5 && dev.size() <= 9 && dev.compare(0, 5, "cuda:") == 0 &&
                          dev.find_first_not_of("0123456789", 5) == std::string::npos;
  if (!(dev == "auto" || dev == "cpu" || dev == "cuda" || cuda_index))
    c.refuse("run.device", "invalid device '" + c.run.device + "'", "use auto, cpu, cuda or cuda:N");

  // Batch geometry: the global batch is split over ranks and accumulation steps.
  int64_t split = static_cast<int64_t>(ctx.world_size) * c.train.grad_accum;
  if (c.data.batch_size % split != 0)
    c.refuse("data.batch_size",
        fmt::format("global batch size {} is not divisible by world size {} x train.grad_accum {} = {}",
                    c.data.batch_size, ctx.world_size, c.train.grad_accum, split),
        fmt::format("use a multiple of {}", split));

  // Data.
  const std::string& ds = c.data.name;
  if (ds == "webdataset") {
    if (c.data.shards.empty())
      c.refuse("data.shards", "data.name=webdataset needs data.shards",
               "a directory of .tar shards, a brace pattern (train-{000000..000127}.tar) or an s3:// prefix");
    if (c.data.eval_shards.empty() && reads_eval_split(c))
      c.refuse("data.eval_shards", "data.name=webdataset needs data.eval_shards (the evaluation set's shards)",
               "or schedule no evaluation that reads it: train.eval_at_end: false, and train.eval_every_epochs: 0 "
               "(or a validation split, data.val_fraction)");
    if (c.data.image_size <= 0)
      c.refuse("data.image_size", "the images of a webdataset vary in size: set data.image_size (e.g. 224)");
  } else if (ds != "synthetic") {
    const std::string root = c.data.root_or_default();
    if (root.empty())
      c.refuse("data.root", "data.name=" + ds + " needs data.root (the directory with its files)");
    if (ds == "image_folder" && c.data.image_size <= 0)
      c.refuse("data.image_size", "the images of an image_folder vary in size: set data.image_size (e.g. 224)");
  } else {
    if (c.data.synthetic_shape.size() != 3)
      c.refuse("data.synthetic_shape", fmt::format("expected [C, H, W], got {} values", c.data.synthetic_shape.size()));
    if (c.data.synthetic_shape[0] != c.model.in_channels)
      c.refuse("data.synthetic_shape",
          fmt::format("{} channels, but model.in_channels is {}", c.data.synthetic_shape[0], c.model.in_channels));
  }
  if (!c.data.mean.empty() && static_cast<int64_t>(c.data.mean.size()) != c.model.in_channels)
    c.refuse("data.mean", fmt::format("{} values for {} channels (model.in_channels)", c.data.mean.size(), c.model.in_channels));
  if (!c.data.std.empty() && static_cast<int64_t>(c.data.std.size()) != c.model.in_channels)
    c.refuse("data.std", fmt::format("{} values for {} channels (model.in_channels)", c.data.std.size(), c.model.in_channels));
  for (size_t i = 0; i < c.data.std.size(); ++i)
    if (c.data.std[i] <= 0) c.refuse("data.std", "standard deviations must be > 0");
  if (c.data.resized_crop_scale.size() != 2 || c.data.resized_crop_scale[0] > c.data.resized_crop_scale[1] ||
      c.data.resized_crop_scale[0] <= 0)
    c.refuse("data.resized_crop_scale", "expected [min, max] with 0 < min <= max <= 1");
  if (c.data.erase_scale.size() != 2 || c.data.erase_scale[0] > c.data.erase_scale[1] || c.data.erase_scale[0] <= 0)
    c.refuse("data.erase_scale", "expected [min, max] with 0 < min <= max <= 1");
  if (c.data.erase_ratio.size() != 2 || c.data.erase_ratio[0] > c.data.erase_ratio[1] || c.data.erase_ratio[0] <= 0)
    c.refuse("data.erase_ratio", "expected [min, max] with 0 < min <= max");
  if (c.data.erase_value != EraseValue::kZero && c.data.device_resident)
    c.refuse("data.erase_value", fmt::format("{}: the device-resident path erases with zeros only",
                                             name_of(c.data.erase_value)),
             "set data.erase_value: zero, or data.device_resident: false");

  // Model.
  if (c.model.name == "mlp" && c.model.hidden.empty()) c.refuse("model.hidden", "mlp needs at least one hidden layer");
  if (c.model.activation_checkpointing == ActivationCheckpointing::kStages && !has_stages(c.model.name))
    c.refuse("model.activation_checkpointing", fmt::format("{} has no stages to checkpoint", c.model.name),
        "use blocks (or none)");

  if (c.model.zero_init_residual && !resnet_family(c.model.name))
    c.refuse("model.zero_init_residual", fmt::format("{} is not of the ResNet family, which alone has the option", c.model.name));

  // Optimizer and schedule.
  if (c.optim.betas.size() != 2) c.refuse("optim.betas", fmt::format("expected [beta1, beta2], got {} values", c.optim.betas.size()));
  if (c.sched.name == SchedName::kMultistep) {
    if (c.sched.milestones.empty()) c.refuse("sched.milestones", "multistep needs at least one milestone (in epochs)");
    for (size_t i = 1; i < c.sched.milestones.size(); ++i)
      if (c.sched.milestones[i] <= c.sched.milestones[i - 1])
        c.refuse("sched.milestones", "milestones must be strictly increasing");
  }
  const bool sgd_like = c.optim.name == OptimName::kSgd || c.optim.name == OptimName::kLars;
  if (!sgd_like && c.optim.nesterov)
    warnings.push_back(fmt::format("optim.nesterov has no effect with {}", name_of(c.optim.name)));
  if (sgd_like && c.optim.nesterov && !(c.optim.momentum > 0))
    c.refuse("optim.nesterov", "Nesterov momentum needs optim.momentum > 0");

  // Devices.
  if (c.amp.enabled && c.model.dtype == ModelDtype::kFloat64)
    c.refuse("amp.enabled", "automatic mixed precision needs model.dtype float32, but it is float64");
  if (c.run.device == "cpu") check_device_fit(c, false, "cpu");
  if (c.data.device_resident && c.data.augment.size() && c.data.workers > 0)
    warnings.push_back("data.workers is unused with data.device_resident: true");

  // The automatic augmentation policies (src/data/policies.h).
  std::vector<std::string> policies;
  for (const auto& a : c.data.augment)
    if (a == "trivial_augment" || a == "rand_augment" || a == "auto_augment" || a == "augmix") policies.push_back(a);
  if (policies.size() > 1)
    c.refuse("data.augment", fmt::format("{} and {}: one automatic augmentation policy at a time", policies[0], policies[1]));
  const bool jitter = std::find(c.data.augment.begin(), c.data.augment.end(), "color_jitter") != c.data.augment.end();
  if (jitter) policies.push_back("color_jitter");
  if (!policies.empty() && c.data.device_resident)
    c.refuse("data.augment", fmt::format("{} runs in the loader's CPU workers, not on the device", policies[0]),
             "set data.device_resident: false");
  if (c.data.color_jitter.size() != 4)
    c.refuse("data.color_jitter",
             fmt::format("expected [brightness, contrast, saturation, hue], got {} values", c.data.color_jitter.size()));
  else if (c.data.color_jitter[3] > 0.5)
    c.refuse("data.color_jitter", fmt::format("hue {} is outside [0, 0.5]: a shift of the hue circle by more than "
                                              "half a turn is the same as a smaller one the other way", c.data.color_jitter[3]));
  if (c.train.clip_grad_value > 0 && c.train.clip_grad_norm > 0)
    c.refuse("train.clip_grad_value", "one clipping at a time: train.clip_grad_norm is set too",
             "choose one, as timm's --clip-mode does: train.clip_grad_norm or train.clip_grad_value");
  const int64_t eval_side = c.data.eval_image_size > 0 ? c.data.eval_image_size : c.data.image_size;
  if (c.data.eval_resize_size > 0 && eval_side > 0 && c.data.eval_resize_size < eval_side)
    c.refuse("data.eval_resize_size",
             fmt::format("{} is smaller than the center crop it is cut to ({})", c.data.eval_resize_size, eval_side),
             "torchvision's recipes resize to 232 or 256 and crop 224");
  if (c.data.eval_resize_size > 0 && eval_side <= 0)
    c.refuse("data.eval_resize_size", "a resize before the center crop needs the crop's side",
             "set data.eval_image_size (or data.image_size)");
  const bool rand_augment = std::find(policies.begin(), policies.end(), "rand_augment") != policies.end();
  if (rand_augment && c.data.rand_augment_magnitude >= c.data.magnitude_bins)
    c.refuse("data.rand_augment_magnitude",
             fmt::format("{} is not a bin of the tables of data.magnitude_bins {} (0 to {})",
                         c.data.rand_augment_magnitude, c.data.magnitude_bins, c.data.magnitude_bins - 1));

  // Validation, the best checkpoint, early stopping.
  if (c.data.val_fraction > 0 && c.data.name == "webdataset")
    c.refuse("data.val_fraction", "a webdataset streams its shards in order: no samples can be held out of them",
             "set data.eval_shards to held-out shards instead");
  const bool evaluates = c.train.eval_every_epochs > 0 || c.train.eval_every_steps > 0;
  if (c.checkpoint.keep_best != EvalMetric::kNone && !evaluates)
    c.refuse("checkpoint.keep_best", "the best checkpoint is chosen at evaluations, and none is scheduled",
             "set train.eval_every_epochs or train.eval_every_steps");
  if (c.train.micro_batch == MicroBatch::kAuto && c.dist.sync_bn)
    c.refuse("train.micro_batch",
             "auto cannot be combined with dist.sync_bn: synchronised BatchNorm exchanges statistics inside the "
             "forward and backward, where a rank that runs out of memory would leave the others waiting",
             "choose one: train.micro_batch: off, or dist.sync_bn: false");
  if (c.train.ema_decay >= 1)
    c.refuse("train.ema_decay", fmt::format("{} leaves the average where it started; the decay must be below 1",
                                            c.train.ema_decay),
             "0.999 to 0.9999 are usual (the average spans about 1 / (1 - decay) updates); 0 turns it off");
  if (c.optim.swa_start_epoch > 0 && !(c.optim.swa_lr > 0))
    c.refuse("optim.swa_lr", "stochastic weight averaging (optim.swa_start_epoch) needs the rate SWALR anneals to",
             "e.g. optim.swa_lr=0.05; PyTorch's SWALR has no default either");
  if (c.optim.swa_start_epoch > 0 && c.train.max_steps == 0 && c.optim.swa_start_epoch >= c.train.epochs)
    c.refuse("optim.swa_start_epoch",
             fmt::format("averaging would begin at epoch {} (0-based), but the run has {} epoch(s): nothing would be "
                         "averaged",
                         c.optim.swa_start_epoch, c.train.epochs),
             "start it a few epochs before the end (the SWA paper averages the last 25 % of the epochs)");
  if (c.optim.swa_start_epoch > 0 && !c.checkpoint.at_end)
    warnings.push_back("optim.swa_start_epoch with checkpoint.at_end: false: the finished average (with its "
                       "recomputed BatchNorm statistics) is saved in no checkpoint; only summary.json and the swa "
                       "event report it, and `dlrun export --weights swa` has nothing to export");
  if (c.train.early_stop != EvalMetric::kNone && !evaluates)
    c.refuse("train.early_stop", "early stopping decides at evaluations, and none is scheduled",
             "set train.eval_every_epochs or train.eval_every_steps");
  if (!c.model.init.empty() && c.model.init.rfind("s3://", 0) == 0)
    c.refuse("model.init", "weights are read from a local path", "download them first (e.g. dlrun export from s3://)");

  // The live metrics endpoint (metrics/openmetrics.h).
  if (c.log.metrics_port > 0) {
    in_addr a{};
    if (::inet_pton(AF_INET, c.log.metrics_address.c_str(), &a) != 1)
      c.refuse("log.metrics_address", fmt::format("'{}' is not an IPv4 address", c.log.metrics_address),
               "127.0.0.1 serves this machine only; 0.0.0.0 every interface");
  }

  // Preemption.
  if (c.preemption.watch == NoticeSource::kFile && c.preemption.endpoint.empty())
    c.refuse("preemption.endpoint", "preemption.watch=file needs the path to watch in preemption.endpoint");

  // Checkpoints.
  if (!c.checkpoint.remote.empty()) {
    try {
      remote::parse_s3_url(c.checkpoint.remote);
    } catch (const Error& e) {
      c.refuse("checkpoint.remote", e.message(), "write s3://BUCKET/PREFIX, e.g. s3://my-bucket/runs/exp1");
    }
    if (!http::available())
      c.refuse("checkpoint.remote", "this dlrun was built without libcurl, which remote checkpoints need",
          "install libcurl4-openssl-dev and rebuild (scripts/setup.sh does)");
    const std::string& endpoint = c.checkpoint.remote_endpoint;
    if (!endpoint.empty() && !plain_http_allowed(endpoint, c.checkpoint.remote_allow_unencrypted_http))
      c.refuse("checkpoint.remote_endpoint",
               fmt::format("{} is plain http to another host: checkpoints, requests and the session token would travel "
                           "unencrypted", endpoint),
               "use https://; or, on a network you trust, say so: checkpoint.remote_allow_unencrypted_http: true");
    const std::string& ca = c.checkpoint.remote_ca_bundle;
    if (!ca.empty() && !fsutil::is_regular_file(ca))
      c.refuse("checkpoint.remote_ca_bundle", ca + " is not a file",
               "name the PEM file of the certificate authorities that sign the store's certificate");
  }
  // Server-side encryption: the key and the bucket key belong to SSE-KMS.
  if (c.checkpoint.remote_sse != ServerSideEncryption::kKms) {
    if (!c.checkpoint.remote_sse_kms_key_id.empty())
      c.refuse("checkpoint.remote_sse_kms_key_id", "a KMS key is used by SSE-KMS only",
               "set checkpoint.remote_sse: aws:kms as well");
    if (c.checkpoint.remote_sse_bucket_key)
      c.refuse("checkpoint.remote_sse_bucket_key", "an S3 Bucket Key belongs to SSE-KMS only",
               "set checkpoint.remote_sse: aws:kms as well");
  }
  if (is_auto(c.checkpoint.every_minutes) && !(c.preemption.mtbf_hours > 0))
    c.refuse("checkpoint.every_minutes",
        "auto needs the mean time between interruptions: set preemption.mtbf_hours (e.g. 24 for an instance type "
        "that is reclaimed about once a day)");
  if (c.checkpoint.keep_last == 0 && c.checkpoint.keep_every > 0)
    warnings.push_back("checkpoint.keep_every has no effect with keep_last: 0 (every checkpoint is kept)");
  return warnings;
}

}  // namespace dlrun::config
