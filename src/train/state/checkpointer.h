// How a live run saves: when a checkpoint is due (every_steps, every_minutes with `auto`
// resolved by the Young/Daly rule from the measured save cost, epoch ends), taking the
// snapshot and handing it to the writer, what a failed save does (checkpoint.on_error), the
// uploads to remote storage and their events, the stop path's wait for the upload within the
// preemption deadline, and its part of summary.json. The trainer asks it questions and tells it
// to save; it never sees the trainer (docs/design.md, "The loop and its collaborators").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "config/options.h"
#include "metrics/sink.h"
#include "run/triggers.h"

namespace dlrun::ckpt {
class RemoteStore;
class Uploader;
}  // namespace dlrun::ckpt

namespace dlrun::dist {
class Replicas;
}

namespace dlrun::train {


class Checkpointer {
 public:
  using Clock = std::function<double()>;  ///< monotonic seconds
  /// Every rank makes one (due() is a collective); only the leader writes. `checkpoints_dir`:
  /// where committed checkpoints go. With checkpoint.remote the leader connects to the store
  /// here: a wrong credential or bucket is exit 2 before anything is written.
  Checkpointer(const Config& cfg, std::string checkpoints_dir, metrics::Reporter& report, dist::Replicas& replicas,
               Clock clock);
  ~Checkpointer();

  /// The remote store (with checkpoint.remote, on the leader), for planning the resume.
  ckpt::RemoteStore* remote() const { return remote_.get(); }
  /// train's start check of checkpoint.remote, shared with `config validate`: the store, its
  /// every request tried once (RemoteStore::check_access); a refusal -- credentials, bucket,
  /// permission, a certificate that does not verify -- is exit 2, a store that does not answer
  /// a warning (training goes on; its uploads are retried).
  static std::unique_ptr<ckpt::RemoteStore> connect_checked(const CheckpointOptions& o);
  /// The run resumed from `path` at `step` (a saved step: not saved again at once).
  void resumed(const std::string& path, int64_t step);
  /// The checkpoint the run continues from ("" for a fresh start).
  const std::string& resumed_from() const { return resumed_from_; }
  int64_t resumed_step() const { return resumed_step_; }
  /// Leader, once the run directory is ours: keep a checkpoint downloaded from remote storage
  /// beside the local ones, then write through `writer` (null: the background ckpt::Writer),
  /// uploading each commit when there is a remote store -- and, with `upload_resumed`, the
  /// local checkpoint the run resumed from (the store's LATEST is older: its upload was cut off).
  void open(std::optional<ckpt::FileSet> fetched, bool upload_resumed = false,
            std::unique_ptr<ckpt::SnapshotWriter> writer = nullptr);
  /// With checkpoint.remote (leader): the run's history (metrics.jsonl, the TensorBoard event
  /// files of `run_dir`) goes to the store beside the checkpoints, with each upload and every
  /// checkpoint.remote_history_s seconds (docs/checkpoints.md, "A fresh VM continues the run's
  /// records"). fetch_history brings it into an empty run directory before a resume from the
  /// store writes there; upload_history sends it now (a stop within its deadline, counted from
  /// `signal_time`; the end of a run: 0). Failures are warnings: these are records, not the run.
  void keep_history(const std::string& run_dir);
  int fetch_history(const std::string& run_dir);
  void upload_history(double signal_time);
  /// A rank other than the leader that writes the survivors' checkpoint after a lost peer
  /// (dist.peer_timeout_s; rank 0 may be the one lost): it connects to checkpoint.remote and
  /// opens a writer of its own, into its --run-dir's checkpoints/, as the leader would have.
  void take_over();
  /// Every rank, when training starts: the clock of every_minutes starts now.
  void start();
  /// Leader, once the run directory is ours, before open(): set aside the checkpoints of a
  /// timeline the resume gives up -- those newer than `after_step` (-1: none), locally and
  /// remotely -- and, with `remote_all` (--resume never --force), every remote one. A store that
  /// does not answer is retried for checkpoint.remote_wait_s, then exit 75.
  void abandon(int64_t after_step, bool remote_all);

  /// Which periodic save is due at `b`, agreed by every rank (each has its own clock).
  SaveReason due(const Boundary& b);
  /// The save after training is due: checkpoint.at_end, unless this step is already saved.
  bool final_due(int64_t step) const;
  /// The checkpoint of `step`, about to be saved (or the one resumed from), is the best so far
  /// (checkpoint.keep_best): once committed, checkpoints/BEST names it, and retention keeps it
  /// (and, until then, the previous best) whatever keep_last says.
  void keep_as_best(int64_t step);
  /// The best checkpoint's directory ("" before one is committed), kept across segments.
  std::string best() const;
  /// Step `step` is committed or being written.
  bool saved(int64_t step) const { return last_saved_step_ == step; }
  /// What step `step` holds changed after it was saved (SWA's BatchNorm pass at the end): it
  /// counts as unsaved again, so final_due() saves it once more (replacing it atomically).
  void changed_after_save(int64_t step) {
    if (last_saved_step_ == step) last_saved_step_ = -1;
  }

