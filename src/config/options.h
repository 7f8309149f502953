// The typed options of every section of an experiment file, with their defaults.
//
// These structs hold values and defaults only. What each key means, its range and its choices
// are written once, in the schema table (src/config/schema.cpp), which parsing, `config show`,
// RUN_DIR/config.yaml and docs/configuration.md are all produced from. Closed sets of choices
// are enums whose names are listed right here, next to them (EnumNames); open sets keyed by a
// registry (model.name, data.name, data.augment) are strings, and a test checks that each
// registry's names equal the schema's choices. Components take the section they need
// (`const ModelOptions&`), never the YAML.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"

namespace dlrun {

// ---- closed choices: one enum each, its names in declaration order ----------------------

enum class OptimName { kSgd, kAdamw, kRmsprop, kRmspropTf, kLamb, kLars };
enum class SchedName { kConstant, kStep, kMultistep, kCosine, kOnecycle };
enum class ResnetStem { kImagenet, kCifar };
enum class ModelDtype { kFloat32, kFloat64 };
enum class ActivationCheckpointing { kNone, kBlocks, kStages };
enum class AmpDtype { kFp16, kBf16 };
enum class DistBackend { kAuto, kNccl, kGloo };
enum class NoticeSource { kNone, kAws, kGcp, kAzure, kFile };
enum class ProgressMode { kAuto, kBar, kLines, kNone };
enum class NonfinitePolicy { kStop, kSkip };
enum class S3Addressing { kAuto, kPath, kVirtual };
enum class TlsFloor { k1_2, k1_3 };
enum class ServerSideEncryption { kNone, kS3, kKms };
enum class SaveErrorPolicy { kContinue, kStop };
enum class BadSamplePolicy { kError, kSkip };
enum class FusedKernels { kAuto, kOn, kOff, kCudnn };
enum class MicroBatch { kOff, kAuto };
enum class AutoAugmentPolicy { kImagenet, kCifar10, kSvhn };
enum class PolicyInterpolation { kNearest, kBilinear };
enum class EraseValue { kZero, kPerChannel, kPerPixel };
enum class EvalMetric { kNone, kAccuracy, kTop5, kLoss };

/// The config spelling of each value of an enum, indexed by the enum's value.
template <typename E>
struct EnumNames;
template <> struct EnumNames<OptimName> {
  static constexpr std::array<const char*, 6> names{"sgd", "adamw", "rmsprop", "rmsprop_tf", "lamb", "lars"};
};
template <> struct EnumNames<SchedName> {
  static constexpr std::array<const char*, 5> names{"constant", "step", "multistep", "cosine", "onecycle"};
};
template <> struct EnumNames<ResnetStem> { static constexpr std::array<const char*, 2> names{"imagenet", "cifar"}; };
template <> struct EnumNames<ModelDtype> { static constexpr std::array<const char*, 2> names{"float32", "float64"}; };
template <> struct EnumNames<ActivationCheckpointing> {
  static constexpr std::array<const char*, 3> names{"none", "blocks", "stages"};
};
template <> struct EnumNames<AmpDtype> { static constexpr std::array<const char*, 2> names{"fp16", "bf16"}; };
template <> struct EnumNames<DistBackend> { static constexpr std::array<const char*, 3> names{"auto", "nccl", "gloo"}; };
template <> struct EnumNames<NoticeSource> {
  static constexpr std::array<const char*, 5> names{"none", "aws", "gcp", "azure", "file"};
};
template <> struct EnumNames<ProgressMode> { static constexpr std::array<const char*, 4> names{"auto", "bar", "lines", "none"}; };
template <> struct EnumNames<NonfinitePolicy> { static constexpr std::array<const char*, 2> names{"stop", "skip"}; };
template <> struct EnumNames<S3Addressing> { static constexpr std::array<const char*, 3> names{"auto", "path", "virtual"}; };
template <> struct EnumNames<TlsFloor> { static constexpr std::array<const char*, 2> names{"1.2", "1.3"}; };
// S3's own names (x-amz-server-side-encryption): SSE-S3 is AES256, SSE-KMS aws:kms.
template <> struct EnumNames<ServerSideEncryption> {
  static constexpr std::array<const char*, 3> names{"none", "AES256", "aws:kms"};
};
template <> struct EnumNames<SaveErrorPolicy> { static constexpr std::array<const char*, 2> names{"continue", "stop"}; };
template <> struct EnumNames<BadSamplePolicy> { static constexpr std::array<const char*, 2> names{"error", "skip"}; };
template <> struct EnumNames<EvalMetric> {
  static constexpr std::array<const char*, 4> names{"none", "accuracy", "top5", "loss"};
};
// model.fused_conv_bn_relu: the YAML booleans are two of its values.
template <> struct EnumNames<FusedKernels> {
  static constexpr std::array<const char*, 4> names{"auto", "true", "false", "cudnn"};
};
template <> struct EnumNames<MicroBatch> { static constexpr std::array<const char*, 2> names{"off", "auto"}; };
template <> struct EnumNames<PolicyInterpolation> {
  static constexpr std::array<const char*, 2> names{"nearest", "bilinear"};
};
template <> struct EnumNames<EraseValue> {
  static constexpr std::array<const char*, 3> names{"zero", "per_channel", "per_pixel"};
};
template <> struct EnumNames<AutoAugmentPolicy> {
  static constexpr std::array<const char*, 3> names{"imagenet", "cifar10", "svhn"};
};

/// Float keys that also accept `auto` hold it as NaN.
inline bool is_auto(double v) { return v != v; }

/// "adamw" for OptimName::kAdamw.
template <typename E>
const char* name_of(E value) {
  return EnumNames<E>::names.at(static_cast<size_t>(value));
}

/// The value whose config spelling is `text` (kAdamw for "adamw"): the inverse of name_of,
/// or nullopt when `text` names no value of E.
template <typename E>
std::optional<E> parse_enum(const std::string& text) {
  const auto& names = EnumNames<E>::names;
  for (size_t i = 0; i < names.size(); ++i)
    if (text == names[i]) return static_cast<E>(i);
  return std::nullopt;
}

/// parse_enum, for a value given on the command line: a name that is none of E's is
/// dlrun::Error (exit 2) "<what> <text>: expected one of <names, comma-separated>", where
/// `what` is the flag ("--checkpointing").
template <typename E>
E parse_enum_or_fail(const std::string& text, const std::string& what) {
  if (const std::optional<E> value = parse_enum<E>(text)) return *value;
  std::string names;
  for (const char* name : EnumNames<E>::names) names += (names.empty() ? "" : ", ") + std::string(name);
  fail_input("{} {}: expected one of {}", what, text, names);
}

// ---- sections ------------------------------------------------------------------------------

struct RunOptions {
  std::string name = "run";
  std::string dir;
  int64_t seed = 0;
  std::string device = "auto";
  int64_t threads = 0;
  bool deterministic = false;
  double lock_wait_s = 120;  ///< dlrun.lock held by a process on another host: wait, then exit 75
  double price_per_hour = 0;  ///< the job's machines per hour, for the cost in summary.json (0: DLRUN_PRICE_PER_HOUR or none)
};

struct ModelOptions {
  std::string name;
  int64_t num_classes = 10;
  int64_t in_channels = 1;
  ResnetStem stem = ResnetStem::kImagenet;
  std::vector<int64_t> hidden = {512, 256};
  double dropout = 0.0;
  /// Stochastic depth's largest drop probability (the last block's; torchvision's linear rule
  /// over the blocks); NaN: auto, the family's torchvision default (EfficientNet 0.2), 0 off.
  double stochastic_depth = std::numeric_limits<double>::quiet_NaN();
  /// The image side the model is built for and takes: the transformers' position embeddings
  /// depend on it. 0: the family's (ViT 224); the convolutional families take any side (at least
  /// their smallest), and a side given here must be the data's.
  int64_t image_size = 0;
  /// The ResNet family's last BatchNorm of each residual block starts at gamma 0 (torchvision's
  /// zero_init_residual): each block starts as the identity.
  bool zero_init_residual = false;
  int64_t width = 32;
  bool channels_last = false;
  ModelDtype dtype = ModelDtype::kFloat32;
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::kNone;
  FusedKernels fused_conv_bn_relu = FusedKernels::kAuto;
  std::string init;         ///< weights to start from (checkpoint, run dir, safetensors, torch file); "" none
  bool init_strict = true;  ///< every name of the model and of the file must match (the head excepted)
};

struct DataOptions {
  std::string name;
  std::string root;
  int64_t batch_size = 128;
  int64_t eval_batch_size = 256;
  int64_t workers = 2;
  int64_t prefetch = 2;
  bool pin_memory = true;
  bool device_resident = false;
  bool shuffle = true;
  std::vector<std::string> augment;
  int64_t image_size = 0;
  int64_t crop_padding = 4;
  std::vector<double> resized_crop_scale = {0.08, 1.0};
  double rotate_degrees = 15.0;
  double translate_frac = 0.1;
  double erase_p = 0.5;
  std::vector<double> erase_scale = {0.02, 0.33};  ///< the erased box's share of the image
  std::vector<double> erase_ratio = {0.3, 3.3};    ///< its aspect ratio (height / width)
  EraseValue erase_value = EraseValue::kZero;      ///< what fills it (normalized values)
  // The automatic augmentation policies (data/policies.h), as torchvision's classes take them.
  int64_t magnitude_bins = 31;          ///< trivial_augment, rand_augment: num_magnitude_bins
  int64_t rand_augment_ops = 2;         ///< rand_augment: num_ops
  int64_t rand_augment_magnitude = 9;   ///< rand_augment: magnitude, a bin of the table
  AutoAugmentPolicy auto_augment_policy = AutoAugmentPolicy::kImagenet;  ///< auto_augment: which policy
  /// How the policies' shears, translations and rotations sample (torchvision's interpolation)
  PolicyInterpolation policy_interpolation = PolicyInterpolation::kNearest;
  // augmix (torchvision's AugMix): severity, mixture width, chain depth (-1: 1 to 3), Dirichlet alpha.
  int64_t augmix_severity = 3;
  int64_t augmix_width = 3;
  int64_t augmix_depth = -1;
  double augmix_alpha = 1.0;
  /// color_jitter (torchvision's ColorJitter): [brightness, contrast, saturation, hue]
  std::vector<double> color_jitter = {0.4, 0.4, 0.4, 0.0};
  /// Repeated augmentation (timm's RepeatAugSampler): each sample of an epoch's order visited this
  /// many times in a row, each time augmented apart, the order cut to the set's size (1: off).
  int64_t repeated_aug = 1;
  int64_t eval_image_size = 0;   ///< the evaluation's center crop (0: image_size)
  int64_t eval_resize_size = 0;  ///< the evaluation's shorter side before the crop (0: see docs/data.md)
  bool normalize = true;
  std::vector<double> mean;
  std::vector<double> std;
  std::vector<int64_t> synthetic_shape = {1, 28, 28};
  int64_t synthetic_train_size = 4096;
  int64_t synthetic_eval_size = 1024;
  int64_t limit_train = 0;
  int64_t limit_eval = 0;
  double val_fraction = 0.0;  ///< share of the training set held out for validation (0: none)
  // webdataset (docs/data.md "Sharded datasets")
  std::string shards;       ///< training shards: a directory, a brace pattern or an s3:// prefix
  std::string eval_shards;  ///< evaluation shards (same forms)
  int64_t shuffle_block = 8;     ///< shards whose samples are shuffled together
  int64_t fetch_ahead = 0;       ///< shards fetched ahead of the one being read (0: one shuffle block)
  int64_t fetch_threads = 4;     ///< background fetch threads
  std::string cache_dir;         ///< local copies of remote shards ("": ~/.cache/dlrun/shards)
  double cache_limit_gb = 20.0;  ///< the cache's size limit
  double retry_s = 120.0;        ///< how long an unreachable store is retried before the run fails
  bool allow_unencrypted_http = false;  ///< s3:// shards over plain http:// to a host that is not this one
  bool jpeg_roi_decode = true;   ///< decode JPEGs at a DCT scale, only the rows and columns the crop needs
  /// A sample that does not decode (docs/data.md, "A damaged image"): error (exit 2 naming it)
  /// or skip (replaced, named and counted in summary.json), at most max_bad_samples of them.
  BadSamplePolicy on_bad_sample = BadSamplePolicy::kError;
  int64_t max_bad_samples = 100;

