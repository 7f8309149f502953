// The one list of config fields: names, docs, ranges and choices (see schema.h).
#include "config/schema.h"

#include "config/choices.h"

namespace dlrun::config {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Small builders so each field below is one readable line.
Field B(const char* n, bool& v, const char* doc) { Field f{n, doc, Kind::kBool, &v}; return f; }
Field I(const char* n, int64_t& v, double lo, double hi, const char* doc) {
  Field f{n, doc, Kind::kInt, &v};
  f.min = lo;
  f.max = hi;
  return f;
}
Field F(const char* n, double& v, double lo, double hi, const char* doc, bool lo_excl = false) {
  Field f{n, doc, Kind::kFloat, &v};
  f.min = lo;
  f.max = hi;
  f.min_exclusive = lo_excl;
  return f;
}
Field Fauto(const char* n, double& v, double lo, double hi, const char* doc) {
  Field f = F(n, v, lo, hi, doc);
  f.auto_ok = true;
  return f;
}
Field S(const char* n, std::string& v, const char* doc, std::vector<std::string> choices = {}) {
  Field f{n, doc, Kind::kString, &v};
  f.choices = std::move(choices);
  return f;
}
Field Snull(const char* n, std::string& v, const char* doc) {
  Field f = S(n, v, doc);
  f.nullable = true;
  return f;
}
Field Sreq(const char* n, std::string& v, const char* doc, std::vector<std::string> choices) {
  Field f = S(n, v, doc, std::move(choices));
  f.required = true;
  return f;
}
Field SL(const char* n, std::vector<std::string>& v, const char* doc, std::vector<std::string> choices) {
  Field f{n, doc, Kind::kStringList, &v};
  f.choices = std::move(choices);
  f.nullable = true;
  return f;
}
Field IL(const char* n, std::vector<int64_t>& v, double lo, double hi, const char* doc) {
  Field f{n, doc, Kind::kIntList, &v};
  f.min = lo;
  f.max = hi;
  f.nullable = true;
  return f;
}
Field FL(const char* n, std::vector<double>& v, double lo, double hi, const char* doc) {
  Field f{n, doc, Kind::kFloatList, &v};
  f.min = lo;
  f.max = hi;
  f.nullable = true;
  return f;
}

template <typename E>
Field En(const char* n, E& v, const char* doc) {
  Field f{n, doc, Kind::kEnum, &v};
  for (const char* name : EnumNames<E>::names) f.choices.emplace_back(name);
  f.get_index = [&v] { return static_cast<int>(v); };
  f.set_index = [&v](int i) { v = static_cast<E>(i); };
  return f;
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kBool: return "a boolean (true/false)";
    case Kind::kInt: return "an integer";
    case Kind::kFloat: return "a number";
    case Kind::kString: return "a string";
    case Kind::kEnum: return "a string";
    case Kind::kStringList: return "a list of strings";
    case Kind::kIntList: return "a list of integers";
    case Kind::kFloatList: return "a list of numbers";
  }
  return "?";
}

