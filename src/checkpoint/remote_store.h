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
// checked against the manifest's sizes and SHA-256 as they stream in. With server-side
// encryption asked for (checkpoint.remote_sse), the uploaded manifest records it
// ("server_side_encryption") and a download checks every object is stored so.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
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
  std::string name;       ///< "step-00001200" (set aside: "step-00001200.aside-<time>")
  int64_t step = -1;
  std::string suffix;     ///< set aside: ".aside-<time>" (--resume never --force), ".abandoned-<time>"
  bool complete = false;  ///< its manifest.json is there
  uint64_t bytes = 0;     ///< the sizes of its objects, as listed
};

/// Retries for a store that does not answer, where giving up must not mean starting over (a
/// resume, setting a timeline aside): a transient S3Error is retried with backoff (1, 2, 4 ...
/// 30 s, each retry logged) until `budget_s` seconds from an operation's first failure are spent, then
/// dlrun::Error with exit 75, "try again later". `stop` (a signal) ends the wait the same way.
class Patience {
 public:
  explicit Patience(double budget_s, std::function<bool()> stop = {}, std::function<void(double)> sleep = {});
  template <typename F>
  auto run(const std::string& what, F&& f) -> decltype(f()) {
    for (;;) {
      try {
        if constexpr (std::is_void_v<decltype(f())>) {
          f();
          answered();
          return;
        } else {
          auto result = f();
          answered();
          return result;
        }
      } catch (const remote::S3Error& e) {
        if (!e.transient()) throw;
        wait(what, e);
      }
    }
  }
  /// Retries so far.
  int retries() const { return retries_; }

 private:
  void wait(const std::string& what, const remote::S3Error& e);
  void answered() { first_failure_ = -1, delay_ = 1; }  // the next operation has its own budget
  double budget_s_;
  std::function<bool()> stop_;
  std::function<void(double)> sleep_;
  double first_failure_ = -1, delay_ = 1;
  int retries_ = 0;
};

/// What to do about a failed request to the store: retry later, fix the endpoint, the CAs or
/// the TLS floor, the encryption, a permission (docs/security.md), or the credentials (from
/// `credentials`, a source's name, when known) and the bucket.
std::string remote_hint(const remote::S3Error& e, const std::string& credentials = {});

class RemoteStore {
 public:
  RemoteStore(remote::S3Config config, remote::S3Url url);
  const remote::S3Url& url() const { return url_; }
  const remote::S3Config& config() const { return config_; }

  /// Every kind of request a training run makes, once, before it starts: list the prefix,
  /// read LATEST, list unfinished uploads, write, read back and delete a small probe object
  /// under the prefix (with the encryption asked for), abort an upload that does not exist. A
  /// wrong credential, bucket or endpoint, a missing permission (named), a server TLS refuses,
  /// a store that ignores the encryption asked for, missing credentials or an answer that is
  /// not S3's is dlrun::Error (exit 2) naming the bucket and the reason; no answer at all is
  /// exit 1 (transient).
  void check_access();
  /// Upload a committed local checkpoint: every file its manifest lists, then the manifest,
  /// then LATEST. Returns the bytes sent. Throws remote::S3Error on failure.
  uint64_t upload(const std::string& local_dir);
  /// The checkpoints under the prefix, oldest first.
  std::vector<RemoteEntry> list();
  /// The checkpoints set aside under the prefix (step-N.aside-*, step-N.abandoned-*): never read
  /// by a resume, still stored and billed. Oldest first.
  std::vector<RemoteEntry> list_set_aside();
  /// The name the remote LATEST holds.
  std::optional<std::string> latest();
  /// Download `name`, checking every file against its manifest while it streams in; throws
  /// dlrun::Error (exit 2) with the reason when it does not verify.
  FileSet fetch(const std::string& name);
  /// fetch() without keeping the bytes: the same checks.
  VerifyResult verify(const std::string& name);
  /// After the upload of step `uploaded` (the uploader runs it, so no upload of this run is
  /// under way): keep_last / keep_every applied to the complete remote checkpoints up to that
  /// step (never the one LATEST names; newer ones are not this timeline's to judge), and what
  /// nobody will read removed so it is not billed forever: incomplete step prefixes older than
  /// the newest complete checkpoint, and multipart uploads under the prefix that were started
  /// and never finished (a process killed mid-upload). Returns what was removed.
  std::vector<std::string> apply_retention(int64_t keep_last, int64_t keep_every, int64_t uploaded);
  /// Set aside every step newer than `step` (complete or not; -1: all): copied to
  /// PREFIX/step-N<suffix>/ by the service (".abandoned-<time>": a timeline given up by a
  /// resume from an older step; ".aside-<time>": --resume never --force), then removed
  /// (manifest first), so no later resume takes them; LATEST then names the newest complete
  /// checkpoint left, or is removed. Returns the names set aside.
  std::vector<std::string> set_aside_after(int64_t step, const std::string& suffix);
  /// The run's history beside its checkpoints (docs/checkpoints.md, "A fresh VM continues the
  /// run's records"): RUN_DIR/metrics.jsonl (up to its last whole line) and the TensorBoard event
  /// files, as they are now, to PREFIX/history/; the first call also removes history objects
  /// this run directory does not hold. Returns the bytes sent. Throws S3Error.
  uint64_t put_history(const std::string& run_dir);
  /// Into an empty RUN_DIR (no metrics.jsonl): the history PREFIX/history/ holds, so a resume on
  /// a fresh VM counts what the earlier processes did and cost and its records begin at step 0.
  /// Only metrics.jsonl and events.out.tfevents.* names are taken (an object's name is
  /// untrusted: no path in it), each at most 1 GiB. Returns the files written (0: no history).
  int fetch_history(const std::string& run_dir);

  /// Set: every request fails at once and a transfer under way is abandoned (within about a
  /// second), with S3Error code "cancelled". Cleared: requests work again.
  void cancel(bool on) { cancelled_ = on; }

 private:
  FileSet download(const std::string& name, bool keep);
  void remove_entry(const std::string& name);
  remote::S3Config config_;
  remote::S3Client client_;
  remote::S3Url url_;
  std::atomic<bool> cancelled_{false};
  bool history_pruned_ = false;  ///< put_history removed the objects the run directory lacks
};

}  // namespace dlrun::ckpt
