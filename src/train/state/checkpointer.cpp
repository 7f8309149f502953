// How a live run saves (see checkpointer.h).
#include "train/state/checkpointer.h"

#include <cmath>
#include <cstdlib>

#include "base/clock.h"
#include "base/env.h"
#include "base/fault.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "checkpoint/remote_store.h"
#include "checkpoint/uploader.h"
#include "config/remote_options.h"
#include "distributed/replicas.h"
#include "preempt/preempt.h"

namespace dlrun::train {
namespace {

/// When the stop's upload wait must end (monotonic seconds; 0: no end), asked again while it
/// waits: preemption.deadline_s from the stop request (auto: the provider's warning, else none),
/// and under scripts/dlrun-launch before the launcher's SIGKILL, which comes --shutdown-timeout
/// s after it forwarded its first signal (passed down as DLRUN_LAUNCHER_SHUTDOWN_S; a killed
/// rank 0 fails the job instead of requeueing it): a tenth of that (at least 1 s) is left for
/// exiting. The launcher's bound counts from the first signal this process got, so a cloud
/// notice's deadline is not cut short before the launcher is asked to stop. `why` names the bound.
double stop_deadline(const PreemptionOptions& opts, double stop_time, std::string* why) {
  double end = 0;
  const double d = opts.deadline_or_default();
  if (d > 0) {
    end = stop_time + d - std::min(2.0, 0.1 * d);
    *why = fmt::format("the {:.0f} s deadline (preemption.deadline_s)", d);
  }
  const std::string v = env("DLRUN_LAUNCHER_SHUTDOWN_S");
  const double signalled = preempt::signal_time();
  if (!v.empty() && signalled > 0) {
    char* rest = nullptr;
    const double launcher = std::strtod(v.c_str(), &rest);
    if (*rest == '\0' && launcher > 0) {
      const double fits = signalled + std::max(0.5, launcher - std::max(1.0, 0.1 * launcher));
      if (end <= 0 || fits < end) {
        end = fits;
        *why = fmt::format("the launcher's --shutdown-timeout {:g} s", launcher);
      }
    }
  }
  return end > 0 ? mono_now() + (end - wall_now()) : 0;
}

}  // namespace

Checkpointer::Checkpointer(const Config& cfg, std::string checkpoints_dir, metrics::Reporter& report,
                           dist::Replicas& replicas, Clock clock)
    : cfg_(cfg), dir_(std::move(checkpoints_dir)), report_(report), replicas_(replicas), clock_(std::move(clock)) {
  if (replicas_.leader()) connect_remote();
}

void Checkpointer::take_over() {
  if (writer_) return;
  connect_remote();
  open(std::nullopt);
}

void Checkpointer::connect_remote() {
  if (cfg_.checkpoint.remote.empty()) return;
  remote_ = connect_checked(cfg_.checkpoint);  // wrong credentials or bucket: exit 2 here, before anything is written
}

std::unique_ptr<ckpt::RemoteStore> Checkpointer::connect_checked(const CheckpointOptions& o) {
  auto store = std::make_unique<ckpt::RemoteStore>(config::s3_config(o), remote::parse_s3_url(o.remote));
  try {
    store->check_access();
  } catch (const Error& e) {
    if (e.code() == ExitCode::kBadInput) throw;
    log0::warn("remote storage is not reachable now ({}); training goes on and uploads are retried", e.message());
  }
  return store;
}

Checkpointer::~Checkpointer() = default;

void Checkpointer::resumed(const std::string& path, int64_t step) {
  resumed_from_ = path;
  resumed_step_ = step;
  last_saved_step_ = step;
}

void Checkpointer::open(std::optional<ckpt::FileSet> fetched, bool upload_resumed,
                        std::unique_ptr<ckpt::SnapshotWriter> writer) {
  if (fetched) {  // a checkpoint downloaded from remote storage is kept beside the others
    resumed_from_ = ckpt::commit_files(*fetched, dir_);
    log0::info("the downloaded checkpoint is kept as {}", resumed_from_);
  }
  writer_ = writer ? std::move(writer) : std::make_unique<ckpt::Writer>(dir_, cfg_.checkpoint);
  if (const auto name = ckpt::read_best(dir_)) best_->path = dir_ + "/" + *name;  // kept from an earlier segment
  if (remote_) uploader_ = std::make_unique<ckpt::Uploader>(*remote_, cfg_.checkpoint);
  // (The writer's thread calls these, after each commit and at its retention.)
  writer_->on_commit([up = uploader_.get(), best = best_, dir = dir_](const ckpt::SnapshotWriter::Stats& s) {
    if (up) up->submit(s.path, s.step);
    best->committed(dir, s);
  });
  writer_->in_use([up = uploader_.get(), best = best_] {
    std::vector<std::string> keep = up ? up->in_use() : std::vector<std::string>{};
    best->add_to(keep);
    return keep;
  });
  if (remote_) {
    log0::info("checkpoints are uploaded to {}", remote_->url().str());
    if (upload_resumed && !fetched && !resumed_from_.empty()) {
      log0::info("{} is newer than what {} holds: uploading it", resumed_from_, remote_->url().str());
      uploader_->submit(resumed_from_, resumed_step_);
      upload_expected_ = true;
    }
  }
}

void Checkpointer::start() { last_save_mono_ = clock_(); }

void Checkpointer::Best::committed(const std::string& dir, const ckpt::SnapshotWriter::Stats& s) {
  std::lock_guard<std::mutex> lock(mu);
  if (s.step != pending) return;
  pending = -1;
  try {
    ckpt::write_best(dir, fsutil::base_name(s.path));
    path = s.path;
  } catch (const std::exception& e) {  // the checkpoint is committed; only the marker is missing
    log::warn("{} is the best checkpoint, but BEST could not be written: {}", s.path, e.what());
  }
}

void Checkpointer::Best::add_to(std::vector<std::string>& keep) {
  std::lock_guard<std::mutex> lock(mu);
  if (!path.empty()) keep.push_back(path);
  if (pending >= 0) keep.push_back(pending_path);
}

void Checkpointer::keep_as_best(int64_t step) {
  {
    std::lock_guard<std::mutex> lock(best_->mu);
    best_->pending = step;
    best_->pending_path = dir_ + "/" + ckpt::dir_name(step);
  }
  // The checkpoint resumed from is committed already: no commit will come for it.
  if (step == resumed_step_ && !resumed_from_.empty()) best_->committed(dir_, {step, resumed_from_});
}

std::string Checkpointer::best() const {
  std::lock_guard<std::mutex> lock(best_->mu);
  return best_->path;
}

void Checkpointer::abandon(int64_t after_step, bool remote_all) {
  const std::string stamp = utc_stamp();
  if (after_step >= 0)
    for (const auto& moved : ckpt::set_aside_after(dir_, after_step, stamp))
      log0::warn("{} is newer than the checkpoint resumed (step {}): set aside as {}", fsutil::base_name(moved.substr(0,
                 moved.rfind(".abandoned-"))), after_step, moved);
  if (!remote_ || (after_step < 0 && !remote_all)) return;
  ckpt::Patience p(cfg_.checkpoint.remote_wait_s, [] { return preempt::stop_requested(); });
  const std::string suffix = (remote_all ? ".aside-" : ".abandoned-") + stamp;
  const auto moved = p.run("set aside in " + remote_->url().str(),
                           [&] { return remote_->set_aside_after(remote_all ? -1 : after_step, suffix); });
  for (const auto& name : moved)
    log0::warn("{} set aside as {}{} ({})", remote_->url().str(name), name, suffix,
               remote_all ? "--resume never --force" : fmt::format("newer than the checkpoint resumed, step {}", after_step));
}

SaveReason Checkpointer::due(const Boundary& b) {
  SaveReason why = save_due(cfg_.checkpoint, b, (clock_() - last_save_mono_) / 60.0, last_saved_step_,
                            interval_minutes(b.step));
  // Saves by the clock: each rank has its own, so they agree (any rank due: all save).
  if (cfg_.checkpoint.every_minutes != 0 && replicas_.any(why != SaveReason::kNone) && why == SaveReason::kNone)
    why = SaveReason::kEveryMinutes;
  return why;
}

bool Checkpointer::final_due(int64_t step) const { return final_save_due(cfg_.checkpoint, step, last_saved_step_); }

void Checkpointer::save(SaveReason why, bool sync, int64_t step,
                        const std::function<std::optional<ckpt::Snapshot>()>& take) {
  const double t0 = clock_();
  std::optional<ckpt::Snapshot> snap = take();
  double copied = t0;
  if (snap) {
    copied = clock_();
    fault::during("save");
    // With async writes, save() rethrows the failure of the previous (periodic) background
    // write after queuing this one; wait() and a synchronous save() throw this one's.
    bool fail = false;
    try {
      writer_->save(std::move(*snap));
    } catch (const Error& e) {
      failed(e, cfg_.checkpoint.async ? SaveReason::kNone : why, step, why);  // kNone: an earlier periodic save
      fail = !cfg_.checkpoint.async;
    }
    if (sync && !fail) {
      try {
        writer_->wait();
      } catch (const Error& e) {
        failed(e, why, step);
        fail = true;
      }
    }
    if (fail) return;  // this step is not saved; the next save (or the end) tries again
  }
  const double now = clock_();
  last_save_mono_ = now;
  last_saved_step_ = step;
  last_stall_s_ = now - t0;
  // With uploads the cost is the stall plus the upload, known once uploaded (report_uploads);
  // until then the stall alone stands in, so `auto` does not save at every step meanwhile.
  if (!uploader_ || save_cost_s_ < 0) save_cost_s_ = last_stall_s_;
  metrics::Event e{"checkpoint", step};
  e.scalars = {{"copy_s", copied - t0}, {"stall_s", now - t0}};
  e.fields = {{"reason", name_of(why)}, {"path", dir_ + "/" + ckpt::dir_name(step)}, {"async", !sync}};
  report_.report(std::move(e));
}

void Checkpointer::wait_written(SaveReason why, int64_t step) {
  if (!writer_) return;
  try {
    writer_->wait();
  } catch (const Error& e) {
    failed(e, why, step);
  }
}

// A checkpoint that could not be written (a full disk, an I/O error, a read-only file system).
// The commit removed its partial directory and every committed checkpoint is as it was. A
// periodic save obeys checkpoint.on_error (continue: report and train on, the next save tries
// again); the final save and a preemption save are the run's result, so their failure ends
// the run (exit 1) whatever the policy.
void Checkpointer::failed(const Error& e, SaveReason why, int64_t step, SaveReason during) {
  auto is_periodic = [](SaveReason r) { return r != SaveReason::kEnd && r != SaveReason::kPreemption; };
  const bool periodic = is_periodic(why);  // kNone: an earlier async save
  ++errors_;
  if (writer_->last().step != committed_seen_) {  // a commit since the last failure: a new streak
    committed_seen_ = writer_->last().step;
    failed_in_a_row_ = 0;
  }
  if (failed_in_a_row_++ == 0) streak_start_ = clock_();
  last_saved_step_ = -1;  // the failed write may have been the newest: the end and a stop save again
  const std::string last = writer_->last().step >= 0 ? writer_->last().path : std::string("none");
  metrics::Event ev{"checkpoint_error", step};
  ev.fields = {{"reason", periodic ? "periodic" : name_of(why)}, {"error", e.message()}, {"last_committed", last}};
  ev.message = fmt::format("checkpoint could not be written: {}", e.message());
  log::error("{} (the last committed checkpoint, {}, is intact)", ev.message, last);
  report_.report(std::move(ev));
  const int64_t limit = cfg_.checkpoint.max_failed_saves;
  // (Not while the final or a preemption save is being made: that one decides the run's end.)
  if (periodic && is_periodic(during) && cfg_.checkpoint.on_error == SaveErrorPolicy::kContinue && limit > 0 &&
      failed_in_a_row_ >= limit) {
    const int64_t since = writer_->last().step >= 0 ? writer_->last().step : resumed_step_;
    throw Error(ExitCode::kRuntime,
                fmt::format("{} periodic checkpoints in a row could not be written (checkpoint.max_failed_saves); the "
                            "last: {}. At risk: {} steps of training since the last committed checkpoint ({}), saves "
                            "failing for {:.1f} minutes",
                            failed_in_a_row_, e.message(), step - std::max<int64_t>(since, 0), last,
                            (clock_() - streak_start_) / 60.0),
                "free space or fix the file system, then requeue: --resume auto continues from the last committed "
                "checkpoint; checkpoint.max_failed_saves: 0 trains on whatever fails");
  }
  if (periodic && cfg_.checkpoint.on_error == SaveErrorPolicy::kContinue) return;
  throw Error(ExitCode::kRuntime,
              fmt::format("the {} checkpoint could not be written: {} (the last committed checkpoint, {}, is intact)",
                          periodic ? "periodic" : name_of(why), e.message(), last),
              std::string("free space or fix the file system, then requeue: --resume auto continues from the last "
                          "committed checkpoint") +
                  (periodic ? "; checkpoint.on_error: continue trains on when a periodic save fails" : ""));
}

namespace {

/// What a user reads after uploads that failed: where the store stands and how to catch it up.
std::string remote_behind(const ckpt::Uploader::Totals& t, const std::string& url, int64_t step) {
  return t.last_step >= 0 ? fmt::format("the newest checkpoint in {} is step {} ({}), {} steps behind step {}", url,
                                        t.last_step, t.last_url, step - t.last_step, step)
                          : fmt::format("no checkpoint of this run is in {}", url);
}

/// Environment keys cannot be refreshed: say so when they are what the store refused.
std::string credentials_hint(const ckpt::RemoteStore& store) {
  const auto& creds = store.config().credentials;
  std::string hint = "fix the store or its credentials (docs/checkpoints.md, \"Credentials\"), then upload the local "
                     "checkpoints with `dlrun ckpt push RUN_DIR`, or requeue: --resume auto continues from the newest "
                     "local checkpoint and uploads it";
  if (creds && !creds->refreshable())
    hint += fmt::format("; credentials from {} are fixed keys dlrun cannot refresh: temporary ones (aws sts "
                        "assume-role) expire, so use a profile with credential_process, web identity, container or "
                        "instance credentials, which dlrun fetches again before they expire",
                        creds->source());
  return hint;
}

}  // namespace

void Checkpointer::report_uploads() {
  if (!uploader_) return;
  std::optional<ckpt::Uploader::Result> stop_for;  // every result is reported before on_error: stop ends the run
  std::optional<ckpt::Uploader::Result> behind;    // checkpoint.max_failed_saves uploads given up in a row
  for (const auto& r : uploader_->drain()) {
    if (r.ok) {
      metrics::Event e{"upload", r.step, r.wall_time};
      e.scalars = {{"seconds", r.seconds}, {"mb_per_s", r.bytes / 1e6 / std::max(1e-9, r.seconds)}};
      e.fields = {{"url", r.url}, {"bytes", r.bytes}, {"attempt", r.attempt}};
      report_.report(std::move(e));
      save_cost_s_ = last_stall_s_ + r.seconds;  // what a save costs when the checkpoint must reach storage
      uploads_given_up_in_a_row_ = 0;
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
    if (r.final && cfg_.checkpoint.on_error == SaveErrorPolicy::kStop && !stop_for) stop_for = r;
    if (r.final && ++uploads_given_up_in_a_row_ >= cfg_.checkpoint.max_failed_saves &&
        cfg_.checkpoint.max_failed_saves > 0 && !behind)
      behind = r;
  }
  if (stop_for)
    throw Error(ExitCode::kRuntime,
                fmt::format("the checkpoint of step {} could not be uploaded to {}: {} (checkpoint.on_error: stop)",
                            stop_for->step, stop_for->url, stop_for->error),
                "the local checkpoint is intact; fix the remote storage and requeue, or set checkpoint.on_error: "
                "continue");
  if (behind)
    throw Error(ExitCode::kRuntime,
                fmt::format("{} checkpoint uploads in a row failed for good (checkpoint.max_failed_saves): the last, of "
                            "step {}: {}; {}; the local checkpoints are intact",
                            uploads_given_up_in_a_row_, behind->step, behind->error,
                            remote_behind(uploader_->totals(), remote_->url().str(), behind->step)),
                credentials_hint(*remote_) + "; checkpoint.max_failed_saves: 0 trains on while the store falls behind");
}

// checkpoint.every_minutes, with `auto` resolved by Young and Daly's rule: the interval that
// minimizes the expected loss to interruptions, sqrt(2 x save cost x mean time between them),
// with the save cost this run measured (the stall, plus the upload with remote storage).
double Checkpointer::interval_minutes(int64_t step) {
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
    metrics::Event e{"checkpoint_interval", step};
    e.scalars = {{"minutes", minutes}, {"save_cost_s", save_cost_s_}};
    e.fields = {{"mtbf_hours", cfg_.preemption.mtbf_hours}};
    report_.report(std::move(e));
    interval_logged_ = minutes;
  }
  return minutes;
}

void Checkpointer::keep_history(const std::string& run_dir) {
  if (uploader_) uploader_->keep_history(run_dir, cfg_.checkpoint.remote_history_s);
}

int Checkpointer::fetch_history(const std::string& run_dir) {
  if (!remote_) return 0;
  try {
    const int n = remote_->fetch_history(run_dir);
    if (n > 0)
      log0::info("the run's history ({} file(s): metrics.jsonl, TensorBoard events) came from {}: its records and "
                 "its account go on from the earlier processes'",
                 n, remote_->url().str("history"));
    return n;
  } catch (const std::exception& e) {
    log::warn("the run's history could not be read from {} ({}); this run's records start anew", remote_->url().str(),
              e.what());
    return 0;
  }
}

void Checkpointer::upload_history(double signal_time) {
  if (!uploader_) return;
  std::string why;
  const double deadline = signal_time > 0 ? stop_deadline(cfg_.preemption, signal_time, &why) : mono_now() + 60;
  if (!uploader_->history_now(deadline))
    log0::warn("the run's history did not reach {}{}", remote_->url().str(), why.empty() ? "" : " within " + why);
}

Checkpointer::StopUpload Checkpointer::upload_before_deadline(int64_t step, double signal_time,
                                                              const std::string& reason) {
  StopUpload out;
  // The upload, within the deadline (counted from the signal). An older checkpoint still going
  // up gives way to this one. The wait ends a little before the deadline: abandoning an upload
  // under way and exiting take up to about a second.
  if (uploader_) {
    out.active = true;
    uploader_->supersede_older(step);
    std::string why;
    bool done = false;
    for (;;) {  // a signal may come while it waits (a notice first, then the launcher's SIGTERM)
      const double deadline = stop_deadline(cfg_.preemption, signal_time, &why);
      const double slice = mono_now() + 0.5;
      done = uploader_->wait(deadline > 0 ? std::max(mono_now() + 1e-3, std::min(deadline, slice)) : slice);
      if (done || (deadline > 0 && mono_now() >= deadline)) break;
    }
    const auto totals = uploader_->totals();
    if (done && totals.last_step == step) {
      out.commit_time = wall_now();
      log0::info("remote checkpoint {} committed {:.2f} s after {}", totals.last_url,
                 out.commit_time.get<double>() - signal_time, reason);
    } else {
      out.note = done ? "the upload failed: " + totals.last_error
                      : fmt::format("the upload did not finish within {}", why);
      log::warn("{}; exiting 75 with the local checkpoint", out.note);
    }
  }
  // The checkpoint is committed: from here on the exit code is 75 whatever happens to the
  // records (a full disk under metrics.jsonl must not stop the scheduler from requeueing).
  try {
    report_uploads();
  } catch (const std::exception& e) {
    log::error("{}", e.what());  // on_error: stop cannot turn a committed preemption into a failure
  }
  return out;
}

void Checkpointer::StopUpload::add_to(metrics::Event& preempt, double signal_time) const {
  if (!active) return;
  preempt.fields["remote_commit_time"] = commit_time;
  if (!commit_time.is_null()) preempt.scalars.emplace_back("remote_latency_s", commit_time.get<double>() - signal_time);
  if (!note.empty()) preempt.fields["remote_note"] = note;
}

void Checkpointer::finish(int64_t step) {
  wait_written(SaveReason::kEnd, step);  // the last save was this step's: the run's result is not stored
  if (!uploader_) return;
  uploader_->wait(0, /*retention=*/true);  // the last checkpoint off the instance (retries are bounded)
  report_uploads();
  const auto t = uploader_->totals();
  // The run's result is its final checkpoint: one the store does not hold is not off the instance.
  const int64_t final_step = writer_->last().step >= 0 ? writer_->last().step : upload_expected_ ? resumed_step_ : -1;
  if (final_step >= 0 && t.last_step < final_step)
    throw Error(ExitCode::kRuntime,
                fmt::format("training finished at step {}, but its final checkpoint did not reach {} ({} failed "
                            "attempts, the last: {}); {}; the local checkpoints are intact, the newest is {}",
                            step, remote_->url().str(), t.failed_attempts, t.last_error.empty() ? "none" : t.last_error,
                            remote_behind(t, remote_->url().str(), final_step),
                            writer_->last().step >= 0 ? writer_->last().path : resumed_from_),
                credentials_hint(*remote_));
}

void Checkpointer::settle() noexcept {
  try {
    if (writer_) writer_->wait();
  } catch (const std::exception& e) {
    log::error("checkpoint write failed: {}", e.what());
  }
}

nlohmann::json Checkpointer::summary() const {
  std::string checkpoint = resumed_from_;
  if (writer_ && writer_->last().step >= 0) checkpoint = writer_->last().path;
  nlohmann::json remote = nullptr;
  if (remote_) {
    remote = {{"url", remote_->url().str()}, {"credentials", remote_->config().credentials->source()}};
    if (uploader_) {
      const auto t = uploader_->totals();
      remote["checkpoint"] = t.last_url.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.last_url);
      remote["uploads"] = t.uploaded;
      remote["failed_attempts"] = t.failed_attempts;
      remote["given_up"] = t.given_up;
      remote["last_error"] = t.last_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.last_error);
      remote["bytes"] = t.bytes;
      remote["upload_s"] = t.seconds;
    }
  }
  return {{"checkpoint", checkpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(checkpoint)},
          {"checkpoint_errors", errors_},
          {"remote", remote}};
}

}  // namespace dlrun::train