  /// The directory the dataset reads from: `root`, or the dataset's default location
  /// (Debian's dataset-fashion-mnist for fashion_mnist; "" when there is none).
  std::string root_or_default() const;
};

struct OptimOptions {
  OptimName name = OptimName::kSgd;
  double lr = 0.1;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 5e-4;
  std::vector<double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double alpha = 0.99;    ///< rmsprop: the smoothing of the squared gradient's running mean
  bool centered = false;  ///< rmsprop: divide by the gradient's running variance, not its mean square
  double trust_coeff = 0.001;  ///< lars: the trust coefficient of the layer-wise rate
  bool trust_clip = false;     ///< lamb, lars: the trust ratio at most 1 (LAMBC / LARC)
  bool always_adapt = false;   ///< lamb, lars: adapt the rate of parameters without weight decay too
  double max_grad_norm = 1.0;  ///< lamb: the global gradient norm its update clips to (0: none)
  /// No weight decay on biases, norms and the model's embeddings (ViT's class token and position
  /// embedding, Swin's relative position tables): train/step/param_groups.h.
  bool no_decay_norm_bias = false;
  /// Layer-wise learning-rate decay (BEiT, timm): the rate of layer i of L+1 is scaled by
  /// layer_decay^(L+1-i), blocks counted from the input (0 or 1: off). train/step/param_groups.h.
  double layer_decay = 0.0;
  int64_t swa_start_epoch = 0;     ///< stochastic weight averaging from this epoch (0: off), train/averaging/swa.h
  double swa_lr = 0.0;             ///< SWALR's target learning rate (needed with swa_start_epoch)
  int64_t swa_anneal_epochs = 10;  ///< SWALR: epochs of cosine annealing from the schedule's rate to swa_lr
};

struct SchedOptions {
  SchedName name = SchedName::kConstant;
  double warmup_epochs = 0.0;
  int64_t warmup_steps = 0;
  double step_size = 30.0;
  std::vector<double> milestones = {};
  double gamma = 0.1;
  double min_lr = 0.0;
  double pct_start = 0.3;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
};

struct TrainOptions {
  int64_t epochs = 1;
  int64_t max_steps = 0;
  int64_t grad_accum = 1;
  /// auto: a step that runs out of device memory is redone with each micro-batch split in two
  /// (again until it fits), and the split is kept (train/step/step.h)
  MicroBatch micro_batch = MicroBatch::kOff;
  double clip_grad_norm = 0.0;
  double clip_grad_value = 0.0;  ///< clamp every gradient value to [-v, v] (0: off)
  double label_smoothing = 0.0;
  // Batch mixing (train/step/mixing.h): MixUp and CutMix as torchvision's, chosen as timm's Mixup.
  double mixup_alpha = 0.0;      ///< MixUp's Beta(alpha, alpha) (0: off)
  double cutmix_alpha = 0.0;     ///< CutMix's Beta(alpha, alpha) (0: off)
  double mix_prob = 1.0;         ///< the share of micro-batches mixed
  double mix_switch_prob = 0.5;  ///< with both: the share mixed by CutMix
  int64_t eval_every_epochs = 1;
  int64_t eval_every_steps = 0;
  bool eval_at_end = true;
  NonfinitePolicy nonfinite = NonfinitePolicy::kStop;
  bool cudnn_benchmark = true;
  bool tf32 = true;
  bool cuda_graphs = false;
  EvalMetric early_stop = EvalMetric::kNone;  ///< end the run when this metric stops improving
  int64_t early_stop_patience = 5;            ///< evaluations without improvement before stopping
  double early_stop_min_delta = 0.0;          ///< what counts as an improvement
  double ema_decay = 0.0;       ///< an exponential moving average of the weights (0: off), train/averaging/ema.h
  int64_t ema_every_steps = 1;  ///< update the average every N optimizer steps
  int64_t ema_start_step = 0;   ///< through this step the average copies the weights (timm's update_after_step)
  bool ema_warmup = false;      ///< timm's warmup: decay at update t = min(ema_decay, 1 - (1 + t)^(-2/3))
};

struct AmpOptions {
  bool enabled = false;
  AmpDtype dtype = AmpDtype::kFp16;
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

struct DistOptions {
  DistBackend backend = DistBackend::kAuto;
  double timeout_s = 300.0;
  /// A peer silent this long is lost: the survivors save and exit 75 (0: off). Heartbeats come
  /// from a thread of their own every second, so a slow step or a long evaluation does not stop
  /// them; a process frozen longer (SIGSTOP, swapping) would be taken for lost.
  double peer_timeout_s = 5.0;
  double bucket_mb = 25.0;
  bool sync_bn = false;  ///< BatchNorm statistics over the global batch (all ranks)
};

struct CheckpointOptions {
  std::string dir;
  int64_t every_steps = 0;
  double every_minutes = 0.0;  ///< NaN: auto (Young/Daly)
  int64_t keep_last = 3;
  int64_t keep_every = 0;
  bool async = true;
  bool at_end = true;
  bool at_epoch_end = false;
  EvalMetric keep_best = EvalMetric::kNone;  ///< keep the best checkpoint by this metric as BEST
  std::string remote;
  std::string remote_endpoint;
  std::string remote_region;
  S3Addressing remote_addressing = S3Addressing::kAuto;
  int64_t remote_part_mb = 512;
  std::string remote_ca_bundle;               ///< the CAs to trust, a PEM file ("": $AWS_CA_BUNDLE, else the system's)
  TlsFloor remote_tls_min = TlsFloor::k1_2;   ///< a store that offers less is refused
  bool remote_allow_unencrypted_http = false; ///< plain http:// to a host that is not this one
  ServerSideEncryption remote_sse = ServerSideEncryption::kNone;  ///< asked of every object uploaded
  std::string remote_sse_kms_key_id;          ///< aws:kms: the key ("": the account's aws/s3 key)
  bool remote_sse_bucket_key = false;         ///< aws:kms: an S3 Bucket Key
  SaveErrorPolicy on_error = SaveErrorPolicy::kContinue;  ///< a failed periodic write or upload
  int64_t max_failed_saves = 3;  ///< consecutive failed periodic saves before exit 1 (0: no limit)
  double remote_wait_s = 300;    ///< an unreachable store at resume: retries before exit 75
  double remote_history_s = 60;  ///< the run's history (metrics.jsonl, TensorBoard) to the store this often (0: with checkpoints only)
};

struct PreemptionOptions {
  NoticeSource watch = NoticeSource::kNone;
  std::string endpoint;
  double poll_s = 5.0;
  double deadline_s = std::numeric_limits<double>::quiet_NaN();  ///< NaN: auto (the provider's notice time)
  double mtbf_hours = 0.0;