std::vector<Section> describe(Config& c) {
  std::vector<Section> s;
  {
    auto& o = c.run;
    s.push_back({"run", "the run: name, directory, seed, device", {
      S("name", o.name, "experiment name; the default run directory is runs/<name>"),
      Snull("dir", o.dir, "run directory (empty: runs/<name>); --run-dir overrides it"),
      I("seed", o.seed, 0, 4294967295.0, "seed of initialization, data order, augmentation and dropout"),
      S("device", o.device, "auto | cpu | cuda | cuda:N (auto: cuda:0 when CUDA is available, else cpu)"),
      I("threads", o.threads, 0, 1024, "intra-op CPU threads (0: LibTorch's default)"),
      B("deterministic", o.deterministic, "deterministic algorithms (bitwise-repeatable runs on the CPU)"),
      F("lock_wait_s", o.lock_wait_s, 0, 86400,
        "the run directory locked by a process on another host (a shared file system keeps a reclaimed VM's lock "
        "for its lease): seconds to wait for it before exiting 75 (try again later)"),
      F("price_per_hour", o.price_per_hour, 0, 1e6,
        "what the job's machines cost per hour, all together (0: the DLRUN_PRICE_PER_HOUR variable, else no "
        "cost): summary.json and the preempt/resume events then report the run's cost and its interruptions'"),
    }});
  }
  {
    auto& o = c.model;
    s.push_back({"model", "the network", {
      Sreq("name", o.name, "model architecture", registered_choices("model.name")),
      I("num_classes", o.num_classes, 1, 1e6, "output classes (at least the dataset's)"),
      I("in_channels", o.in_channels, 1, 64, "input image channels (must equal the dataset's)"),
      En("stem", o.stem, "ResNet stem: imagenet (7x7/2 conv + max pool) or cifar (3x3/1 conv)"),
      IL("hidden", o.hidden, 1, 1e6, "mlp: hidden layer widths"),
      F("dropout", o.dropout, 0, 0.99, "dropout probability before the classifier (every model)"),
      Fauto("stochastic_depth", o.stochastic_depth, 0, 0.99,
            "stochastic depth: the last residual block's drop probability, rising linearly from 0 over the "
            "blocks (EfficientNet, ConvNeXt, Swin); auto: the family's torchvision default (docs/models.md), 0: off"),
      I("image_size", o.image_size, 0, 8192,
        "the image side the model is built for (ViT: its position embeddings); 0: the family's default "
        "(ViT 224; the convolutional models any side); must equal the data's"),
      B("zero_init_residual", o.zero_init_residual,
        "ResNet family: each residual block's last BatchNorm starts with gamma 0 (torchvision's option)"),
      I("width", o.width, 1, 4096, "convnet: base channel count"),
      B("channels_last", o.channels_last, "NHWC memory format for the conv models"),
      En("dtype", o.dtype, "parameter, activation and gradient dtype: float32, or float64 for numerical checks (slow; no amp)"),
      En("activation_checkpointing", o.activation_checkpointing,
         "recompute activations in backward instead of keeping them: none, blocks (every ResNet block; "
         "every conv-BN-ReLU of convnet; every hidden layer of mlp; docs/models.md per family) or stages "
         "(every stage of the ResNet, RegNet, ConvNeXt and Swin families)"),
      En("fused_conv_bn_relu", o.fused_conv_bn_relu,
         "each conv-BN-ReLU of the ResNets and convnet as one dlrun::conv_bn_relu op, and each ResNet block's "
         "conv-BN-add-ReLU end as dlrun::conv_bn_add_relu: auto (per device, dtype and memory format, the path "
         "measured fastest on a GPU: dlrun's kernels on CUDA in NCHW; the modules in channels_last and on the CPU), "
         "true (dlrun's kernels everywhere), false (the modules), cudnn (cuDNN's fused BatchNorm-activation for "
         "fp16/bf16 channels_last training on CUDA, dlrun's kernels elsewhere)"),
      Snull("init", o.init,
            "start a fresh run from these weights: a checkpoint or run directory, a dlrun export, a safetensors "
            "file or a torch.save state dict (e.g. torchvision's); the head is re-initialised when num_classes "
            "differs (empty: none)"),
      B("init_strict", o.init_strict,
        "model.init: every parameter and buffer must be in the file and nothing else (false: load what matches, "
        "report the rest)"),
    }});
  }
  {
    auto& o = c.data;
    s.push_back({"data", "dataset, loader and augmentation", {
      Sreq("name", o.name, "dataset", registered_choices("data.name")),
      Snull("root", o.root, "data directory (empty: the dataset's default)"),
      I("batch_size", o.batch_size, 1, 1e7, "GLOBAL batch size per optimizer step (all ranks, all accumulation steps)"),
      I("eval_batch_size", o.eval_batch_size, 1, 1e7, "batch size for evaluation"),
      I("workers", o.workers, 0, 256, "loader worker threads (0: load in the training thread)"),
      I("prefetch", o.prefetch, 1, 64, "batches prepared ahead per worker"),
      B("pin_memory", o.pin_memory, "pinned host memory for CUDA copies"),
      B("device_resident", o.device_resident, "keep the whole set on the device and augment there"),
      B("shuffle", o.shuffle, "shuffle training samples every epoch"),
      SL("augment", o.augment, "training transforms (applied in a fixed order, see docs/data.md)",
         registered_choices("data.augment")),
      I("image_size", o.image_size, 0, 8192, "resize/crop target (0: native size)"),
      I("crop_padding", o.crop_padding, 0, 1024, "zero padding of `crop`"),
      FL("resized_crop_scale", o.resized_crop_scale, 0, 1, "area range [min, max] of `resized_crop`"),
      F("rotate_degrees", o.rotate_degrees, 0, 180, "maximum rotation of `rotate`"),
      F("translate_frac", o.translate_frac, 0, 1, "maximum shift of `translate`, as a fraction of the size"),
      F("erase_p", o.erase_p, 0, 1, "probability of `erase` (random erasing)"),
      FL("erase_scale", o.erase_scale, 0, 1,
         "`erase`: [min, max] of the erased box's share of the image (torchvision's scale, timm's min_area/max_area)"),
      FL("erase_ratio", o.erase_ratio, 0, 1e3,
         "`erase`: [min, max] of the box's aspect ratio, height over width, drawn log-uniformly (torchvision's ratio)"),
      En("erase_value", o.erase_value,
         "`erase`: what fills the box, in normalized values: zero (torchvision's value=0, timm's mode const), "
         "per_channel (a standard normal value per channel: timm's mode rand), per_pixel (one per value: "
         "torchvision's value='random', timm's mode pixel)"),
      I("magnitude_bins", o.magnitude_bins, 2, 1000,
        "trivial_augment, rand_augment: the number of magnitude bins of each operation's table (torchvision's "
        "num_magnitude_bins)"),
      I("rand_augment_ops", o.rand_augment_ops, 0, 100, "rand_augment: operations applied to each image (num_ops)"),
      I("rand_augment_magnitude", o.rand_augment_magnitude, 0, 999,
        "rand_augment: the magnitude, a bin of each table (below data.magnitude_bins; torchvision's 9 of 31)"),
      En("auto_augment_policy", o.auto_augment_policy,
         "auto_augment: the learned policy (torchvision's AutoAugmentPolicy: imagenet, cifar10, svhn)"),
      En("policy_interpolation", o.policy_interpolation,
         "the policies' shears, translations and rotations: nearest pixel (the torchvision classes' default) or "
         "bilinear (what torchvision's classification recipes pass them)"),
      I("augmix_severity", o.augmix_severity, 1, 10,
        "augmix: the operations' magnitudes are drawn from the first `severity` bins of their 10-bin tables "
        "(torchvision's severity)"),
      I("augmix_width", o.augmix_width, 1, 100, "augmix: augmentation chains mixed into each image (mixture_width)"),
      I("augmix_depth", o.augmix_depth, -1, 100,
        "augmix: operations per chain (chain_depth; -1 or 0: 1 to 3, drawn per chain)"),
      F("augmix_alpha", o.augmix_alpha, 1e-6, 1e6,
        "augmix: the Dirichlet and Beta parameter of the chains' and the original's weights (alpha)"),
      FL("color_jitter", o.color_jitter, 0, 1e3,
         "color_jitter: [brightness, contrast, saturation, hue] as torchvision's ColorJitter takes them: factors "
         "drawn from [max(0, 1 - v), 1 + v] (hue: a shift in [-v, v], v <= 0.5), applied in a random order; 0 "
         "leaves that one out (timm's --color-jitter 0.4 is [0.4, 0.4, 0.4, 0])"),
      I("repeated_aug", o.repeated_aug, 1, 64,
        "repeated augmentation (timm's RepeatAugSampler, torchvision's --ra-sampler --ra-reps): each sample of an "
        "epoch's order comes this many times, each augmented on its own, spread over the ranks; the epoch keeps the "
        "set's length (1: off; DeiT and timm: 3, torchvision: 4)"),
      I("eval_image_size", o.eval_image_size, 0, 8192,
        "evaluation: the center crop's side (0: data.image_size; torchvision's --val-crop-size)"),
      I("eval_resize_size", o.eval_resize_size, 0, 8192,
        "evaluation: the shorter side the image is resized to before the center crop (0: eval_image_size / 0.875 "
        "when training uses resized_crop, else eval_image_size; torchvision's --val-resize-size)"),
      B("normalize", o.normalize, "normalize with mean/std"),
      FL("mean", o.mean, -kInf, kInf, "per-channel mean (empty: the dataset's default)"),
      FL("std", o.std, 0, kInf, "per-channel std (empty: the dataset's default)"),
      IL("synthetic_shape", o.synthetic_shape, 1, 8192, "synthetic: [C, H, W]"),
      I("synthetic_train_size", o.synthetic_train_size, 1, 1e9, "synthetic: training samples"),
      I("synthetic_eval_size", o.synthetic_eval_size, 1, 1e9, "synthetic: evaluation samples"),
      I("limit_train", o.limit_train, 0, 1e12, "use only the first N training samples (0: all)"),
      I("limit_eval", o.limit_eval, 0, 1e12, "use only the first N evaluation samples (0: all)"),
      F("val_fraction", o.val_fraction, 0, 0.9,
        "hold this share of the training set out as a validation split (the same samples on every run), "
        "evaluated during training; the evaluation split is then the test split, read at the end (0: none)"),
      Snull("shards", o.shards,
            "webdataset: training shards -- a directory of .tar files, a brace pattern (train-{000000..000127}.tar) "
            "or an s3:// prefix"),
      Snull("eval_shards", o.eval_shards, "webdataset: evaluation shards (same forms; empty: no evaluation set)"),
      I("shuffle_block", o.shuffle_block, 1, 1e6,
        "webdataset: shards whose samples are shuffled together (larger: a better shuffle, a larger cache window)"),
      I("fetch_ahead", o.fetch_ahead, 0, 1e6, "webdataset: shards fetched ahead of the one being read (0: shuffle_block)"),
      I("fetch_threads", o.fetch_threads, 1, 64, "webdataset: background threads fetching and verifying shards"),
      Snull("cache_dir", o.cache_dir, "webdataset: where copies of remote shards are kept (empty: ~/.cache/dlrun/shards)"),
      F("cache_limit_gb", o.cache_limit_gb, 0, 1e6, "webdataset: the shard cache's size limit in GB", true),
      F("retry_s", o.retry_s, 0, 1e6, "webdataset: how long an unreachable store is retried before the run fails"),
      B("allow_unencrypted_http", o.allow_unencrypted_http,
        "webdataset: accept s3:// shards from a plain http:// endpoint ($AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL) on "
        "another host: requests and the session token then travel unencrypted (loopback is always accepted)"),
      B("jpeg_roi_decode", o.jpeg_roi_decode,
        "decode JPEGs at the smallest DCT scale that covers the crop, and only its rows and columns (false: full decode)"),
      En("on_bad_sample", o.on_bad_sample,
         "a sample whose image does not decode or read (a truncated JPEG, a damaged shard member): error (the run "
         "ends, exit 2, naming it) or skip (in training replaced by the next sample of the epoch's order that "
         "decodes, in an evaluation left out; named in metrics.jsonl and summary.json, counted exactly across "
         "resumes)"),
      I("max_bad_samples", o.max_bad_samples, 1, 1e9,
        "with on_bad_sample: skip, more distinct bad samples than this in training end the run (exit 2): the data "
        "is damaged beyond a few files"),
    }});
  }
  {
    auto& o = c.optim;
    s.push_back({"optim", "optimizer", {
      En("name", o.name, "optimizer"),
      F("lr", o.lr, 0, 1e3, "peak learning rate", true),
      F("momentum", o.momentum, 0, 1, "sgd, rmsprop, rmsprop_tf, lars: momentum"),
      B("nesterov", o.nesterov, "sgd, lars: Nesterov momentum"),
      F("weight_decay", o.weight_decay, 0, 1, "weight decay (L2 for sgd, rmsprop, rmsprop_tf, lamb and lars, decoupled for adamw)"),
      FL("betas", o.betas, 0, 0.999999, "adamw, lamb: [beta1, beta2]"),
      F("eps", o.eps, 0, 1, "adamw, rmsprop, rmsprop_tf, lamb, lars: epsilon (rmsprop: added after the square root, as torch.optim.RMSprop; rmsprop_tf: inside it, as TensorFlow and timm's RMSpropTF; timm's defaults: lamb 1e-6, rmsprop_tf 1e-10 with 1e-3 in its recipes)", true),
      F("alpha", o.alpha, 0, 1, "rmsprop, rmsprop_tf: smoothing of the running mean of the squared gradient (torchvision's recipes: 0.9)"),
      B("centered", o.centered, "rmsprop, rmsprop_tf: normalise by the gradient's running variance (its mean square less its squared mean)"),
      F("trust_coeff", o.trust_coeff, 0, 1, "lars: the trust coefficient (timm's 0.001)", true),
      B("trust_clip", o.trust_clip, "lamb, lars: clip the trust ratio at 1 (LAMBC; LARC: the ratio over lr)"),
      B("always_adapt", o.always_adapt,
        "lamb, lars: the layer-wise trust ratio also for the parameters without weight decay (false: they take the "
        "plain step, timm's default)"),
      F("max_grad_norm", o.max_grad_norm, 0, 1e6,
        "lamb: the global norm of the gradients its update clips them to, without changing them (timm's Lamb; 0: "
        "none); train.clip_grad_norm clips the gradients themselves"),
      B("no_decay_norm_bias", o.no_decay_norm_bias,
        "no weight decay on biases, 1-D (norm) parameters and the model's embeddings (ViT's class token and "
        "position embedding, Swin's relative position bias tables, Swin V2's logit scales and position MLP)"),
      F("layer_decay", o.layer_decay, 0, 1,
        "layer-wise learning-rate decay as BEiT and timm fine-tune: with L blocks, the stem (layer 0) to the head "
        "(layer L+1) take lr times layer_decay^(L+1-layer); the groups are listed by `dlrun info CONFIG` (0 or 1: "
        "off)"),
      I("swa_start_epoch", o.swa_start_epoch, 0, 1e9,
        "stochastic weight averaging (PyTorch's swa_utils): from this epoch (0-based) the learning rate follows "
        "SWALR and the weights at each epoch's end join an equal-weight average, whose BatchNorm statistics are "
        "recomputed at the run's end (0: off)"),
      F("swa_lr", o.swa_lr, 0, 1e3, "optim.swa_start_epoch: the learning rate SWALR anneals to and then holds"),
      I("swa_anneal_epochs", o.swa_anneal_epochs, 0, 1e9,
        "optim.swa_start_epoch: epochs of cosine annealing from the schedule's rate to swa_lr (0: swa_lr at once)"),
    }});
  }
  {
    auto& o = c.sched;
    s.push_back({"sched", "learning-rate schedule (a function of the optimizer step)", {
      En("name", o.name, "schedule"),
      F("warmup_epochs", o.warmup_epochs, 0, 1e6, "linear warmup length in epochs (fractions allowed; not for onecycle)"),
      I("warmup_steps", o.warmup_steps, 0, 1e12, "linear warmup length in steps (added to warmup_epochs)"),
      F("step_size", o.step_size, 0, 1e6, "step: epochs between decays", true),
      FL("milestones", o.milestones, 0, 1e6, "multistep: epochs at which lr *= gamma"),
      F("gamma", o.gamma, 0, 1, "step, multistep: decay factor", true),
      F("min_lr", o.min_lr, 0, 1e3, "cosine: final learning rate"),
      F("pct_start", o.pct_start, 0, 1, "onecycle: fraction of the steps spent rising"),
      F("div_factor", o.div_factor, 1, 1e9, "onecycle: initial lr = lr / div_factor"),
      F("final_div_factor", o.final_div_factor, 1, 1e12, "onecycle: final lr = initial lr / final_div_factor"),
    }});
  }
  {
    auto& o = c.train;
    s.push_back({"train", "the training loop", {
      I("epochs", o.epochs, 1, 1e6, "epochs to train (ignored when max_steps > 0)"),
      I("max_steps", o.max_steps, 0, 1e12, "optimizer steps to train (0: use epochs)"),
      I("grad_accum", o.grad_accum, 1, 4096, "micro-batches per optimizer step"),
      En("micro_batch", o.micro_batch,
         "auto: a step that runs out of device memory is redone on the same samples with each micro-batch split "
         "in two, again until it fits (down to one sample), and the split is kept, checkpointed and resumed; off: "
         "an out-of-memory error ends the run (exit 1)"),
      F("clip_grad_norm", o.clip_grad_norm, 0, 1e9, "clip the global gradient norm to this (0: off)"),
      F("clip_grad_value", o.clip_grad_value, 0, 1e9,
        "clamp every gradient value to [-v, v] (torch.nn.utils.clip_grad_value_, timm's --clip-mode value; 0: off)"),
      F("label_smoothing", o.label_smoothing, 0, 0.99,
        "cross-entropy label smoothing (with mixing: of the mixed targets, as timm's Mixup smooths them)"),
      F("mixup_alpha", o.mixup_alpha, 0, 1e3,
        "MixUp (torchvision.transforms.v2.MixUp): each micro-batch blended with itself rolled by one, weight "
        "lambda ~ Beta(alpha, alpha), and the targets likewise (0: off; torchvision's recipes: 0.2)"),
      F("cutmix_alpha", o.cutmix_alpha, 0, 1e3,
        "CutMix (torchvision.transforms.v2.CutMix): a box of the rolled micro-batch pasted in, its area from "
        "lambda ~ Beta(alpha, alpha), the targets weighted by the area (0: off; torchvision's recipes: 1.0)"),
      F("mix_prob", o.mix_prob, 0, 1, "with mixup_alpha or cutmix_alpha: the probability that a micro-batch is mixed "
        "(timm's mixup_prob)"),
      F("mix_switch_prob", o.mix_switch_prob, 0, 1,
        "with both mixup_alpha and cutmix_alpha: the probability that a mixed micro-batch takes CutMix rather than "
        "MixUp (timm's mixup_switch_prob; torchvision's recipes pick either with 0.5)"),
      I("eval_every_epochs", o.eval_every_epochs, 0, 1e6, "evaluate every N epochs (0: off)"),
      I("eval_every_steps", o.eval_every_steps, 0, 1e12, "evaluate every N steps (0: off)"),
      B("eval_at_end", o.eval_at_end, "evaluate after the last step"),
      En("nonfinite", o.nonfinite,
         "a step with a non-finite loss or gradient: stop (exit 1 naming the step) or skip (no update, counted)"),
      B("cudnn_benchmark", o.cudnn_benchmark, "CUDA: let cuDNN time its algorithms per shape and keep the fastest (off under run.deterministic)"),
      B("tf32", o.tf32, "CUDA: TensorFloat-32 for float32 convolutions and matrix products (Ampere and newer)"),
      B("cuda_graphs", o.cuda_graphs,
        "CUDA: capture the whole step once and replay it (falls back to eager, saying why, where it cannot)"),
      En("early_stop", o.early_stop,
         "end the run when this evaluation metric has not improved for early_stop_patience evaluations (none: off)"),
      I("early_stop_patience", o.early_stop_patience, 1, 1e9, "train.early_stop: evaluations without improvement"),
      F("early_stop_min_delta", o.early_stop_min_delta, 0, 1e9,
        "train.early_stop: the least change that counts as an improvement"),
      F("ema_decay", o.ema_decay, 0, 1,
        "keep an exponential moving average of the weights and buffers with this decay, e.g. 0.9998 (0: off); "
        "checkpointed (ema.pt), evaluated beside the weights, exported with dlrun export --weights ema"),
      I("ema_every_steps", o.ema_every_steps, 1, 1e9, "train.ema_decay: update the average every N optimizer steps"),
      I("ema_start_step", o.ema_start_step, 0, 1e12,
        "train.ema_decay: through this step the average is a copy of the weights (timm's update_after_step)"),
      B("ema_warmup", o.ema_warmup,
        "train.ema_decay: timm's warmup, the decay at the t-th step after ema_start_step is "
        "min(ema_decay, 1 - (1 + t)^(-2/3))"),
    }});
  }
  {
    auto& o = c.amp;
    s.push_back({"amp", "CUDA automatic mixed precision", {
      B("enabled", o.enabled, "run forward passes and the loss under autocast (CUDA: fp16 or bf16; CPU: bf16)"),
      En("dtype", o.dtype, "fp16 (with dynamic loss scaling) or bf16"),
      F("init_scale", o.init_scale, 1, 1e12, "fp16: initial loss scale"),
      F("growth_factor", o.growth_factor, 1.000001, 1e6, "fp16: what the scale is multiplied by after growth_interval good steps"),
      F("backoff_factor", o.backoff_factor, 1e-6, 0.999999, "fp16: what the scale is multiplied by on an overflow"),
      I("growth_interval", o.growth_interval, 1, 1e9, "fp16: steps without overflow before the scale grows"),
    }});
  }
  {
    auto& o = c.dist;
    s.push_back({"dist", "multi-process training", {
      En("backend", o.backend, "collective backend (auto: nccl on CUDA, gloo on the CPU)"),
      F("timeout_s", o.timeout_s, 0, 1e6, "rendezvous and collective timeout in seconds", true),
      F("peer_timeout_s", o.peer_timeout_s, 0, 3600,
        "a peer whose heartbeat stops this long (seconds) is lost: the collective the others wait in ends, they save "
        "the last step they all completed and exit 75 (0: off, wait dist.timeout_s and exit 1)"),
      F("bucket_mb", o.bucket_mb, 0, 1e4, "gradient all-reduce bucket size in MiB (the first bucket is 1 MiB)", true),
      B("sync_bn", o.sync_bn, "synchronised BatchNorm: batch statistics over all ranks' samples"),
    }});
  }
  {
    auto& o = c.checkpoint;
    s.push_back({"checkpoint", "checkpoints and retention", {
      Snull("dir", o.dir, "checkpoint directory (empty: RUN_DIR/checkpoints)"),
      I("every_steps", o.every_steps, 0, 1e12, "save every N optimizer steps (0: off)"),
      Fauto("every_minutes", o.every_minutes, 0, 1e6,
            "save every N minutes of wall clock (0: off; auto: Young/Daly from the measured save cost and "
            "preemption.mtbf_hours)"),
      I("keep_last", o.keep_last, 0, 1e6, "keep the newest N checkpoints (0: keep all)"),
      I("keep_every", o.keep_every, 0, 1e12, "also keep checkpoints whose step is a multiple of N (0: off)"),
      B("async", o.async, "write in a background thread after a copy to host memory"),
      B("at_end", o.at_end, "save when training finishes"),
      B("at_epoch_end", o.at_epoch_end, "save at the end of every epoch"),
      En("keep_best", o.keep_best,
         "also save at each evaluation that improves this metric, and keep that checkpoint (named by "
         "checkpoints/BEST) whatever keep_last says (none: off)"),
      Snull("remote", o.remote, "s3://BUCKET/PREFIX: upload every checkpoint there and resume from it (empty: off)"),
      Snull("remote_endpoint", o.remote_endpoint,
            "URL of an S3-compatible service (empty: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS)"),
      Snull("remote_region", o.remote_region, "region to sign for (empty: $AWS_REGION, $AWS_DEFAULT_REGION, us-east-1)"),
      En("remote_addressing", o.remote_addressing,
         "bucket in the host name (virtual) or the path (path); auto: virtual on AWS, path elsewhere"),
      I("remote_part_mb", o.remote_part_mb, 5, 5120,
        "files larger than this go up in parts of this size (MiB); one PUT below"),
      Snull("remote_ca_bundle", o.remote_ca_bundle,
            "PEM file of the certificate authorities that may sign the store's certificate, instead of the system's "
            "(empty: $AWS_CA_BUNDLE, else the system's store)"),
      En("remote_tls_min", o.remote_tls_min, "the lowest TLS version accepted from an https store: 1.2 or 1.3"),
      B("remote_allow_unencrypted_http", o.remote_allow_unencrypted_http,
        "accept a plain http:// remote_endpoint on another host: checkpoints, requests and the session token then "
        "travel unencrypted (loopback is always accepted)"),
      En("remote_sse", o.remote_sse,
         "server-side encryption of every object uploaded: none (the bucket's default), AES256 (SSE-S3) or aws:kms "
         "(SSE-KMS)"),
      Snull("remote_sse_kms_key_id", o.remote_sse_kms_key_id,
            "with remote_sse: aws:kms, the KMS key (id, ARN or alias/NAME; empty: the account's aws/s3 key)"),
      B("remote_sse_bucket_key", o.remote_sse_bucket_key, "with remote_sse: aws:kms, use an S3 Bucket Key (fewer KMS requests)"),
      En("on_error", o.on_error, "a periodic checkpoint that cannot be written or uploaded: continue (reported, tried again at the next save) or stop (exit 1); a failed final or preemption save always exits 1"),
      I("max_failed_saves", o.max_failed_saves, 0, 1e9,
        "with on_error: continue, this many periodic saves failing in a row stop the run (exit 1, saying how much "
        "training is at risk); 0: no limit"),
      F("remote_history_s", o.remote_history_s, 0, 86400,
        "the run's history (metrics.jsonl, TensorBoard events) goes to the store beside the checkpoints with each "
        "upload and this often in seconds (0: with the uploads only), so a resume on a fresh VM counts what the "
        "earlier processes did and cost and its records begin at step 0"),
      F("remote_wait_s", o.remote_wait_s, 0, 86400,
        "a resume whose store does not answer retries with backoff for this many seconds, then exits 75 (try again "
        "later); it never starts over"),
    }});
  }
  {
    auto& o = c.preemption;
    s.push_back({"preemption", "cloud preemption notices (off by default)", {
      En("watch", o.watch, "notice source"),
      Snull("endpoint", o.endpoint, "notice URL or file path (empty: the provider's default)"),
      F("poll_s", o.poll_s, 0.01, 3600, "seconds between polls"),
      Fauto("deadline_s", o.deadline_s, 0, 86400,
            "after a stop request, seconds to wait for the remote upload before exiting 75 (0: no limit; auto: AWS "
            "120, GCP and Azure 30, else no limit)"),
      F("mtbf_hours", o.mtbf_hours, 0, 1e6, "mean time between interruptions, for checkpoint.every_minutes: auto"),
    }});
  }
  {
    auto& o = c.log;
    s.push_back({"log", "metrics and progress", {
      I("every_steps", o.every_steps, 1, 1e9, "write a metrics line (and read the loss from the device) every N steps"),
      B("tensorboard", o.tensorboard, "write TensorBoard event files"),
      En("progress", o.progress, "terminal display: auto (a bar on a TTY, else lines), bar, lines or none"),
      I("metrics_port", o.metrics_port, 0, 65535,
        "serve live metrics for Prometheus at http://metrics_address:PORT/metrics (0: off)"),
      S("metrics_address", o.metrics_address,
        "log.metrics_port: the IPv4 address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)"),
      B("metrics_every_rank", o.metrics_every_rank,
        "log.metrics_port: every rank serves its own metrics on metrics_port + its local rank (else rank 0 only)"),
    }});
  }
  {
    auto& o = c.profile;
    s.push_back({"profile", "a Chrome/Perfetto trace of a few steps (LibTorch's Kineto profiler; off by default)", {
      I("steps", o.steps, 0, 1e6, "optimizer steps to trace (0: off); the trace is written when they are done"),
      I("start_step", o.start_step, 0, 1e12, "begin tracing once this many steps are done (skip the warm-up)"),
      Snull("path", o.path,
            "directory for the trace files (empty: RUN_DIR/profile); one file per rank, "
            "rank<R>.step<N>.pt.trace.json"),
      B("record_shapes", o.record_shapes, "record each operator's input shapes"),
      B("memory", o.memory, "record tensor allocations and frees (memory timeline)"),
      B("with_stack", o.with_stack, "record C++ call stacks of the operators (large traces)"),
    }});
  }
  return s;
}

std::vector<std::string> all_keys() {
  Config c;
  std::vector<std::string> keys;
  for (const auto& sec : describe(c))
    for (const auto& f : sec.fields) keys.push_back(sec.name + "." + f.name);
  return keys;
}

const Field* find_field(const std::vector<Section>& sections, const std::string& dotted) {
  const auto dot = dotted.find('.');
  if (dot == std::string::npos) return nullptr;
  for (const auto& sec : sections) {
    if (sec.name != dotted.substr(0, dot)) continue;
    for (const auto& f : sec.fields)
      if (f.name == dotted.substr(dot + 1)) return &f;
  }
  return nullptr;
}

}  // namespace dlrun::config

