// The training loop (see trainer.h). run() checks everything that can be refused before the
// run directory is written; Trainer::run() is the loop itself:
//
//   epochs -> micro-batches -> one optimizer step (StepRunner) -> step boundary:
//     log due?         -> read the loss (and the non-finite flag) from the device, report
//     stop requested?  -> save, exit 75
//     eval due?        -> evaluate (ends early on a stop request), report
//     save due?        -> snapshot to host memory, write in the background, report; stop?
//   then the final evaluation and save, and summary.json.
#include "train/trainer.h"

#include <ATen/record_function.h>

#include <cmath>
#include <limits>
#include <optional>
#include <thread>

#include "base/build_info.h"
#include "base/clock.h"
#include "base/fault.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/remote.h"
#include "config/loader.h"
#include "cuda/device_query.h"
#include "dist/group.h"
#include "dist/sync_bn.h"
#include "metrics/nvml.h"
#include "metrics/sink.h"
#include "preempt/preempt.h"
#include "train/collective.h"
#include "train/components.h"
#include "train/evaluate.h"
#include "train/fingerprint.h"
#include "train/profiler.h"
#include "train/resume.h"
#include "train/run_dir.h"
#include "train/schedule.h"
#include "train/step.h"
#include "train/triggers.h"

#ifdef DLRUN_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace dlrun::train {
namespace {

constexpr int kInterrupted = static_cast<int>(ExitCode::kInterrupted);

nlohmann::json or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

/// The training loss as the device accumulates it between two reads by the host.
struct LossWindow {
  torch::Tensor last;       ///< float64: the loss of the latest step
  torch::Tensor sum;        ///< float64: sum over the window's applied steps
  int64_t steps = 0;        ///< steps in the window, applied or skipped
  int64_t skipped = 0;      ///< of those, skipped steps already counted (settle_skips)
  torch::Tensor pending;    ///< float64: skipped steps not yet counted on the host (undefined: none can be)
  torch::Tensor first_bad;  ///< int64: first non-finite step no one has read yet (-1: none)
};

// In a multi-process run every rank runs a Trainer in lockstep: the same steps, the same
// decisions at each step boundary (the ones that depend on a rank's own clock or signals are
// agreed by a collective), the same collectives in the same order. Rank 0 (the leader) alone
// writes the run directory, the metrics and the checkpoints, and talks to remote storage.
class Trainer {
 public:
  Trainer(const TrainArgs& args, RunDir dir, const Placement& placement, dist::Group* group)
      : args_(args),
        cfg_(args.cfg),
        dir_(std::move(dir)),
        group_(group),
        c_(build_components(cfg_, placement, Purpose::kTrain)),
        runner_(cfg_.train, cfg_.amp, *c_.model, *c_.optimizer, c_.placement.device),
        profiler_(cfg_.profile, c_.placement.device,
                  cfg_.profile.path.empty() ? dir_.path() + "/profile" : cfg_.profile.path, c_.placement.rank) {
    if (cfg_.train.cuda_graphs) {
      const std::string why = cuda_graph_obstacle(cfg_, c_.placement.device, group_ != nullptr);
      if (why.empty()) runner_.use_cuda_graphs();
      else log0::warn("train.cuda_graphs: the step runs eagerly: {}", why);
    }
    if (group_ && cfg_.dist.sync_bn) {
      const int layers = models::set_batchnorm_sync(*c_.model, dist::sync_batchnorm(*group_));
      if (layers == 0) log0::warn("dist.sync_bn: model {} has no BatchNorm layer; nothing to synchronise", cfg_.model.name);
    }
    if (!cfg_.checkpoint.remote.empty() && leader()) {
      remote_ = std::make_unique<ckpt::RemoteStore>(remote::s3_config(cfg_.checkpoint),
                                                    remote::parse_s3_url(cfg_.checkpoint.remote));
      try {
        remote_->check_access();  // wrong credentials or bucket: exit 2 here, before anything is written
      } catch (const Error& e) {
        if (e.code() == ExitCode::kBadInput) throw;
        log0::warn("remote storage is not reachable now ({}); training goes on and uploads are retried", e.message());
      }
    }
    log0::info("model {}: {} parameters; data {}: {} train / {} eval samples; {} steps/epoch, {} steps on {}",
               cfg_.model.name, models::num_parameters(*c_.model), cfg_.data.name, c_.data.train->size(),
               c_.data.eval->size(), c_.steps_per_epoch, c_.total_steps, c_.placement.device.str());
    log0::info("{}", describe_fast_paths(cfg_, c_.placement.device));
  }

  /// Load what --resume asks for into the model, optimizer and state (refusals: exit 2).
  /// Multi-process: `plan` is rank 0's (the others pass an empty one and receive its
  /// checkpoint), then every rank starts from rank 0's parameters and buffers, and the
  /// gradient all-reduce is set up.
  void resume(ResumePlan plan) {
    set_aside_ = plan.set_aside;
    fetched_ = std::move(plan.fetched);
    if (group_) share_checkpoint(*group_, plan.from);
    if (plan.from) {
      restore(plan.from->snapshot, cfg_, *c_.model, *c_.optimizer, runner_.scaler(), st_, c_.total_steps,
              c_.placement.device, c_.placement.rank, c_.placement.world_size);
      resumed_from_ = plan.from->path;
      last_saved_step_ = st_.step;
      plan.from.reset();  // the snapshot's host tensors are released here
      log0::info("resumed from {} at step {} (epoch {}, sample {})", resumed_from_, st_.step, st_.epoch, st_.cursor);
    } else if (group_ && c_.placement.rank > 0) {
      torch::manual_seed(cfg_.run.seed + static_cast<uint64_t>(c_.placement.rank));  // own dropout draws per rank
    }
    if (group_) join();
  }