  /// Take a snapshot with `take` (every rank: its collectives; the leader gets the snapshot)
  /// and write it: `sync` waits for the commit. A periodic save that fails obeys
  /// checkpoint.on_error (continue: report, train on, the next save tries again, until
  /// checkpoint.max_failed_saves fail in a row); the final and a preemption save throw
  /// (exit 1): they are the run's result.
  void save(SaveReason why, bool sync, int64_t step, const std::function<std::optional<ckpt::Snapshot>()>& take);
  /// Wait for the background write under way; its failure is treated as `why`'s.
  void wait_written(SaveReason why, int64_t step);
  /// Report the uploads finished since the last call; a final failure with
  /// checkpoint.on_error: stop throws (exit 1), and so do checkpoint.max_failed_saves uploads in
  /// a row that failed for good with on_error: continue (the store falls behind the run).
  void report_uploads();

  /// What a stop did with remote storage: nothing (no remote), committed (when), or why not.
  struct StopUpload {
    bool active = false;
    nlohmann::json commit_time;  ///< wall clock, or null
    std::string note;            ///< why it is not committed
    /// The preempt event's remote fields.
    void add_to(metrics::Event& preempt, double signal_time) const;
  };
  /// The stop path after the local commit of `step`: wait for its upload until the preemption
  /// deadline (counted from `signal_time`, a little margin kept for exiting); an older upload
  /// under way gives way to it. Then report the uploads (never throws: the stop is committed).
  StopUpload upload_before_deadline(int64_t step, double signal_time, const std::string& reason);
  /// The end of a completed run: the last write committed (else exit 1), the last upload done
  /// (retries are bounded) and reported; a run whose final checkpoint did not reach the remote
  /// store is not a success (exit 1, the local ones intact, the message naming the newest remote
  /// checkpoint and `dlrun ckpt push` for the rest).
  void finish(int64_t step);
  /// After a failure: wait for the write under way, logging its failure (never throws).
  void settle() noexcept;

  /// summary.json's "checkpoint" (the last committed, else the resumed one, else null),
  /// "checkpoint_errors" and "remote".
  nlohmann::json summary() const;

 private:
  /// With checkpoint.remote: connect, and check access (a wrong credential or bucket: exit 2).
  void connect_remote();
  double interval_minutes(int64_t step);
  /// `why`: the failed save's reason; `during`: the save under way when it was learnt (an async
  /// write's failure surfaces at the next save).
  void failed(const Error& e, SaveReason why, int64_t step, SaveReason during = SaveReason::kNone);

  const Config& cfg_;
  std::string dir_;
  metrics::Reporter& report_;
  dist::Replicas& replicas_;
  Clock clock_;
  std::string resumed_from_;
  // Destroyed in reverse order: the writer (whose last commit may still notify the
  // uploader) before the uploader, the uploader before the store it uploads to.
  std::unique_ptr<ckpt::RemoteStore> remote_;
  std::unique_ptr<ckpt::Uploader> uploader_;
  std::unique_ptr<ckpt::SnapshotWriter> writer_;
  /// The best checkpoint, shared with the writer's thread (its commit callback writes BEST).
  struct Best {
    std::mutex mu;
    std::string path;          ///< committed and named by BEST
    int64_t pending = -1;      ///< the step whose commit becomes the best
    std::string pending_path;  ///< its directory, kept by retention until it is committed
    void committed(const std::string& dir, const ckpt::SnapshotWriter::Stats& s);
    void add_to(std::vector<std::string>& keep);
  };
  std::shared_ptr<Best> best_ = std::make_shared<Best>();
  int64_t last_saved_step_ = -1;
  int64_t errors_ = 0;  ///< checkpoint writes that failed (checkpoint.on_error)
  int64_t failed_in_a_row_ = 0, committed_seen_ = -1;  ///< checkpoint.max_failed_saves
  int64_t uploads_given_up_in_a_row_ = 0;                ///< the same limit for uploads that failed for good
  double streak_start_ = 0;                              ///< when the first of them failed
  int64_t resumed_step_ = 0;
  bool upload_expected_ = false;  ///< the resumed checkpoint was handed to the uploader
  double last_save_mono_ = 0, save_cost_s_ = -1, last_stall_s_ = 0, interval_logged_ = -1;
};

}  // namespace dlrun::train
