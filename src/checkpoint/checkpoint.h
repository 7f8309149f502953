// Checkpoints on disk (docs/checkpoints.md, docs/design.md): commit protocol, verification,
// listing, retention, asynchronous writing, loading.
//
// A checkpoint is a directory RUN_DIR/checkpoints/step-00001200/ holding
//   model.pt        parameters and buffers: torch::pickle_save of a dict name -> tensor
//                   (Python: torch.load(path) gives a dict of tensors)
//   optim.pt        optimizer state, same format
//   rng-rank00000.pt  CPU/CUDA generator states of one rank (one file per rank)
//   state.json      step, epoch, sample cursor, scheduler, grad scaler, config hash,
//                   architecture signature, optimizer type, versions, world size, ...
//   config.yaml     the resolved config
//   manifest.json   written LAST: every other file with size and SHA-256, step, epoch,
//                   config hash, versions, world size
// Commit: write into step-N.tmp/, fsync each file, write+fsync manifest.json, rename to
// step-N/, fsync the parent, then replace LATEST atomically (write LATEST.tmp, fsync,
// rename, fsync parent). A crash at any instant leaves the previous checkpoint usable.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/options.h"

namespace dlrun::ckpt {

using TensorDict = std::vector<std::pair<std::string, torch::Tensor>>;  ///< ordered

/// Everything one checkpoint holds. Tensors must be host (CPU) tensors owned by the
/// snapshot (already copied off the live model), so the writer can run in the background.
struct Snapshot {
  int64_t step = 0;
  int64_t epoch = 0;
  std::map<std::string, TensorDict> tensor_files;  ///< file stem ("model", "optim", "rng-rank00000") -> tensors
  nlohmann::json state;                            ///< written as state.json
  std::string config_yaml;                         ///< written as config.yaml
  std::string config_hash;                         ///< SHA-256 of config_yaml (hex)
  int world_size = 1;
};

/// The file names of a checkpoint directory (and of the LATEST file beside them).
inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kStateFile = "state.json";
inline constexpr const char* kConfigFile = "config.yaml";
inline constexpr const char* kModelFile = "model.pt";
inline constexpr const char* kOptimFile = "optim.pt";
inline constexpr const char* kLatestFile = "LATEST";
inline constexpr const char* kBestFile = "BEST";  ///< the checkpoint checkpoint.keep_best keeps

/// Copy tensors to host memory (pinned when `pinned` and CUDA is available), detached.
TensorDict host_copy(const TensorDict& tensors, bool pinned = false);

/// The files of one checkpoint as bytes, in the order they are written: the model first,
/// the other files, manifest.json last. What commit writes, load reads, and remote storage
/// carries; a set from load or a download has been checked against its manifest.
struct FileSet {
  std::string name;          ///< "step-00001200"
  nlohmann::json manifest;   ///< manifest.json, parsed
  std::vector<std::pair<std::string, std::vector<char>>> files;  ///< file name -> bytes; manifest.json last
  uint64_t bytes() const;
  /// The bytes of the file `name` (kModelFile, kConfigFile, ...), or null when the set has none.
  const std::vector<char>* find(const std::string& name) const;
};

/// Serialize a snapshot: tensor files, state.json, config.yaml, and the manifest with the
/// size and SHA-256 of each (hashed here, from memory).
FileSet serialize(const Snapshot& snap);
/// Parse a checked file set; `where` names its source in errors (exit 2).
Snapshot parse(const FileSet& set, const std::string& where);

/// "step-00001200"
std::string dir_name(int64_t step);

/// Write and commit synchronously into `checkpoints_dir`. Returns the committed directory.
/// Throws dlrun::Error (exit 1) on I/O failure; never touches other checkpoints.
/// Nothing that may be needed is deleted: a stale step-N.tmp/ of the same step (a crashed
/// writer) is set aside as step-N.tmp.partial-<unix time>/. When step-N/ already exists (the
/// step is saved again, e.g. after resuming from an older checkpoint), the new copy is
/// written to step-N.tmp/ first; an existing copy that fails verification is set aside as
/// step-N.corrupt-<unix time>/, one that verifies (a complete checkpoint of the same step,
/// now superseded) is swapped out atomically (renameat2 RENAME_EXCHANGE; else via
/// step-N.old-<pid>/) and removed, so a complete step-N/ exists at every instant. LATEST then
/// names this checkpoint.
std::string commit(const Snapshot& snap, const std::string& checkpoints_dir);
/// The same protocol for a serialized (or downloaded) file set, written byte for byte.
std::string commit_files(const FileSet& set, const std::string& checkpoints_dir);

struct VerifyResult {
  bool ok = false;
  std::string reason;   ///< why not (first problem found)
  int64_t step = -1;
  int64_t epoch = -1;
  nlohmann::json manifest;
  bool newer_format = false;  ///< written by a newer dlrun: resume refuses rather than skips it
};

/// Check a checkpoint directory: manifest present and parseable, every listed file present
/// with the listed size and SHA-256, model.pt and state.json listed, no `.tmp` suffix.
/// Reasons read like "model.pt: SHA-256 mismatch (file changed or corrupt)",
/// "missing manifest.json (partial write?)", "optim.pt: size 123 != 456 in manifest ...".
VerifyResult verify(const std::string& ckpt_dir);

struct Entry {
  std::string path;
  std::string name;
  int64_t step = -1;
  bool partial = false;   ///< a leftover step-N.tmp/
  VerifyResult verified;
  uint64_t bytes = 0;
  double mtime = 0;       ///< seconds since epoch
};

/// Every checkpoint (committed and partial) under `checkpoints_dir`, oldest first.
std::vector<Entry> list(const std::string& checkpoints_dir);

/// Newest checkpoint that verifies, or nullopt. Each one skipped (partial or corrupt) is
/// reported through `on_skip(path, reason)`; nothing is deleted.
std::optional<std::string> latest_verified(const std::string& checkpoints_dir,
                                           const std::function<void(const std::string&, const std::string&)>& on_skip = {});

/// The name LATEST holds (e.g. "step-00001200"), or nullopt when LATEST is absent or empty.
std::optional<std::string> read_latest(const std::string& checkpoints_dir);
/// The name BEST holds (the best checkpoint by checkpoint.keep_best), or nullopt.
std::optional<std::string> read_best(const std::string& checkpoints_dir);
/// Replace BEST with `name`, atomically and durably.
void write_best(const std::string& checkpoints_dir, const std::string& name);

/// The checkpoints directory of `path`: RUN_DIR/checkpoints when `path` is a run directory,
/// else `path` itself. Throws dlrun::Error (exit 2) when `path` is not a directory.
std::string checkpoints_dir_of(const std::string& path);

/// The checkpoint a user names on the command line: a checkpoint directory (it has a
/// manifest.json or is named step-N...) as is; a run or checkpoints directory -> the one
/// LATEST names (or, without LATEST, the newest that verifies). Does not verify it.
std::string resolve(const std::string& path);

/// Load a checkpoint, checking every file against the manifest (size and SHA-256) as it is
/// read: each byte is read and hashed once. Throws dlrun::Error (exit 2) with the reason when
/// it does not verify.
Snapshot load(const std::string& ckpt_dir);
/// The checked bytes of a checkpoint directory (what load() parses).
FileSet read_set(const std::string& ckpt_dir);

/// A checkpoint found and loaded by load_newest().
struct Loaded {
  std::string path;
  Snapshot snapshot;
};

/// The newest checkpoint under `checkpoints_dir` that loads (and so verifies), or nullopt
/// when there is none. Each one skipped (partial or corrupt) is reported through
/// `on_skip(path, reason)`; nothing is deleted. Resume and `dlrun eval --checkpoint auto`
/// both use it, so they always agree on which checkpoint is the run's newest.
std::optional<Loaded> load_newest(const std::string& checkpoints_dir,
                                  const std::function<void(const std::string&, const std::string&)>& on_skip = {});

/// The checkpoint a resume continues (`--resume auto`, `dlrun eval --checkpoint auto`): the one
/// LATEST names when it loads, else the newest that loads (load_newest), so a rollback with
/// `--resume PATH` is not undone by a later automatic resume. Skipped ones go to `on_skip`.
std::optional<Loaded> load_preferred(const std::string& checkpoints_dir,
                                     const std::function<void(const std::string&, const std::string&)>& on_skip = {});

/// A resume from step `step` abandons the timeline of the committed checkpoints newer than it:
/// each step-N/ is renamed step-N.abandoned-<stamp>/ (never deleted; `dlrun ckpt list` shows
/// it, resume and retention leave it alone), and LATEST then names the newest committed
/// checkpoint left, or is removed when none is. Returns the directories set aside.
std::vector<std::string> set_aside_after(const std::string& checkpoints_dir, int64_t step, const std::string& stamp);

/// Retention: keep the newest `keep_last` verified checkpoints (0 = all) plus those whose
/// step is a multiple of `keep_every`; never remove the newest verified one; partial and
/// set-aside directories are left alone (reported by `dlrun ckpt list`). Also never removes
/// the checkpoint LATEST names, any checkpoint that fails verification (left for inspection),
/// or anything newer than the newest verified one. `just_committed` names a checkpoint this
/// process has just written and hashed (commit() returns it): it is the newest verified one
/// without being read again, and checkpoints newer than it are left alone unread. Without
/// it, candidates for "newest verified" are checked with SHA-256. Older ones are checked for
/// presence and sizes only, so retention after a save never re-hashes a checkpoint.
/// `in_use` lists checkpoint directories that must stay whatever the counts say (the one
/// being uploaded to remote storage, and the one waiting for it).
void apply_retention(const std::string& checkpoints_dir, int64_t keep_last, int64_t keep_every,
                     const std::string& just_committed = {}, const std::vector<std::string>& in_use = {});

/// What a live run hands its snapshots to: the background Writer below, or a stand-in in tests
/// (the checkpointer is tested against a fake writer and clock).
class SnapshotWriter {
 public:
  struct Stats {
    int64_t step = -1;
    std::string path;
    double write_s = 0;   ///< time the write+commit took (background)
    double wait_s = 0;    ///< time save() blocked waiting for the previous write
  };
  virtual ~SnapshotWriter() = default;
  /// Write `snap` (async: hand it to the background thread). With async writes, a failure of
  /// the previous background write is rethrown here, after `snap` has been queued.
  virtual void save(Snapshot snap) = 0;
  /// Block until nothing is pending; rethrows a failure of the last write.
  virtual void wait() = 0;
  /// Stats of the last committed checkpoint (step -1 if none yet).
  virtual Stats last() const = 0;
  /// Called after each commit (before retention), from the thread that wrote it: how the
  /// remote uploader learns of a new checkpoint.
  virtual void on_commit(std::function<void(const Stats&)> callback) = 0;
  /// Asked at each retention: checkpoint directories that must not be removed yet.
  virtual void in_use(std::function<std::vector<std::string>()> callback) = 0;
};

/// Background writer: save() waits for any write still running, then (async) hands the
/// snapshot to a thread that writes, hashes and commits it, then applies retention.
class Writer : public SnapshotWriter {
 public:
  Writer(std::string checkpoints_dir, CheckpointOptions opts);
  ~Writer() override;  ///< waits for a pending write
  void save(Snapshot snap) override;
  void wait() override;
  Stats last() const override;
  void on_commit(std::function<void(const Stats&)> callback) override;
  void in_use(std::function<std::vector<std::string>()> callback) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The points of a commit where DLRUN_FAULT=ckpt:<point> aborts the process (base/fault.h),
/// in order: "file" (after the first tensor file), "files" (all files written, before the
/// manifest), "manifest" (manifest written, before the rename), "rename" (after the rename,
/// before LATEST), "latest" (after LATEST). For tests that iterate them.
std::vector<std::string> fault_points();

}  // namespace dlrun::ckpt