  /// --save-init: the initial weights of a fresh run, written before the run directory is
  /// touched (a bad path is a failed start, not a half-written run).
  void save_init() const {
    if (args_.save_init.empty() || !resumed_from_.empty()) return;
    DLRUN_CHECK_INPUT(fsutil::is_directory(fsutil::parent_of(args_.save_init)),
                      "--save-init {}: the directory {} does not exist", args_.save_init,
                      fsutil::parent_of(args_.save_init));
    save_weights(*c_.model, args_.save_init);
  }

  int run();
  ckpt::RemoteStore* remote_store() { return remote_.get(); }
  bool leader() const { return c_.placement.rank == 0; }
  /// After an exception: record it in metrics.jsonl and summary.json when the run directory
  /// is already ours (never throws; before that, the directory stays untouched).
  void record_failure(const std::string& what) noexcept;

 private:
  void join();
  void begin();
  void step(const std::vector<data::Batch>& micro);
  std::optional<int> at_boundary(bool epoch_end);
  bool stop_agreed() const;
  void log_step();
  void add_gpu_telemetry(metrics::Event& e) const;
  void warn_if_loader_bound(double wait_frac);
  bool run_eval();
  void save(SaveReason why, bool sync);
  void check_finite();
  void settle_skips();
  void save_failed(const Error& e, SaveReason why);
  void report_uploads();
  double save_interval_minutes();
  [[noreturn]] void fail_nonfinite(int64_t step) const;
  int interrupted();
  int finish();
  double read_last_loss();
  nlohmann::json summary(const std::string& status);
  nlohmann::json remote_summary() const;
  double samples_per_s(double now) const { return samples_since_log_ / std::max(1e-9, now - last_log_mono_); }