  /// The deadline in seconds, auto resolved: AWS 120, GCP and Azure 30, else 0 (none).
  double deadline_or_default() const;
};

struct LogOptions {
  int64_t every_steps = 50;
  bool tensorboard = true;
  ProgressMode progress = ProgressMode::kAuto;
  int64_t metrics_port = 0;                   ///< a Prometheus endpoint, GET /metrics (0: none), metrics/openmetrics.h
  std::string metrics_address = "127.0.0.1";  ///< the endpoint's IPv4 address (0.0.0.0: every interface)
  bool metrics_every_rank = false;            ///< each rank serves on metrics_port + its local rank (else rank 0 only)
};

/// A Kineto trace of a few steps (profile.steps > 0): CPU operators, and CUDA kernels on a GPU.
struct ProfileOptions {
  int64_t start_step = 20;  ///< the trace begins when this many steps are done (after warm-up)
  int64_t steps = 0;        ///< steps traced (0: off)
  std::string path;         ///< "" : RUN_DIR/profile/
  bool record_shapes = false;
  bool memory = false;
  bool with_stack = false;
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
  ProfileOptions profile;

  /// The top-level file the config was loaded from ("" for a default-constructed one).
  std::string source_file;
  /// Dotted key -> where its value was set (file, line, column). Defaults are absent.
  std::map<std::string, SourceLoc> origin;

  /// Location of a key's value, or {source_file} when it was left at its default.
  SourceLoc where(const std::string& key) const;
  /// Refuse this config: dlrun::Error (exit 2) at the dotted `key`, located where its value was
  /// set, with `message` and a `hint`. The one way config checks after loading report.
  [[noreturn]] void refuse(const std::string& key, const std::string& message, const std::string& hint = {}) const;
};

}  // namespace dlrun
