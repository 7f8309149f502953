// The training loop (see trainer.h). run() checks everything that can be refused before the
// run directory is written; Trainer::run() is the loop itself, and it only orders decisions:
//
//   epochs -> micro-batches -> one optimizer step (StepRunner) -> step boundary:
//     log due?         -> the meter reads the loss (and the non-finite flag) from the device
//     stop requested?  -> save, exit 75
//     eval due?        -> evaluate (ends early on a stop request), report
//     save due?        -> the checkpointer snapshots the parts and writes in the background
//   then the final evaluation and save, and summary.json.
//
// Each concern is a collaborator that owns its state and events and never sees the Trainer:
// StepMeter (what the steps did), Checkpointer (when and how the run saves, uploads),
// Replicas (the other ranks, or a world of one), CheckpointParts (what a checkpoint holds),
// run_summary (summary.json). docs/design.md, "The loop and its collaborators".
#include "train/trainer.h"

#include <ATen/record_function.h>

#include <optional>
#include <utility>

#include "base/build_info.h"
#include "base/clock.h"
#include "base/fault.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "checkpoint/rng.h"
#include "config/loader.h"
#include "data/shard_store.h"
#include "distributed/group.h"
#include "distributed/replicas.h"
#include "distributed/rescue.h"
#include "metrics/sink.h"
#include "models/fingerprint.h"
#include "preempt/preempt.h"
#include "run/run_dir.h"
#include "run/triggers.h"
#include "train/components.h"
#include "train/observe/evaluations.h"
#include "train/observe/goodput.h"
#include "train/observe/outputs.h"
#include "train/observe/profiler.h"
#include "train/observe/step_meter.h"
#include "train/observe/summary.h"
#include "train/state/checkpointer.h"
#include "train/state/parts.h"
#include "train/state/resume.h"
#include "train/start.h"
#include "train/step/step.h"
#include "train/trainer_loop.h"