  const TrainArgs& args_;
  const Config& cfg_;
  RunDir dir_;
  dist::Group* group_;  ///< null: one process
  Components c_;
  StepRunner runner_;
  StepProfiler profiler_;
  std::unique_ptr<metrics::Nvml> nvml_;  ///< GPU telemetry (leader on CUDA, when NVML loads)
  std::unique_ptr<dist::GradSync> grad_sync_;
  std::string resumed_from_;  ///< the checkpoint this process resumed from ("" for a fresh start)
  std::optional<ckpt::FileSet> fetched_;  ///< a downloaded checkpoint, kept locally at begin()
  bool set_aside_ = false;    ///< --resume never --force over an earlier run
  TrainState st_;
  metrics::Reporter report_;
  // Destroyed in reverse order: the writer (whose last commit may still notify the
  // uploader) before the uploader, the uploader before the store it uploads to.
  std::unique_ptr<ckpt::RemoteStore> remote_;
  std::unique_ptr<ckpt::Uploader> uploader_;
  std::unique_ptr<ckpt::Writer> writer_;
  double save_cost_s_ = -1, last_stall_s_ = 0, interval_logged_ = -1;
  LossWindow loss_;
  bool begun_ = false;
  double start_mono_ = 0, last_save_mono_ = 0, last_log_mono_ = 0, last_lr_ = 0;
  double final_loss_ = std::numeric_limits<double>::quiet_NaN();
  int64_t samples_since_log_ = 0, samples_this_process_ = 0;
  double data_wait_s_ = 0;  ///< time the step loop waited for the loader since the last log line
  double data_wait_total_s_ = 0;
  PhaseTimes phase_total_s_{};  ///< forward, backward, optimizer over the run (this process)
  /// summary.json's total of phase i, or null once steps were replayed from a CUDA graph.
  nlohmann::json phase_total(int i) const {
    return runner_.graph_captured() ? nlohmann::json(nullptr) : nlohmann::json(phase_total_s_[i]);
  }
  int64_t logs_ = 0;            ///< train records written (the first one includes the warm-up)
  bool told_loader_bound_ = false;
  int64_t last_eval_step_ = -1, last_saved_step_ = -1;
  int64_t save_errors_ = 0;  ///< checkpoint writes that failed (checkpoint.on_error)
  nlohmann::json last_eval_;
};

int Trainer::run() {
  begin();
  if (st_.eval_pending && !run_eval()) return interrupted();  // the evaluation an interruption cut off
  while (st_.step < c_.total_steps) {
    c_.train_loader->start_epoch(st_.epoch, st_.cursor);
    std::vector<data::Batch> micro;
    bool epoch_done = true;  // false: the run ended in the middle of the epoch
    while (true) {
      const double asked = mono_now();
      std::optional<data::Batch> b;
      {
        RECORD_USER_SCOPE("dlrun::data_wait");
        b = c_.train_loader->next();
        fault::slow_batch();
      }
      data_wait_s_ += mono_now() - asked;
      if (!b) break;
      micro.push_back(std::move(*b));
      if (static_cast<int64_t>(micro.size()) < cfg_.train.grad_accum) continue;
      profiler_.before_step(st_.step);
      step(micro);
      profiler_.after_step(st_.step);
      micro.clear();
      if (auto code = at_boundary(false)) return *code;
      if (st_.step >= c_.total_steps) {
        epoch_done = st_.cursor >= c_.steps_per_epoch * cfg_.data.batch_size;
        break;
      }
    }
    if (!epoch_done) break;
    st_.epoch += 1;
    st_.cursor = 0;
    if (auto code = at_boundary(true)) return *code;
  }
  return finish();
}

// Multi-process: every rank starts from rank 0's parameters and buffers (DDP's initial
// broadcast), then gradients are averaged by the Reducer. Without synchronised BatchNorm each
// rank's running statistics drift apart during a step; rank 0's are broadcast before every
// step, evaluation and save, as DDP's broadcast_buffers does before every forward.
void Trainer::join() {
  broadcast_module(*group_, *c_.model);
  std::vector<torch::Tensor> params;
  for (auto& p : c_.model->parameters())
    if (p.requires_grad()) params.push_back(p);
  grad_sync_ = std::make_unique<dist::GradSync>(*group_, params, cfg_.dist.bucket_mb);
  const bool buffers = !cfg_.dist.sync_bn && !c_.model->buffers().empty();
  std::function<void()> before_step;
  if (buffers) before_step = [this] { broadcast_module(*group_, *c_.model, /*buffers_only=*/true); };
  runner_.distribute(grad_sync_.get(), before_step);
  log0::info("gradients averaged across {} ranks in {} bucket(s) (dist.bucket_mb={}){}; rank {} trains on {} with "
             "micro-batches of {}",
             group_->size(), grad_sync_->buckets(), cfg_.dist.bucket_mb,
             cfg_.dist.sync_bn ? "; BatchNorm synchronised (dist.sync_bn)"
                               : buffers ? "; BatchNorm buffers from rank 0 before each step" : "",
             c_.placement.rank, c_.placement.device.str(),
             cfg_.data.batch_size / (group_->size() * cfg_.train.grad_accum));
}

/// Rank 0's BatchNorm running statistics on every rank (see join()).
void sync_buffers(dist::Group* group, const Config& cfg, torch::nn::Module& model) {
  if (group && !cfg.dist.sync_bn) broadcast_module(*group, model, /*buffers_only=*/true);
}

// Every start-up check has passed: from here on the run directory is written, and a failure
// is recorded in it (record_failure). Only rank 0 writes.
void Trainer::begin() {
  begun_ = true;
  start_mono_ = last_save_mono_ = last_log_mono_ = mono_now();
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(c_.placement.device);
  loss_.sum = torch::zeros({}, f64);
  if (!leader()) return;
  if (set_aside_) log0::warn("--force: the previous run was moved to {}", dir_.set_aside_previous_run());
  const int64_t furthest = dir_.furthest_logged_step();  // steps an interrupted process got to
  st_.steps_lost_last = std::max<int64_t>(0, furthest - st_.step);
  st_.steps_lost_total += st_.steps_lost_last;
  const std::string kept =
      dir_.write_config("resolved by " + build::version_line(), config::to_yaml(cfg_, false), st_.step);
  if (!kept.empty()) log0::info("the config changed since the last segment; the previous one is kept as {}", kept);
  report_.add(metrics::jsonl_sink(dir_.metrics_jsonl()));
  if (cfg_.log.tensorboard) report_.add(metrics::tensorboard_sink(dir_.path()));
  report_.add(metrics::progress_sink(cfg_.log, c_.total_steps));
  if (c_.placement.device.is_cuda()) {  // telemetry of the GPU this process trains on
    const int index = c_.placement.device.has_index() ? c_.placement.device.index() : 0;
    std::string why;
    nvml_ = metrics::Nvml::open(cuda::pci_bus_id(index), static_cast<unsigned>(index), &why);
    if (nvml_) log0::info("GPU telemetry from NVML: {} (gpu_* in metrics.jsonl)", nvml_->name());
    else log0::info("no GPU telemetry: {}", why);
  }
  if (fetched_) {  // a checkpoint downloaded from remote storage is kept beside the others
    resumed_from_ = ckpt::commit_files(*fetched_, dir_.checkpoints());
    log0::info("the downloaded checkpoint is kept as {}", resumed_from_);
    fetched_.reset();
  }
  writer_ = std::make_unique<ckpt::Writer>(dir_.checkpoints(), cfg_.checkpoint);
  if (remote_) {
    uploader_ = std::make_unique<ckpt::Uploader>(*remote_, cfg_.checkpoint);
    writer_->on_commit([up = uploader_.get()](const ckpt::Writer::Stats& s) { up->submit(s.path, s.step); });
    writer_->in_use([up = uploader_.get()] { return up->in_use(); });
    log0::info("checkpoints are uploaded to {}", remote_->url().str());
  }
  metrics::Event e{"start", st_.step};
  e.fields = {{"epoch", st_.epoch}, {"total_steps", c_.total_steps}, {"world_size", c_.placement.world_size},
              {"resumed_from", resumed_from_}, {"steps_lost", st_.steps_lost_last},
              {"config_kept", kept}, {"version", build::version_line()}};
  report_.report(std::move(e));
}

void Trainer::step(const std::vector<data::Batch>& micro) {
  last_lr_ = lr_at(c_.schedule, st_.step);
  StepResult r = runner_.run(micro, last_lr_);
  const int64_t done = st_.step + 1;
  if (cfg_.train.nonfinite == NonfinitePolicy::kStop) {  // remember the first bad step on the device
    if (!loss_.first_bad.defined())
      loss_.first_bad = torch::full({}, -1, torch::TensorOptions().dtype(torch::kLong).device(c_.placement.device));
    loss_.first_bad = torch::where(loss_.first_bad.lt(0).logical_and(r.nonfinite), done, loss_.first_bad);
  }
  loss_.last = r.loss;
  if (r.skipped.defined()) {  // counted when the loop next reads from the device (settle_skips)
    loss_.sum = loss_.sum + torch::where(r.skipped, torch::zeros_like(r.loss), r.loss);
    const auto one = r.skipped.to(torch::kFloat64);
    loss_.pending = loss_.pending.defined() ? loss_.pending + one : one;
  } else {
    loss_.sum = loss_.sum + r.loss;
  }
  ++loss_.steps;
  st_.step = done;
  st_.cursor += cfg_.data.batch_size;
  samples_since_log_ += cfg_.data.batch_size;
  samples_this_process_ += cfg_.data.batch_size;
}

std::optional<int> Trainer::at_boundary(bool epoch_end) {
  const Boundary b{st_.step, st_.epoch, c_.total_steps, epoch_end};
  report_uploads();
  if (!epoch_end) report_.tick({st_.step, st_.epoch, samples_per_s(mono_now()), last_lr_});
  if (log_due(cfg_.log, b)) log_step();  // the record of a step that has happened
  if (!epoch_end) fault::after_step(st_.step);
  // An evaluation due here and not done is recorded in the checkpoint, and the resumed run
  // does it first: interrupting must not lose it.
  st_.eval_pending = eval_due(cfg_.train, b, last_eval_step_);
  if (stop_agreed()) return interrupted();
  if (st_.eval_pending && !run_eval()) return interrupted();
  SaveReason why =
      save_due(cfg_.checkpoint, b, (mono_now() - last_save_mono_) / 60.0, last_saved_step_, save_interval_minutes());
  // Saves by the clock: each rank has its own, so they agree (any rank due: all save).
  if (group_ && cfg_.checkpoint.every_minutes != 0 && group_->any(why != SaveReason::kNone) &&
      why == SaveReason::kNone)
    why = SaveReason::kEveryMinutes;
  if (why != SaveReason::kNone) {
    save(why, !cfg_.checkpoint.async);
    if (stop_agreed()) return interrupted();
  }
  return std::nullopt;
}

// A signal or a notice seen by any rank stops every rank at the same step boundary.
bool Trainer::stop_agreed() const {
  const bool mine = preempt::stop_requested();
  return group_ ? group_->any(mine) : mine;
}

void Trainer::log_step() {
  const auto bad = loss_.first_bad.defined() ? loss_.first_bad.to(torch::kFloat64) : torch::full_like(loss_.sum, -1);
  auto host = torch::stack({loss_.last, loss_.sum, bad}).to(torch::kCPU);  // one read for all three
  host = torch::cat({host, torch::full({1}, data_wait_s_, host.options())});
  if (group_) {  // the mean loss over ranks, the first non-finite step of any, the slowest loader
    const auto all = torch::stack(group_->all_gather(host));  // (ranks, 4)
    host = torch::stack({all.select(1, 0).mean(), all.select(1, 1).mean(), all.select(1, 2).max(), all.select(1, 3).max()});
  }
  if (host[2].item<double>() >= 0) fail_nonfinite(static_cast<int64_t>(host[2].item<double>()));
  settle_skips();
  final_loss_ = host[0].item<double>();
  const double now = mono_now();
  const double wait = host[3].item<double>();
  const double wait_frac = wait / std::max(1e-9, now - last_log_mono_);
  metrics::Event e{"train", st_.step};
  e.scalars = {{"loss", final_loss_},
               {"loss_avg", loss_.steps > loss_.skipped ? host[1].item<double>() / static_cast<double>(loss_.steps - loss_.skipped) : NAN},
               {"lr", last_lr_},
               {"samples_per_s", samples_per_s(now)},
               {"data_wait_s", wait},
               {"data_wait_frac", wait_frac}};
  // Where this rank's steps spent their time (the loss read above waited for them on a GPU).
  const PhaseTimes phases = runner_.take_phase_times();
  if (phases[0] + phases[1] + phases[2] > 0) {  // steps replayed from a CUDA graph are not split
    e.scalars.push_back({"forward_s", phases[0]});
    e.scalars.push_back({"backward_s", phases[1]});
    e.scalars.push_back({"optimizer_s", phases[2]});
  }
  for (int i = 0; i < kPhases; ++i) phase_total_s_[i] += phases[i];
  data_wait_total_s_ += data_wait_s_;
  if (nvml_) add_gpu_telemetry(e);
  e.fields = {{"epoch", st_.epoch}};
  report_.report(std::move(e));
  warn_if_loader_bound(wait_frac);
  ++logs_;
  loss_.sum.zero_();
  loss_.steps = 0;
  loss_.skipped = 0;
  samples_since_log_ = 0;
  data_wait_s_ = 0;
  last_log_mono_ = now;
}

// GPU utilisation, memory, power and temperature of the leader's GPU (NVML), and what the
// caching allocator holds; a sensor the board lacks is left out.
void Trainer::add_gpu_telemetry(metrics::Event& e) const {
  const auto g = nvml_->sample();
  if (!g) return;
  for (const auto& [name, v] : {std::pair<const char*, double>{"gpu_util_pct", g->util_pct},
                                {"gpu_mem_util_pct", g->mem_util_pct},
                                {"gpu_mem_used_mb", g->mem_used_mb},
                                {"gpu_power_w", g->power_w},
                                {"gpu_temp_c", g->temp_c}})
    if (std::isfinite(v)) e.scalars.push_back({name, v});
}

// One warning per run when the step loop spends a large share of its time waiting for data
// (the first log interval is left out: it includes the loader's start and the warm-up).
void Trainer::warn_if_loader_bound(double wait_frac) {
  constexpr double kLoaderBound = 0.25;
  if (told_loader_bound_ || logs_ == 0 || wait_frac < kLoaderBound || !leader()) return;
  told_loader_bound_ = true;
  std::string knob;
  if (cfg_.data.workers == 0)
    knob = "set data.workers (decoding and augmentation run inline in the step loop now)";
  else
    knob = fmt::format("raise data.workers (now {}; this host has {} cores){}", cfg_.data.workers,
                       std::thread::hardware_concurrency(),
                       c_.placement.device.is_cuda() && !cfg_.data.device_resident
                           ? ", or keep an in-memory dataset on the GPU (data.device_resident: true)"
                           : "");
  log0::warn("the data loader is the bottleneck: the step loop waited for batches {:.0f}% of the time in the last "
             "{} steps; {} (data_wait_frac in metrics.jsonl)",
             100 * wait_frac, cfg_.log.every_steps, knob);
}

bool Trainer::run_eval() {
  check_finite();
  fault::during("eval");
  sync_buffers(group_, cfg_, *c_.model);
  std::function<void(torch::Tensor&)> reduce;  // each rank evaluates its share of the batches
  if (group_) reduce = [this](torch::Tensor& sums) { group_->all_reduce(sums); };
  auto r = evaluate(*c_.model, *c_.eval_loader, reduce, [] { return preempt::stop_requested(); });
  if (group_) r.complete = !group_->any(!r.complete);
  if (!r.complete) {
    st_.eval_pending = true;
    return false;
  }
  st_.eval_pending = false;
  last_eval_step_ = st_.step;
  last_eval_ = {{"accuracy", r.accuracy}, {"top5", r.top5}, {"loss", r.loss}, {"samples", r.samples}, {"step", st_.step}};
  metrics::Event e{"eval", st_.step};
  e.scalars = {{"accuracy", r.accuracy}, {"top5", r.top5}, {"loss", r.loss}};
  e.fields = {{"epoch", st_.epoch}, {"samples", r.samples}};
  e.message = fmt::format("eval at step {} (epoch {}): accuracy {:.4f}, top-5 {:.4f}, loss {:.4f}", st_.step, st_.epoch,
                          r.accuracy, r.top5, r.loss);
  report_.report(std::move(e));
  return true;
}

void Trainer::save(SaveReason why, bool sync) {
  check_finite();  // never commit weights a non-finite step has already spoiled
  const double t0 = mono_now();
  std::vector<ckpt::TensorDict> rngs;  // every rank's, written by rank 0
  if (group_) {
    sync_buffers(group_, cfg_, *c_.model);
    rngs = gather_rng_states(*group_, c_.placement.device);
  }
  double copied = t0;
  if (leader()) {
    auto snap = make_snapshot(cfg_, *c_.model, *c_.optimizer, runner_.scaler(), st_, c_.total_steps,
                              c_.placement.device, group_ ? &rngs : nullptr);
    copied = mono_now();
    fault::during("save");
    // With async writes, save() rethrows the failure of the previous (periodic) background
    // write after queuing this one; wait() and a synchronous save() throw this one's.
    bool failed = false;
    try {
      writer_->save(std::move(snap));
    } catch (const Error& e) {
      save_failed(e, cfg_.checkpoint.async ? SaveReason::kNone : why);  // kNone: an earlier periodic save
      failed = !cfg_.checkpoint.async;
    }
    if (sync && !failed) {
      try {
        writer_->wait();
      } catch (const Error& e) {
        save_failed(e, why);
        failed = true;
      }
    }
    if (failed) return;  // this step is not saved; the next save (or the end) tries again
  }
  const double now = mono_now();
  last_save_mono_ = now;
  last_saved_step_ = st_.step;
  last_stall_s_ = now - t0;
  // With uploads the cost is the stall plus the upload, known once uploaded (report_uploads);
  // until then the stall alone stands in, so `auto` does not save at every step meanwhile.
  if (!uploader_ || save_cost_s_ < 0) save_cost_s_ = last_stall_s_;
  metrics::Event e{"checkpoint", st_.step};
  e.scalars = {{"copy_s", copied - t0}, {"stall_s", now - t0}};
  e.fields = {{"reason", name_of(why)}, {"path", dir_.checkpoints() + "/" + ckpt::dir_name(st_.step)}, {"async", !sync}};
  report_.report(std::move(e));
}

// A checkpoint that could not be written (a full disk, an I/O error, a read-only file system).
// The commit removed its partial directory and every committed checkpoint is as it was. A
// periodic save obeys checkpoint.on_error (continue: report and train on, the next save tries
// again); the final save and a preemption save are the run's result, so their failure ends
// the run (exit 1) whatever the policy.
void Trainer::save_failed(const Error& e, SaveReason why) {
  const bool periodic = why != SaveReason::kEnd && why != SaveReason::kPreemption;  // kNone: an earlier async save
  ++save_errors_;
  last_saved_step_ = -1;  // the failed write may have been the newest: the end and a stop save again
  const std::string last = writer_->last().step >= 0 ? writer_->last().path : std::string("none");
  metrics::Event ev{"checkpoint_error", st_.step};
  ev.fields = {{"reason", periodic ? "periodic" : name_of(why)}, {"error", e.message()}, {"last_committed", last}};
  ev.message = fmt::format("checkpoint could not be written: {}", e.message());
  log::error("{} (the last committed checkpoint, {}, is intact)", ev.message, last);
  report_.report(std::move(ev));
  if (periodic && cfg_.checkpoint.on_error == RemoteErrorPolicy::kContinue) return;
  throw Error(ExitCode::kRuntime,
              fmt::format("the {} checkpoint could not be written: {} (the last committed checkpoint, {}, is intact)",
                          periodic ? "periodic" : name_of(why), e.message(), last),
              std::string("free space or fix the file system, then requeue: --resume auto continues from the last "
                          "committed checkpoint") +
                  (periodic ? "; checkpoint.on_error: continue trains on when a periodic save fails" : ""));
}

void Trainer::report_uploads() {
  if (!uploader_) return;
  std::optional<ckpt::Uploader::Result> stop_for;  // every result is reported before on_error: stop ends the run
  for (const auto& r : uploader_->drain()) {
    if (r.ok) {
      metrics::Event e{"upload", r.step, r.wall_time};
      e.scalars = {{"seconds", r.seconds}, {"mb_per_s", r.bytes / 1e6 / std::max(1e-9, r.seconds)}};
      e.fields = {{"url", r.url}, {"bytes", r.bytes}, {"attempt", r.attempt}};
      report_.report(std::move(e));
      save_cost_s_ = last_stall_s_ + r.seconds;  // what a save costs when the checkpoint must reach storage
      continue;
    }
    metrics::Event e{"upload_error", r.step, r.wall_time};
    e.fields = {{"url", r.url}, {"error", r.error}, {"attempt", r.attempt}, {"final", r.final},
                {"retry_in_s", r.retry_in_s}};
    e.message = r.final ? fmt::format("upload of step {} to {} failed for good (attempt {}): {}", r.step, r.url,
                                      r.attempt, r.error)
                        : fmt::format("upload of step {} failed (attempt {}), retrying in {:.0f} s: {}", r.step,
                                      r.attempt, r.retry_in_s, r.error);
    log::warn("{}", e.message);
    report_.report(std::move(e));
    if (r.final && cfg_.checkpoint.on_error == RemoteErrorPolicy::kStop && !stop_for) stop_for = r;
  }
  if (stop_for)
    throw Error(ExitCode::kRuntime,
                fmt::format("the checkpoint of step {} could not be uploaded to {}: {} (checkpoint.on_error: stop)",
                            stop_for->step, stop_for->url, stop_for->error),
                "the local checkpoint is intact; fix the remote storage and requeue, or set checkpoint.on_error: "
                "continue");
}

// checkpoint.every_minutes, with `auto` resolved by Young and Daly's rule: the interval that
// minimizes the expected loss to interruptions, sqrt(2 x save cost x mean time between them),
// with the save cost this run measured (the stall, plus the upload with remote storage).
double Trainer::save_interval_minutes() {
  const double every = cfg_.checkpoint.every_minutes;
  if (!is_auto(every)) return every;
  if (save_cost_s_ < 0) {
    if (interval_logged_ < 0) {
      log0::info("checkpoint.every_minutes=auto: saving at the next step boundary to measure what a save costs");
      interval_logged_ = 0;
    }
    return 1e-9;  // due at once
  }
  const double mtbf_s = cfg_.preemption.mtbf_hours * 3600.0;
  const double minutes = std::sqrt(2.0 * std::max(save_cost_s_, 1e-3) * mtbf_s) / 60.0;
  if (interval_logged_ <= 0 || std::abs(minutes - interval_logged_) > 0.1 * interval_logged_) {
    log0::info("checkpoint.every_minutes=auto: every {:.2f} min = sqrt(2 x {:.3f} s save cost x {} h mean time between "
               "interruptions)",
               minutes, save_cost_s_, cfg_.preemption.mtbf_hours);
    metrics::Event e{"checkpoint_interval", st_.step};
    e.scalars = {{"minutes", minutes}, {"save_cost_s", save_cost_s_}};
    e.fields = {{"mtbf_hours", cfg_.preemption.mtbf_hours}};
    report_.report(std::move(e));
    interval_logged_ = minutes;
  }
  return minutes;
}

void Trainer::check_finite() {
  settle_skips();
  if (!loss_.first_bad.defined()) return;
  const int64_t bad = loss_.first_bad.item<int64_t>();
  if (bad >= 0) fail_nonfinite(bad);
}

// Skipped steps are decided on the device; the host counts them when it reads anyway (a
// metrics line, a save, the end), and reports them then: one `skip` event per read.
void Trainer::settle_skips() {
  if (!loss_.pending.defined()) return;
  const auto n = static_cast<int64_t>(std::llround(loss_.pending.item<double>()));
  loss_.pending.zero_();
  if (n == 0) return;
  st_.skipped_steps += n;
  loss_.skipped += n;
  std::string reason = runner_.skip_reason();
  if (runner_.scaler().active()) reason += fmt::format("; loss scale now {}", runner_.scaler().scale_value());
  metrics::Event e{"skip", st_.step};
  e.fields = {{"reason", reason}, {"steps", n}, {"skipped_steps", st_.skipped_steps}};
  log::warn("{} update(s) skipped up to step {}: {}", n, st_.step, reason);
  report_.report(std::move(e));
}

void Trainer::fail_nonfinite(int64_t step) const {
  throw Error(ExitCode::kRuntime,
              fmt::format("step {}: the training loss or a gradient is not finite (inf or NaN); stopping "
                          "(train.nonfinite: stop)",
                          step),
              "lower optim.lr, set train.clip_grad_norm, or train.nonfinite: skip to skip such steps; checkpoints "
              "written before step " + std::to_string(step) + " are unaffected");
}

int Trainer::interrupted() {
  std::string reason = preempt::stop_reason();
  double signal_time = preempt::stop_time();
  if (reason.empty()) reason = "stop requested by another rank";
  if (signal_time <= 0) signal_time = wall_now();
  if (last_saved_step_ != st_.step) {
    log0::info("{} received: saving a checkpoint at step {} and exiting with code 75", reason, st_.step);
    save(SaveReason::kPreemption, /*sync=*/true);
  } else {
    log0::info("{} received: step {} is already saved; exiting with code 75", reason, st_.step);
    if (writer_) {
      try {
        writer_->wait();
      } catch (const Error& e) {
        save_failed(e, SaveReason::kPreemption);  // throws: nothing new is committed, so not 75
      }
    }
  }
  profiler_.finish(st_.step);  // the steps traced so far, after the checkpoint
  if (!leader()) return kInterrupted;  // rank 0 has committed the checkpoint (save() is collective)
  const double commit_time = wall_now();
  log0::info("local checkpoint committed {:.2f} s after {}", commit_time - signal_time, reason);
  // Then the upload, within the deadline (counted from the signal). An older checkpoint still
  // going up gives way to this one. The wait ends a little before the deadline: abandoning an
  // upload under way and exiting take up to about a second.
  nlohmann::json remote_commit = nullptr;
  std::string remote_note;
  if (uploader_) {
    uploader_->supersede_older(st_.step);
    const double deadline_s = cfg_.preemption.deadline_or_default();
    double deadline = 0;  // none
    if (deadline_s > 0) {
      const double margin = std::min(2.0, 0.1 * deadline_s);
      deadline = std::max(mono_now() + 1e-3, mono_now() + (signal_time + deadline_s - margin - wall_now()));
    }
    const bool done = uploader_->wait(deadline);
    const auto totals = uploader_->totals();
    if (done && totals.last_step == st_.step) {
      remote_commit = wall_now();
      log0::info("remote checkpoint {} committed {:.2f} s after {}", totals.last_url,
                 remote_commit.get<double>() - signal_time, reason);
    } else {
      remote_note = done ? "the upload failed: " + totals.last_error
                         : fmt::format("the upload did not finish within the {:.0f} s deadline (preemption.deadline_s)",
                                       deadline_s);
      log::warn("{}; exiting 75 with the local checkpoint", remote_note);
    }
  }
  // The checkpoint is committed: from here on the exit code is 75 whatever happens to the
  // records (a full disk under metrics.jsonl must not stop the scheduler from requeueing).
  try {
    report_uploads();
  } catch (const std::exception& e) {
    log::error("{}", e.what());  // on_error: stop cannot turn a committed preemption into a failure
  }
  try {
    read_last_loss();
    metrics::Event e{"preempt", st_.step};
    e.scalars = {{"latency_s", commit_time - signal_time}};
    e.fields = {{"reason", reason}, {"signal_time", signal_time}, {"commit_time", commit_time}, {"steps_lost", 0}};
    if (uploader_) {
      e.fields["remote_commit_time"] = remote_commit;
      if (!remote_commit.is_null()) e.scalars.emplace_back("remote_latency_s", remote_commit.get<double>() - signal_time);
      if (!remote_note.empty()) e.fields["remote_note"] = remote_note;
    }
    st_.preemption = e.fields;
    st_.preemption["event"] = "preempt";
    st_.preemption["latency_s"] = commit_time - signal_time;
    st_.preemption["step"] = st_.step;
    report_.report(std::move(e));
    dir_.write_summary(summary("interrupted"));
    report_.close();
  } catch (const std::exception& e) {
    log::error("the checkpoint is committed, but the run's records could not be written: {}", e.what());
  }
  return kInterrupted;
}

int Trainer::finish() {
  profiler_.finish(st_.step);
  check_finite();  // also counts the last skipped steps
  if (final_eval_due(cfg_.train, st_.step, last_eval_step_) && !run_eval()) return interrupted();
  if (final_save_due(cfg_.checkpoint, st_.step, last_saved_step_)) save(SaveReason::kEnd, /*sync=*/true);
  if (!leader()) return 0;
  try {
    writer_->wait();
  } catch (const Error& e) {
    save_failed(e, SaveReason::kEnd);  // the last save was this step's: the run's result is not stored
  }
  if (uploader_) {
    uploader_->wait(0, /*retention=*/true);  // the last checkpoint off the instance (retries are bounded)
    report_uploads();
  }
  read_last_loss();
  dir_.write_summary(summary("completed"));
  metrics::Event e{"end", st_.step};
  e.fields = {{"status", "completed"}};
  report_.report(std::move(e));
  report_.close();
  log0::info("done: {} steps, eval accuracy {}, summary in {}", st_.step,
             last_eval_.is_null() ? std::string("n/a") : fmt::format("{:.4f}", last_eval_["accuracy"].get<double>()),
             dir_.summary_json());
  return 0;
}

double Trainer::read_last_loss() {
  if (loss_.last.defined()) final_loss_ = loss_.last.item<double>();
  return final_loss_;
}

nlohmann::json Trainer::remote_summary() const {
  if (!remote_) return nullptr;
  nlohmann::json j = {{"url", remote_->url().str()}};
  if (!uploader_) return j;
  const auto t = uploader_->totals();
  j["checkpoint"] = t.last_url.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.last_url);
  j["uploads"] = t.uploaded;
  j["failed_attempts"] = t.failed_attempts;
  j["given_up"] = t.given_up;
  j["last_error"] = t.last_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.last_error);
  j["bytes"] = t.bytes;
  j["upload_s"] = t.seconds;
  return j;
}

