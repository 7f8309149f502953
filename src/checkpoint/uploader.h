// Background uploads of committed checkpoints to remote storage (remote_store.h), retried with
// backoff, reported from the training thread (docs/checkpoints.md, "Remote checkpoints").
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/remote_store.h"
#include "config/options.h"

namespace dlrun::ckpt {

/// Background uploads of committed checkpoints. submit() hands over the newest one (a newer
/// submission replaces one still waiting); a failed upload is retried with exponential
/// backoff (1, 2, 4 ... 60 s) up to kAttempts times, then reported and dropped (the next
/// checkpoint tries again). Results are kept until the trainer collects them (drain()), so
/// they are reported from the training thread. Destruction abandons the upload under way
/// (within about a second): a stop that gave up waiting is not held up by it.
class Uploader {
 public:
  static constexpr int kAttempts = 8;

  struct Result {
    bool ok = false;
    int64_t step = -1;
    std::string url;       ///< s3://... of the checkpoint
    uint64_t bytes = 0;
    double seconds = 0;    ///< the successful attempt's time
    int attempt = 0;       ///< 1-based
    std::string error;     ///< why this attempt failed
    bool final = false;    ///< no further attempt will be made for this step
    double retry_in_s = 0;
    double wall_time = 0;  ///< when it finished
  };
  struct Totals {
    int64_t uploaded = 0, failed_attempts = 0, given_up = 0;
    int64_t last_step = -1;  ///< newest uploaded step
    std::string last_url, last_error;
    uint64_t bytes = 0;
    double seconds = 0;      ///< sum over successful uploads
    double last_seconds = 0; ///< the newest successful upload's time
  };

  Uploader(RemoteStore& store, CheckpointOptions opts);
  ~Uploader();  ///< abandons the attempt in flight
  void submit(const std::string& local_dir, int64_t step);
  /// From now on, also upload the history of `run_dir` (RemoteStore::put_history): after each
  /// checkpoint, and every `every_s` seconds while idle (0: with checkpoints only).
  void keep_history(const std::string& run_dir, double every_s);
  /// Upload the history now and wait for it until `deadline` (monotonic seconds; <= 0: no
  /// deadline); true when it is up. A failure is logged, never thrown: the history is records,
  /// the checkpoints are the run.
  bool history_now(double deadline);
  /// When the upload under way (or the remote retention after it) is of a step older than
  /// `step`, which is waiting, abandon it: a stop request wants the newest checkpoint in the
  /// bucket within its deadline, not an older one first.
  void supersede_older(int64_t step);
  /// The local checkpoint directories being uploaded or waiting: local retention keeps them.
  std::vector<std::string> in_use() const;
  /// Block until everything submitted has been uploaded or given up, or until `deadline`
  /// (monotonic seconds; <= 0: no deadline). True when nothing is left. The remote retention
  /// that follows an upload is waited for only with `retention` (a stop does not wait for it).
  bool wait(double deadline, bool retention = false);
  std::vector<Result> drain();
  Totals totals() const;

 private:
  void run();
  RemoteStore& store_;
  CheckpointOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::pair<std::string, int64_t>> pending_;
  std::string uploading_;  ///< the directory of the upload in flight
  int64_t uploading_step_ = -1;
  bool busy_ = false, stop_ = false;
  bool retaining_ = false;   ///< the upload is done; remote retention runs
  // The run's history (keep_history): where, how often, and the requests of history_now().
  std::string history_dir_;
  double history_every_s_ = 0, history_next_ = 0;
  int64_t history_asked_ = 0, history_done_ = 0;
  bool history_ok_ = false;
  /// Upload the history (the lock held on entry and on return, released meanwhile).
  void upload_history(std::unique_lock<std::mutex>& lock);
  bool superseded_ = false;  ///< the upload in flight was abandoned for a newer checkpoint
  std::vector<Result> results_;
  Totals totals_;
  std::thread thread_;
};

}  // namespace dlrun::ckpt
