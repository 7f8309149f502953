// Checkpoints off the instance (docs/checkpoints.md, "Remote checkpoints"): the committed
// local checkpoints of a run, copied to an S3 bucket so that a job requeued on a fresh VM
// continues from them.
//
//   s3://BUCKET/PREFIX/step-00001200/model.pt ...   every file the manifest lists
//   s3://BUCKET/PREFIX/step-00001200/manifest.json  uploaded after them
//   s3://BUCKET/PREFIX/LATEST                       uploaded last: names a complete checkpoint
//
// A reader that sees LATEST sees a checkpoint whose every file is there; a step directory
// without its manifest (an upload cut short) is incomplete and never used. Downloads are
// checked against the manifest's sizes and SHA-256 as they stream in.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "remote/s3.h"

namespace dlrun::ckpt {

/// A remote checkpoint written by a newer dlrun (a format version this one cannot read): not
/// damage, so `--resume auto` stops on it (exit 2) instead of skipping to an older one.
class NewerFormatError : public Error {
 public:
  using Error::Error;
};

struct RemoteEntry {
  std::string name;       ///< "step-00001200"
  int64_t step = -1;
  bool complete = false;  ///< its manifest.json is there
  uint64_t bytes = 0;     ///< the sizes of its objects, as listed
};

class RemoteStore {
 public:
  RemoteStore(remote::S3Config config, remote::S3Url url);
  const remote::S3Url& url() const { return url_; }
  const remote::S3Config& config() const { return config_; }

  /// A listing of the prefix: a wrong credential, bucket or endpoint is dlrun::Error (exit 2)
  /// naming the bucket and the HTTP status; no answer at all is exit 1 (transient).
  void check_access();
  /// Upload a committed local checkpoint: every file its manifest lists, then the manifest,
  /// then LATEST. Returns the bytes sent. Throws remote::S3Error on failure.
  uint64_t upload(const std::string& local_dir);
  /// The checkpoints under the prefix, oldest first.
  std::vector<RemoteEntry> list();
  /// The name the remote LATEST holds.
  std::optional<std::string> latest();
  /// Download `name`, checking every file against its manifest while it streams in; throws
  /// dlrun::Error (exit 2) with the reason when it does not verify.
  FileSet fetch(const std::string& name);
  /// fetch() without keeping the bytes: the same checks.
  VerifyResult verify(const std::string& name);
  /// keep_last / keep_every applied to the complete remote checkpoints; never removes the one
  /// LATEST names, nor incomplete ones (an upload may be under way). Returns those removed.
  std::vector<std::string> apply_retention(int64_t keep_last, int64_t keep_every);
  /// Set: every request fails at once and a transfer under way is abandoned (within about a
  /// second), with S3Error code "cancelled". Cleared: requests work again.
  void cancel(bool on) { cancelled_ = on; }

 private:
  FileSet download(const std::string& name, bool keep);
  remote::S3Config config_;
  remote::S3Client client_;
  remote::S3Url url_;
  std::atomic<bool> cancelled_{false};
};

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
  bool superseded_ = false;  ///< the upload in flight was abandoned for a newer checkpoint
  std::vector<Result> results_;
  Totals totals_;
  std::thread thread_;
};

}  // namespace dlrun::ckpt