nlohmann::json Trainer::summary(const std::string& status) {
  const double wall = mono_now() - start_mono_;
  const double useful = static_cast<double>(st_.step);
  const double computed = useful + static_cast<double>(st_.steps_lost_total);
  std::string checkpoint = resumed_from_;
  if (writer_ && writer_->last().step >= 0) checkpoint = writer_->last().path;
  nlohmann::json fingerprint = nullptr;
  try {
    fingerprint = params_sha256(*c_.model);
  } catch (const std::exception& e) {
    log::warn("params_sha256 could not be computed: {}", e.what());
  }
  nlohmann::json peak_cuda = nullptr;
#ifdef DLRUN_TORCH_HAS_CUDA
  if (c_.placement.device.is_cuda()) {  // the caching allocator's high-water marks on this device
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c_.placement.device.has_index() ? c_.placement.device.index() : 0);
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    peak_cuda = nlohmann::json{{"allocated", static_cast<double>(stats.allocated_bytes[agg].peak) / (1 << 20)},
                               {"reserved", static_cast<double>(stats.reserved_bytes[agg].peak) / (1 << 20)}};
  }
#endif
  return {
      {"status", status},
      {"steps", st_.step},
      {"epochs", static_cast<double>(st_.step) / static_cast<double>(c_.steps_per_epoch)},
      {"final_train_loss", or_null(final_loss_)},
      {"eval", last_eval_.is_null() ? nlohmann::json(nullptr) : last_eval_},
      {"wall_time_s", wall},
      {"samples_per_s", static_cast<double>(samples_this_process_) / std::max(1e-9, wall)},
      // Up to the last log line: data wait, forward, backward, optimizer (metrics.jsonl has each
      // interval). Steps replayed from a CUDA graph are not split into phases: their totals would
      // count the eager warm-up steps alone, so they are null.
      {"time_s", {{"data_wait", data_wait_total_s_}, {"forward", phase_total(0)}, {"backward", phase_total(1)},
                  {"optimizer", phase_total(2)}}},
      {"peak_cuda_memory_mb", peak_cuda},
      {"profile_trace", profiler_.written().empty() ? nlohmann::json(nullptr) : nlohmann::json(profiler_.written())},
      {"checkpoint", checkpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(checkpoint)},
      {"params_sha256", fingerprint},
      {"skipped_steps", st_.skipped_steps},
      {"checkpoint_errors", save_errors_},
      {"steps_lost", st_.steps_lost_total},
      {"goodput", computed > 0 ? useful / computed : 1.0},
      {"preemption", st_.preemption},
      {"resumed_from_step", st_.resumed_from_step},
      {"device", c_.placement.device.str()},
      {"world_size", c_.placement.world_size},
      {"version", build::version_line()},
      {"remote", remote_summary()},
  };
}

