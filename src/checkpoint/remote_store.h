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
#include <cstdint>
#include <optional>
#include <string>
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

}  // namespace dlrun::ckpt