namespace dlrun::train {
int Trainer::run() {
  begin();
  try {
    if (st_.eval_pending && !run_eval()) return stop_and_save();  // the evaluation an interruption cut off
    act_on_verdict();  // (its best is the checkpoint resumed from)
    data::Loader& loader = *c_.train_loader;
    while (st_.step < st_.last_step) {
      boundary_ = loader.position();
      std::vector<data::Batch> micro;
      bool epoch_done = true;  // false: the run ended in the middle of the epoch
      while (std::optional<data::Batch> b = next_batch()) {
        micro.push_back(std::move(*b));
        if (static_cast<int64_t>(micro.size()) < cfg_.train.grad_accum) continue;
        profiler_.before_step(st_.step);
        step(micro);
        profiler_.after_step(st_.step);
        micro.clear();
        if (auto code = at_boundary(false)) return *code;
        boundary_ = loader.position();
        if (st_.step >= st_.last_step) {
          epoch_done = loader.epoch_consumed();
          break;
        }
      }
      if (!epoch_done) break;
      c_.averages.at_epoch_end(loader.position().epoch, st_.step);  // before the epoch end's checkpoint
      loader.seek({loader.position().epoch + 1, 0});
      if (auto code = at_boundary(true)) return *code;
    }
    if (loader.epoch_consumed()) c_.averages.at_epoch_end(epoch(), st_.step);  // resumed at the end, unaveraged
    return finish();
  } catch (const data::StopWhileWaiting& e) {  // a stop request while the loader waited for a shard (one process)
    log0::info("{}", e.message());
    return stop_and_save();
  } catch (const std::exception&) {
    if (auto code = rescue()) return *code;  // a lost peer: the survivors save what they hold
    throw;
  }
}

// Every start-up check has passed: from here on the run directory is written, and a failure
// is recorded in it (record_failure). Only rank 0 writes.
void Trainer::begin() {
  start_mono_ = mono_now();
  meter_.begin(start_mono_);
  profiler_.plan(st_.step, st_.last_step);
  ckpt_.start();
  if (!leader()) {
    if (endpoint_) meter_.watch_gpu(), report_.add(std::move(endpoint_));  // log.metrics_every_rank: its own
    return;
  }
  if (plan_.set_aside) log0::warn("--force: the previous run was moved to {}", dir_.set_aside_previous_run());
  ckpt_.abandon(plan_.abandon_after, plan_.set_aside_remote);  // steps of a timeline given up
  // A fresh VM resuming from the store: the run's records come with it, so its account counts
  // the earlier processes (their interruptions, the steps replayed) and its metrics begin at 0.
  if (plan_.fetched) ckpt_.fetch_history(dir_.path());
  const int64_t furthest = dir_.furthest_logged_step();  // steps an interrupted process got to
  st_.steps_lost_last = std::max<int64_t>(0, furthest - st_.step);
  st_.steps_lost_total += st_.steps_lost_last;
  const std::string kept =
      dir_.write_config("resolved by " + build::version_line(), config::to_yaml(cfg_, false), st_.step);
  if (!kept.empty()) log0::info("the config changed since the last segment; the previous one is kept as {}", kept);
  account_.begin();  // the earlier processes' records, before this one's
  add_run_sinks(report_, cfg_, dir_, st_.last_step, std::move(endpoint_), account_.live_cost());
  meter_.watch_gpu();
  ckpt_.open(std::exchange(plan_.fetched, std::nullopt), plan_.upload_resumed);  // the download's bytes freed here
  ckpt_.keep_history(dir_.path());
  metrics::Event e{"start", st_.step};
  e.fields = {{"epoch", epoch()}, {"total_steps", st_.last_step}, {"world_size", c_.placement.world_size},
              {"resumed_from", ckpt_.resumed_from()}, {"steps_lost", st_.steps_lost_last},
              {"config_kept", kept}, {"version", build::version_line()}, {"process_start_time", process_exec_wall()}};
  report_.report(std::move(e));
}

std::optional<data::Batch> Trainer::next_batch() {
  const double asked = mono_now();
  std::optional<data::Batch> b;
  {
    RECORD_USER_SCOPE("dlrun::data_wait");
    try {
      b = c_.train_loader->next();
    } catch (const data::StoreUnavailable&) {  // trained steps committed first, one process only (docs/data.md)
      if (c_.placement.world_size > 1 || st_.step == 0 || ckpt_.saved(st_.step)) throw;
      log::error("the data store is unreachable: saving a checkpoint at step {} before exiting", st_.step);
      save(SaveReason::kPreemption, /*sync=*/true);
      throw;
    }
    fault::slow_batch();
  }
  meter_.waited(mono_now() - asked);
  if (b && !b->bad.empty()) bad_samples_.consumed(*b);
  return b;
}

bool Trainer::any_rank_asked_to_stop() {
  if (!replicas_.distributed()) {
    if (bad_samples_.pending()) bad_samples_.merge(replicas_, st_.step);
    return preempt::stop_requested();
  }
  // One collective for both questions: the ranks asked to stop, the ranks with bad samples.
  auto flags = torch::tensor({preempt::stop_requested() ? 1 : 0, bad_samples_.pending() ? 1 : 0}, torch::kInt32);
  replicas_.all_reduce(flags);
  if (flags[1].item<int>() > 0) bad_samples_.merge(replicas_, st_.step);
  return flags[0].item<int>() > 0;
}

void Trainer::step(const std::vector<data::Batch>& micro) {
  const double lr = lr_at(c_.schedule, st_.step);
  // Several ranks: each step's draws from (run.seed, rank, step), so that any rank can write
  // every rank's generators into a checkpoint (the state part "rng").
  if (replicas_.size() > 1) ckpt::seed_all(ckpt::step_seed(cfg_.run.seed, replicas_.rank(), st_.step + 1));
  in_step_ = true;
  StepResult r = runner_.run(micro, lr, st_.step + 1);
  in_step_ = false;
  meter_.record(std::move(r), st_.step + 1, lr);
  st_.step += 1;  // the averages' updates inside the step came with it (StepHook)
}

std::optional<int> Trainer::at_boundary(bool epoch_end) {
  const Boundary b{st_.step, epoch(), st_.last_step, epoch_end};
  ckpt_.report_uploads();
  // (once: an epoch that ends at that step brings a second boundary, epoch_end)
  if (leader() && !epoch_end && !ckpt_.resumed_from().empty() && st_.step == ckpt_.resumed_step() + 1)
    if (auto e = account_.resume_event(st_.step, ckpt_.resumed_step())) report_.report(std::move(*e));
  if (!epoch_end) report_.tick({st_.step, b.epoch, meter_.samples_per_s(mono_now()), meter_.lr()});
  if (log_due(cfg_.log, b)) meter_.log(b.epoch, replicas_);  // the record of a step that has happened
  if (!epoch_end) fault::after_step(st_.step);
  // An evaluation due here and not done is recorded in the checkpoint, and the resumed run
  // does it first: interrupting must not lose it.
  st_.eval_pending = eval_due(cfg_.train, b, evals_.last_step());
  if (any_rank_asked_to_stop()) return stop_and_save();
  if (st_.eval_pending && !run_eval()) return stop_and_save();
  SaveReason why = ckpt_.due(b);
  if (act_on_verdict() && why == SaveReason::kNone) why = SaveReason::kBest;
  if (why != SaveReason::kNone) {
    save(why, !cfg_.checkpoint.async);
    if (any_rank_asked_to_stop()) return stop_and_save();
  }
  return std::nullopt;
}

// What the last evaluation decided (the same on every rank: the results are summed): the run
// ends here (train.early_stop); this step's checkpoint is the best (true: it must be saved).
bool Trainer::act_on_verdict() {
  const Monitor::Verdict v = evals_.take_verdict();
  if (v.stop) st_.last_step = st_.step;
  if (v.best) ckpt_.keep_as_best(st_.step);
  return v.best;
}

bool Trainer::run_eval() {
  meter_.check_finite();
  st_.eval_pending = !evals_.periodic(st_.step, epoch());
  return !st_.eval_pending;
}

void Trainer::save(SaveReason why, bool sync) {
  meter_.check_finite();  // never commit weights a non-finite step has already spoiled
  ckpt_.save(why, sync, st_.step, [this] { return parts_.snapshot(); });
}

// A stop request (a signal, a cloud notice, another rank's): save this step unless it is
// saved, wait for the commit, then the upload within the deadline; exit 75.
int Trainer::stop_and_save() {
  std::string reason = preempt::stop_reason();
  double signal_time = preempt::stop_time();
  if (reason.empty()) reason = "stop requested by another rank";
  if (signal_time <= 0) signal_time = wall_now();
  preempt::set_stop_phase(preempt::StopPhase::kWriting);  // a later signal (not a repeat) exits at once
  replicas_.commit_together(st_.step, [&] {  // every rank exits 75 with rank 0's commit, or 1 with its failure
    // Agreed: after a failed periodic save rank 0 has not saved this step while the others have.
    if (replicas_.any(!ckpt_.saved(st_.step))) {
      log0::info("{} received: saving a checkpoint at step {} and exiting with code 75", reason, st_.step);
      save(SaveReason::kPreemption, /*sync=*/true);
    } else {
      log0::info("{} received: step {} is already saved; exiting with code 75", reason, st_.step);
      ckpt_.wait_written(SaveReason::kPreemption, st_.step);  // throws when it fails: nothing new is committed, so not 75
    }
  });
  preempt::set_stop_phase(preempt::StopPhase::kCommitted);  // from here on the exit is 75, whatever arrives
  try {
    profiler_.finish(st_.step);  // the steps traced so far, after the checkpoint
  } catch (const std::exception& e) {
    log::error("the checkpoint is committed, but the profile could not be written: {}", e.what());
  }
  if (!leader()) return kInterrupted;
  const double commit_time = wall_now();
  log0::info("local checkpoint committed {:.2f} s after {}", commit_time - signal_time, reason);
  const Checkpointer::StopUpload upload = ckpt_.upload_before_deadline(st_.step, signal_time, reason);
  metrics::Event e{"preempt", st_.step};
  e.scalars = {{"latency_s", commit_time - signal_time}};
  e.fields = {{"reason", reason}, {"signal_time", signal_time}, {"commit_time", commit_time}, {"steps_lost", 0}};
  record_interruption(std::move(e), "interrupted", signal_time, upload, /*read_loss=*/true,
                      {{"latency_s", commit_time - signal_time}});
  ckpt_.upload_history(signal_time);  // the records of the stop itself, for the VM that resumes
  replicas_.outcome_read(st_.step);
  if (const int n = preempt::signals_ignored())
    log0::info("{} further signal(s) ignored: the same request delivered again, or after the commit", n);
  return kInterrupted;
}

int Trainer::finish() {
  profiler_.finish(st_.step);
  meter_.check_finite();  // also counts the last skipped steps
  const auto changed = c_.averages.finish(c_.train_as_eval, [this] { return any_rank_asked_to_stop(); });
  if (!changed) return stop_and_save();
  if (*changed) ckpt_.changed_after_save(st_.step);  // an average's new state: the final save writes it
  if (final_eval_due(cfg_.train, st_.step, evals_.last_step()) && !run_eval()) return stop_and_save();
  if (!evals_.test(st_.step, epoch())) return stop_and_save();
  if (!evals_.at_end(st_.step, epoch())) return stop_and_save();
  if (ckpt_.final_due(st_.step)) save(SaveReason::kEnd, /*sync=*/true);
  if (!leader()) return 0;
  ckpt_.finish(st_.step);
  meter_.read_last_loss();
  dir_.write_summary(summary("completed"));
  metrics::Event e{"end", st_.step};
  e.fields = {{"status", "completed"}};
  report_.report(std::move(e));
  report_.close();
  ckpt_.upload_history(0);
  // Each accuracy under its split's name: with a validation split, the test split's (the figure
  // to report) and the validation split's (what BEST and early stopping looked at).
  auto accuracy = [](const nlohmann::json& r) {
    return r.is_object() && r.contains("accuracy") ? fmt::format("{:.4f}", r["accuracy"].get<double>())
                                                   : std::string("n/a");
  };
  const nlohmann::json& last = evals_.last();
  const bool val = last.is_object() && last.value("split", std::string()) == "val";
  if (!evals_.test_result().is_null() || val)
    log0::info("done: {} steps, test accuracy {}, validation accuracy {}, summary in {}", st_.step,
               accuracy(evals_.test_result()), accuracy(last), dir_.summary_json());
  else
    log0::info("done: {} steps, eval accuracy {}, summary in {}", st_.step, accuracy(last), dir_.summary_json());
  return 0;
}

nlohmann::json Trainer::summary(const std::string& status) {
  SummaryInputs in;
  in.status = status;
  in.wall_time_s = mono_now() - start_mono_;
  in.params_sha256 = nullptr;
  try {
    in.params_sha256 = models::params_sha256(*c_.model);
  } catch (const std::exception& e) {
    log::warn("params_sha256 could not be computed: {}", e.what());
  }
  in.state = &st_;
  in.steps_per_epoch = c_.steps_per_epoch;
  in.meter = meter_.totals();
  in.eval = evals_.last();
  in.test = evals_.test_result();
  in.init = parts_.init_report();
  in.averages = c_.averages.summary();
  in.best = evals_.monitor().best_summary(ckpt_.best());
  in.early_stop = evals_.monitor().early_stop_summary();
  in.checkpointer = ckpt_.summary();
  in.peak_cuda_memory_mb = peak_cuda_memory_mb(c_.placement.device);
  in.fused_kernels = fused_kernels_report(c_.model->fused_conv_bn_relu());
  in.profile_trace = profiler_.written();
  in.device = c_.placement.device.str();
  in.world_size = c_.placement.world_size;
  in.version = build::version_line();
  const Goodput g = account_.now();  // the record so far, this process's included
  in.wall_clock = g.wall_clock_json();
  in.cost = g.cost_json(account_.price());
  nlohmann::json j = run_summary(in);
  j["bad_samples"] = bad_samples_json(cfg_.data, st_);
  return j;
}

void Trainer::record_failure(const std::string& what, const char* status) noexcept {
  if (start_mono_ < 0 || !leader()) return;  // failed before the run directory was written: leave it as it was
  ckpt_.settle();
  try {
    try {
      meter_.read_last_loss();
    } catch (...) {
    }
    nlohmann::json s = summary(status);
    s["error"] = what;
    dir_.write_summary(s);
    metrics::Event e{"end", st_.step};
    e.fields = {{"status", status}, {"error", what}};
    report_.report(std::move(e));
    report_.close();
  } catch (...) {
  }
}

int train_in(const TrainArgs& args, const RunDir& dir, const Placement& placement, dist::Group* group) {
  Trainer trainer(args.cfg, dir, placement, group);  // data files, model, optimizer: the cheap failures first
  fault::during("startup");
  if (stopped_during_startup("after loading data", group)) return kInterrupted;
  trainer.resume(trainer.leader() ? plan_resume(args.resume, args.force, dir, trainer.remote_store(), args.cfg.checkpoint) : ResumePlan{});
  if (trainer.leader()) trainer.save_init(args.save_init);
  if (stopped_during_startup("after loading the checkpoint", group)) return kInterrupted;
  preempt::NoticeWatcher watcher(args.cfg.preemption);  // a bad source is refused here
  if (stopped_during_startup("before the first step", group)) return kInterrupted;
  try {
    return trainer.run();
  } catch (const Error& e) {  // (exit 75 here: the store did not answer; nothing was lost)
    trainer.record_failure(e.render(), e.code() == ExitCode::kInterrupted ? "interrupted" : "failed");
    throw;
  } catch (const std::exception& e) {
    trainer.record_failure(e.what());
    throw;
  }
}

}  // namespace dlrun::train