void Trainer::record_failure(const std::string& what) noexcept {
  if (!begun_ || !leader()) return;  // failed before the run directory was written: leave it as it was
  try {
    if (writer_) writer_->wait();
  } catch (const std::exception& e) {
    log::error("checkpoint write failed: {}", e.what());
  }
  try {
    try {
      read_last_loss();
    } catch (...) {
    }
    nlohmann::json s = summary("failed");
    s["error"] = what;
    dir_.write_summary(s);
    metrics::Event e{"end", st_.step};
    e.fields = {{"status", "failed"}, {"error", what}};
    report_.report(std::move(e));
    report_.close();
  } catch (...) {
  }
}

/// A stop request that arrives during start-up (on any rank): nothing has been trained or
/// written, so there is nothing to save and requeueing loses nothing.
bool stopped_during_startup(const char* phase, dist::Group* group) {
  const bool mine = preempt::stop_requested();
  if (!(group ? group->any(mine) : mine)) return false;
  log0::warn("{} received during start-up ({}): nothing trained yet, the run directory is unchanged; exiting with "
             "code 75",
             mine ? preempt::stop_reason() : std::string("a stop request on another rank"), phase);
  return true;
}

int train_in(const TrainArgs& args, const RunDir& dir, const Placement& placement, dist::Group* group) {
  Trainer trainer(args, dir, placement, group);  // data files, model, optimizer: the cheap failures first
  fault::during("startup");
  if (stopped_during_startup("after loading data", group)) return kInterrupted;
  trainer.resume(trainer.leader() ? plan_resume(args.resume, args.force, dir, trainer.remote_store()) : ResumePlan{});
  if (trainer.leader()) trainer.save_init();
  if (stopped_during_startup("after loading the checkpoint", group)) return kInterrupted;
  preempt::NoticeWatcher watcher(args.cfg.preemption);  // a bad source is refused here
  if (stopped_during_startup("before the first step", group)) return kInterrupted;
  try {
    return trainer.run();
  } catch (const Error& e) {
    trainer.record_failure(e.render());
    throw;
  } catch (const std::exception& e) {
    trainer.record_failure(e.what());
    throw;
  }
}

}  // namespace

