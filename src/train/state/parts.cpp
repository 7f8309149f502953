// Today's checkpointed state as parts (see parts.h). Each part writes its own state.json keys
// and tensor files; the keys and files are those of every earlier dlrun, so old checkpoints
// load and new ones read the same.
#include "train/state/parts.h"

#include <fmt/ranges.h>

#include "base/build_info.h"
#include "base/clock.h"
#include "base/fault.h"
#include "base/json_limits.h"
#include "base/log.h"
#include "base/sha256.h"
#include "checkpoint/rng.h"
#include "config/diff.h"
#include "config/loader.h"
#include "config/tree.h"
#include "data/sample_rng.h"
#include "train/averaging/average_part.h"
#include "train/averaging/averages.h"
#include "train/state/init_weights.h"

namespace dlrun::train {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  size_t p = 0;
  while (p < s.size()) {
    const size_t q = s.find(sep, p);
    v.push_back(s.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return v;
}

/// model.pt (parameters and buffers) and the architecture it fits.
class ModelPart : public ckpt::Part {
 public:
  explicit ModelPart(const LiveState& l) : l_(l) {}
  void gather() override { l_.replicas.sync_buffers(l_.model); }
  void save(ckpt::Snapshot& snap) override {
    snap.tensor_files["model"] = ckpt::host_copy(models::state_dict(l_.model), l_.device.is_cuda());
    snap.state["model"] = l_.cfg.model.name;
    snap.state["architecture"] = models::architecture_signature(l_.model);
    if (!l_.dataset.is_null()) snap.state["dataset"] = l_.dataset;  // what `dlrun predict` needs of the data
  }
  void check(const ckpt::Snapshot& snap) override {
    const auto& j = snap.state;
    const std::string saved_arch = j.value("architecture", std::string());
    const std::string arch = models::architecture_signature(l_.model);
    if (saved_arch == arch) return;
    const auto a = split(saved_arch, ';'), b = split(arch, ';');
    std::string diff;
    for (size_t i = 0; i < std::max(a.size(), b.size()) && diff.empty(); ++i) {
      const std::string x = i < a.size() ? a[i] : "(none)", y = i < b.size() ? b[i] : "(none)";
      if (x != y) diff = fmt::format("checkpoint has {}, the config's model has {}", x, y);
    }
    throw Error(ExitCode::kBadInput,
                fmt::format("cannot resume: the checkpoint was written for a different model architecture "
                            "(checkpoint model.name={}, config model.name={}; {})",
                            j.value("model", std::string("?")), l_.cfg.model.name, diff),
                "start a new run (--run-dir, or --resume never --force) or restore the original model settings");
  }
  void load(const ckpt::Snapshot& snap) override {
    models::load_state_dict(l_.model, ckpt::tensor_file(snap, "model"), "checkpoint model.pt");
  }

 private:
  const LiveState& l_;
};

/// optim.pt, the optimizer type and the learning-rate schedule.
class OptimizersPart : public ckpt::Part {
 public:
  explicit OptimizersPart(const LiveState& l) : l_(l) {}
  void save(ckpt::Snapshot& snap) override {
    snap.tensor_files["optim"] = ckpt::host_copy(l_.optimizers.state(), l_.device.is_cuda());
    snap.state["optimizer"] = l_.optimizers.type();
    snap.state["schedule"] = {
        {"name", name_of(l_.cfg.sched.name)}, {"total_steps", l_.total_steps}, {"base_lr", l_.cfg.optim.lr}};
  }
  void check(const ckpt::Snapshot& snap) override {
    const std::string saved = snap.state.value("optimizer", std::string("?"));
    if (saved != l_.optimizers.type())
      throw Error(ExitCode::kBadInput,
                  fmt::format("cannot resume: the checkpoint used optim.name={}, the config has optim.name={}", saved,
                              l_.optimizers.type()),
                  "optimizer state cannot be carried across optimizer types; start a new run");
  }
  void load(const ckpt::Snapshot& snap) override { l_.optimizers.load_state(ckpt::tensor_file(snap, "optim")); }

 private:
  const LiveState& l_;
};

/// The AMP loss scaler (state.json "grad_scaler", PyTorch's GradScaler.state_dict() keys).
class ScalerPart : public ckpt::Part {
 public:
  explicit ScalerPart(const LiveState& l) : l_(l) {}
  void save(ckpt::Snapshot& snap) override { snap.state["grad_scaler"] = l_.scaler.state(); }
  void load(const ckpt::Snapshot& snap) override { l_.scaler.load_state(snap.state.value("grad_scaler", nlohmann::json())); }

 private:
  const LiveState& l_;
};

/// train.micro_batch: auto's split of each micro-batch (state.json "micro_batch": {"split": N}),
/// written under auto only, kept on resume under auto (train/step/micro_batch.h).
class MicroBatchPart : public ckpt::Part {
 public:
  explicit MicroBatchPart(const LiveState& l) : l_(l) {}
  void save(ckpt::Snapshot& snap) override {
    if (l_.micro_batches.automatic()) snap.state["micro_batch"] = {{"split", l_.micro_batches.split()}};
  }
  void load(const ckpt::Snapshot& snap) override {
    const auto it = snap.state.find("micro_batch");
    if (it == snap.state.end()) return;
    const std::string what = "checkpoint state.json \"micro_batch\"";
    DLRUN_CHECK_INPUT(it->is_object(), "{}: not an object", what);
    const int64_t split = json_int_or(*it, "split", 1, what);
    DLRUN_CHECK_INPUT(split >= 1, "{}: split {} is not a positive count", what, split);
    if (l_.micro_batches.automatic()) {
      l_.micro_batches.set_split(split);
      if (split > 1) log0::info("train.micro_batch: auto: each micro-batch is split into {} pieces, as when the checkpoint was written", split);
    } else if (split > 1) {
      log0::warn("the checkpoint's steps split each micro-batch into {} pieces (train.micro_batch: auto); "
                 "train.micro_batch is off now, so steps run whole and may run out of memory again",
                 split);
    }
  }

 private:
  const LiveState& l_;
};

/// rng-rankNNNNN.pt: the CPU and CUDA generators of every rank. A world of one writes its own;
/// a multi-process run seeds every rank's generators at each step from (run.seed, rank, step)
/// (ckpt::step_seed), so any rank writes every rank's states as the next step will seed them --
/// without a collective, and a lost rank's too (docs/design.md, "A peer lost without notice").
class RngPart : public ckpt::Part {
 public:
  explicit RngPart(const LiveState& l) : l_(l) {}
  void save(ckpt::Snapshot& snap) override {
    const int n = l_.replicas.size();
    if (n == 1) {
      snap.tensor_files[ckpt::rng_file(0)] = ckpt::host_copy(ckpt::rng_states(l_.device));
      return;
    }
    for (int r = 0; r < n; ++r)
      snap.tensor_files[ckpt::rng_file(r)] = ckpt::host_copy(
          ckpt::seeded_rng_states(ckpt::step_seed(l_.cfg.run.seed, r, l_.state.step + 1), l_.device));
  }
  void load(const ckpt::Snapshot& snap) override {
    const int rank = l_.replicas.rank();
    auto it = snap.tensor_files.find(ckpt::rng_file(rank));
    if (it != snap.tensor_files.end())
      ckpt::set_rng_states(it->second, l_.device);
    else
      own_stream(rank, snap);
  }

 private:
  /// A rank the checkpoint's smaller world did not have (a 2 -> 8 resume): a stream of its own,
  /// from run.seed, its rank and the step -- not run.seed itself, which every such rank would
  /// share (the same dropout masks on ranks 2-7).
  void own_stream(int rank, const ckpt::Snapshot& snap) const {
    const uint64_t seed = data::mix64(data::mix64(l_.cfg.run.seed + 0x9e3779b97f4a7c15ULL * uint64_t(rank + 1)) ^
                                      static_cast<uint64_t>(snap.step));
    torch::manual_seed(seed);
    log::info("the checkpoint has no RNG state for rank {} (it was written by {} rank(s)): this rank's generators "
              "start a stream of their own (seed {:#x})",
              rank, json_int_or(snap.state, "world_size", 1, "checkpoint state.json"), seed);
  }

  const LiveState& l_;
};

/// What the evaluations decided so far: the best value, early stopping (state.json "monitor").
class MonitorPart : public ckpt::Part {
 public:
  explicit MonitorPart(const LiveState& l) : l_(l) {}
  void save(ckpt::Snapshot& snap) override { snap.state["monitor"] = l_.monitor->state(); }
  void load(const ckpt::Snapshot& snap) override { l_.monitor->load_state(snap.state.value("monitor", nlohmann::json())); }

 private:
  const LiveState& l_;
};

/// Where training stands (run/state.h), and the settings a resume compares with its own.
class TrainStatePart : public ckpt::Part {
 public:
  explicit TrainStatePart(const LiveState& l) : l_(l) {}
  void save(ckpt::Snapshot& snap) override {
    const TrainState& st = l_.state;
    snap.step = st.step;
    auto& j = snap.state;
    j["step"] = st.step;
    j["total_steps"] = l_.total_steps;
    j["global_batch_size"] = l_.cfg.data.batch_size;
    j["grad_accum"] = l_.cfg.train.grad_accum;
    j["seed"] = l_.cfg.run.seed;
    j["skipped_steps"] = st.skipped_steps;
    j["eval_pending"] = st.eval_pending;
    j["steps_lost_total"] = st.steps_lost_total;
    j["bad_samples"] = st.bad_samples;
  }
  void check(const ckpt::Snapshot& snap) override;
  void load(const ckpt::Snapshot& snap) override {
    const auto& j = snap.state;
    TrainState& st = l_.state;
    const std::string what = "checkpoint state.json";
    DLRUN_CHECK_INPUT(j.contains("step"), "{}: no step", what);
    st.step = json_int_or(j, "step", 0, what);
    st.skipped_steps = json_int_or(j, "skipped_steps", 0, what);
    st.eval_pending = j.value("eval_pending", false);
    st.steps_lost_total = json_int_or(j, "steps_lost_total", 0, what);
    st.bad_samples = j.value("bad_samples", nlohmann::json::object());
    DLRUN_CHECK_INPUT(st.bad_samples.is_object() && st.bad_samples.value("samples", nlohmann::json::object()).is_object(),
                      "{}: bad_samples is not an object of samples", what);
    st.resumed_from_step = st.step;
  }

 private:
  const LiveState& l_;
};

void TrainStatePart::check(const ckpt::Snapshot& snap) {
  const auto& j = snap.state;
  const Config& cfg = l_.cfg;
  const std::string what = "checkpoint state.json";
  if (json_int_or(j, "total_steps", l_.total_steps, what) != l_.total_steps)
    log0::warn("resuming with a different schedule length: {} total steps, the checkpoint planned {}", l_.total_steps,
               json_int_or(j, "total_steps", 0, what));
  const int64_t saved_batch = json_int_or(j, "global_batch_size", cfg.data.batch_size, what);
  if (saved_batch != cfg.data.batch_size)
    log0::warn("resuming with global batch size {} (checkpoint: {}): results will differ from an uninterrupted run",
               cfg.data.batch_size, saved_batch);
  const int world_size = l_.replicas.size();
  const int64_t saved_world = json_int_or(j, "world_size", 1, what);
  if (saved_world != world_size)
    log0::warn("resuming on world size {} from world size {}: the sampler re-shards the rest of the epoch from the "
               "global sample cursor (no sample is repeated or skipped), but dropout draws and the order of "
               "floating-point sums differ from an uninterrupted run",
               world_size, saved_world);

  const std::string yaml = config::to_yaml(cfg, false);
  if (snap.config_yaml.empty() || sha256_hex(yaml.data(), yaml.size()) == snap.config_hash) return;
  std::vector<config::Change> changed;
  try {
    // A checkpoint's config.yaml is the resolved config and never names a base file; one that
    // does was not written by dlrun, and is not followed (it could name any file here).
    if (config::parse_yaml(snap.config_yaml, "the checkpoint's config.yaml")->get("base"))
      throw Error(ExitCode::kBadInput, "it names a base: file, which a resolved config never does");
    changed = config::changes(config::load_text(snap.config_yaml, "the checkpoint's config.yaml"), cfg);
  } catch (const Error& e) {
    log0::warn("resuming with a changed config; the checkpoint's config cannot be compared: {}", e.render());
    return;
  }
  std::vector<std::string> lines, exactness;
  for (const auto& c : changed) {
    lines.push_back(fmt::format("{}: {} -> {}{}", c.key, c.before, c.after,
                                config::is_bookkeeping(c.key) ? " (does not change results)" : ""));
    if (config::breaks_exact_resume(c.key)) exactness.push_back(c.key);
  }
  if (lines.empty()) return;
  log0::warn("resuming with a config that differs from the checkpoint's in {} key(s):\n  {}", lines.size(),
             fmt::join(lines, "\n  "));
  if (!exactness.empty())
    log0::warn("{} changed: data order, augmentation and dropout now differ from the interrupted run, so the resumed "
               "run is not an exact continuation of it",
               fmt::join(exactness, ", "));
}

/// The data loader's position: the epoch and the global sample cursor (data/loader.h).
class LoaderPart : public ckpt::Part {
 public:
  explicit LoaderPart(const LiveState& l) : l_(l) {}
  void save(ckpt::Snapshot& snap) override {
    const data::Position p = l_.loader.position();
    snap.epoch = p.epoch;
    snap.state["epoch"] = p.epoch;
    snap.state["cursor"] = p.cursor;
    snap.state["augmentation_seed_scheme"] = "splitmix64(seed, epoch, sample index)";
  }
  void load(const ckpt::Snapshot& snap) override {
    const auto& j = snap.state;
    DLRUN_CHECK_INPUT(j.contains("epoch") && j.contains("cursor"), "checkpoint state.json: no data position");
    const std::string what = "checkpoint state.json";
    data::Position p{json_int_or(j, "epoch", 0, what), json_int_or(j, "cursor", 0, what)};
    DLRUN_CHECK_INPUT(p.epoch >= 0 && p.cursor >= 0, "checkpoint state.json: a negative data position");
    const int64_t batch = l_.cfg.data.batch_size;
    if (p.cursor % batch != 0) {
      const int64_t rounded = p.cursor / batch * batch;
      log0::warn("sample cursor {} is not a multiple of the new batch size; continuing at {}", p.cursor, rounded);
      p.cursor = rounded;
    }
    l_.loader.seek(p);
  }

 private:
  const LiveState& l_;
};

/// A kind of part: what check-resume compares of it, and how a live run makes it (null: the
/// run keeps none).
struct PartKind {
  PartLayout layout;
  std::function<std::unique_ptr<ckpt::Part>(const LiveState&)> make;
};

template <typename P>
std::unique_ptr<ckpt::Part> make(const LiveState& l) {
  return std::make_unique<P>(l);
}

/// The one list of parts, in the order they are saved, checked and loaded.
const std::vector<PartKind>& part_kinds() {
  static const std::vector<PartKind> kinds = [] {
    std::vector<PartKind> k = {
        {{"weights", "weights", {"model"}, {}}, make<ModelPart>},
        {{"optimizer", "optimizer", {"optim"}, {}}, make<OptimizersPart>},
        {{"scaler", "scaler", {}, {"grad_scaler"}}, make<ScalerPart>},
        {{"micro_batch", "micro-batch split", {}, {"micro_batch"}, true}, make<MicroBatchPart>},
        {{"rng", "RNG", {"rng-rank"}, {}}, make<RngPart>},
        {{"train_state", "train state", {}, {"step", "skipped_steps", "eval_pending"}}, make<TrainStatePart>},
        {{"data_position", "data position", {}, {"epoch", "cursor"}}, make<LoaderPart>},
        {{"verdicts", "verdicts", {}, {"monitor"}, true},
         [](const LiveState& l) { return l.monitor ? make<MonitorPart>(l) : nullptr; }},
    };
    // The averages, after the model's part: one that restarts from the weights takes the restored ones.
    for (const AverageKind& a : average_kinds()) {
      std::string label = a.name;
      for (auto& ch : label) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      k.push_back({{a.name, label, {a.name}, {a.name}, true}, [name = std::string(a.name)](const LiveState& l) {
                     for (WeightAverage* avg : l.averages)
                       if (avg->name() == name) return std::unique_ptr<ckpt::Part>(std::make_unique<AveragePart>(*avg, l.replicas, l.device));
                     return std::unique_ptr<ckpt::Part>();
                   }});
    }
    return k;
  }();
  return kinds;
}

}  // namespace

std::vector<PartLayout> part_layouts() {
  std::vector<PartLayout> out;
  for (const PartKind& k : part_kinds()) out.push_back(k.layout);
  return out;
}

CheckpointParts::CheckpointParts(const LiveState& live) : live_(live) {
  for (const PartKind& k : part_kinds())
    if (auto p = k.make(live_)) parts_.emplace_back(k.layout.name, std::move(p));
}

CheckpointParts::~CheckpointParts() = default;

std::optional<ckpt::Snapshot> CheckpointParts::snapshot() {
  for (auto& [name, p] : parts_) p->gather();
  if (!live_.replicas.leader()) return std::nullopt;
  return snapshot_alone();
}

ckpt::Snapshot CheckpointParts::snapshot_alone() {
  ckpt::Snapshot s;
  s.config_yaml = config::to_yaml(live_.cfg, false);
  s.config_hash = sha256_hex(s.config_yaml.data(), s.config_yaml.size());
  s.world_size = live_.replicas.size();
  s.state = {{"world_size", s.world_size},
             {"config_hash", s.config_hash},
             {"versions", build::version_line()},
             {"time", wall_now()}};
  for (auto& [name, p] : parts_) p->save(s);
  return s;
}

void CheckpointParts::start_fresh() { init_ = load_init_weights(live_.cfg, live_.model); }

void CheckpointParts::restore(const ckpt::Snapshot& snap) {
  try {
    for (auto& [name, p] : parts_) p->check(snap);
    for (auto& [name, p] : parts_) {
      if (fault::forget_on_resume(name)) {  // a deliberately inexact resume, for the tests of check-resume
        log::warn("DLRUN_FAULT: the checkpoint's {} part is not loaded", name);
        continue;
      }
      p->load(snap);
    }
  } catch (const nlohmann::json::exception& e) {
    fail_input("checkpoint state.json: a value has the wrong type or is missing: {}", e.what());
  } catch (const c10::Error& e) {
    fail_input("checkpoint tensors do not fit this run: {}", e.what_without_backtrace());
  }
}

}  // namespace dlrun::train