int run(const TrainArgs& args) {
  preempt::install_signal_handlers();  // (again: `dlrun train` installs them before loading the config)
  const dist::World world = dist::world_from_env();
  log::set_rank(world.rank, world.size);
  RunDir dir(args.run_dir, args.cfg.checkpoint.dir);
  std::unique_ptr<RunLock> lock;  // one trainer per run directory; in a multi-process run, rank 0 writes it
  if (world.rank == 0) lock = std::make_unique<RunLock>(dir.path());
  const Placement placement = place(args.cfg, world);
  std::unique_ptr<dist::Group> group;
  // A world of one trains without a process group, unless it was started by a launcher and
  // dist.backend names a backend: then the whole distributed path runs on one rank (what the
  // Reducer and the collectives cost, measured against the plain run; docs/distributed.md).
  const bool one_rank_group = world.launcher != "none" && args.cfg.dist.backend != DistBackend::kAuto;
  if (world.distributed() || one_rank_group) {
    try {
      group = dist::Group::connect(world, args.cfg.dist, placement.device);
    } catch (const dist::StoppedDuringRendezvous& e) {
      log::warn("{}: nothing trained yet, the run directory is unchanged; exiting with code 75", e.what());
      return kInterrupted;
    }
    log0::info("{}", group->describe());
  }
  try {
    return train_in(args, dir, placement, group.get());
  } catch (const Error& e) {
    if (group) group->report_failure(e.message());
    throw;
  } catch (const std::exception& e) {
    if (group) group->report_failure(e.what());
    throw;
  }
}

}  // namespace dlrun::train
