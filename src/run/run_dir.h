// The run directory (docs/design.md, "The run directory"): every path in it, the lock that
// keeps one trainer per directory, setting a previous run aside, the per-segment config.yaml
// and summary.json. Nothing here writes until the trainer has passed every start-up check:
// a refused or failed start leaves the directory as it was.
//
//   RUN_DIR/config.yaml                 the resolved config of the latest segment
//   RUN_DIR/config.before-step-N.yaml   the previous segment's, kept when a resume changed it
//   RUN_DIR/metrics.jsonl               one JSON object per logged step and event
//   RUN_DIR/summary.json                written at the end (also on interruption or failure)
//   RUN_DIR/events.out.tfevents.*       TensorBoard scalars
//   RUN_DIR/checkpoints/                checkpoints (or checkpoint.dir)
//   RUN_DIR/dlrun.lock                  while a trainer runs: its pid, host, boot id and start time
//   RUN_DIR/aside-<time>/               a previous run set aside by --resume never --force
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/options.h"

namespace dlrun::train {

/// --run-dir, else run.dir, else runs/<run.name>.
std::string resolve_run_dir(const Config& cfg, const std::string& cli_run_dir);

class RunDir {
 public:
  /// `checkpoint_dir`: checkpoint.dir ("" = RUN_DIR/checkpoints). No I/O.
  RunDir(std::string path, const std::string& checkpoint_dir = {});
  const std::string& path() const { return path_; }
  const std::string& checkpoints() const { return checkpoints_; }
  std::string config_yaml() const { return path_ + "/config.yaml"; }
  std::string metrics_jsonl() const { return path_ + "/metrics.jsonl"; }
  std::string summary_json() const { return path_ + "/summary.json"; }
  std::string lock_file() const { return path_ + "/dlrun.lock"; }

  /// The files of an earlier run here: checkpoints, metrics.jsonl, summary.json, config.yaml,
  /// event files (empty when there are none).
  std::vector<std::string> previous_run_files() const;
  /// Move the earlier run's files into RUN_DIR/aside-<UTC time>/ (a checkpoint.dir outside
  /// the run directory becomes <dir>.aside-<UTC time>); nothing is deleted. Returns the
  /// directory they went to.
  std::string set_aside_previous_run() const;
  /// The highest integer step of any record in metrics.jsonl (events too), or -1 when there is
  /// none. A last line that lacks only its newline counts (metrics_log.h, drain).
  int64_t furthest_logged_step() const;
  /// Write config.yaml (atomically) for a segment that starts at `step`: `header` (a comment
  /// line naming the versions) then `yaml`. When config.yaml already holds a different config
  /// (the version line alone does not count: a rebuilt binary changes nothing), it is kept as
  /// config.before-step-<step>.yaml first; that path is returned ("" when nothing was kept).
  std::string write_config(const std::string& header, const std::string& yaml, int64_t step) const;
  /// Write summary.json atomically.
  void write_summary(const nlohmann::json& summary) const;

 private:
  std::string path_;
  std::string checkpoints_;
};

/// One trainer per run directory. Taking the lock creates the run directory (and missing
/// parents) if needed, and holds an flock(2) on RUN_DIR/dlrun.lock, which names this process.
/// Another live trainer on this host holding it is a refusal (exit 2) naming its pid; one on
/// another host, or on an earlier boot of this one (a shared file system, where a reclaimed VM's
/// lock lingers for the server's lease; a VM recreated under the same name), is waited for up
/// to `other_host_wait_s` (run.lock_wait_s), then exit 75 -- at once when `stop` says so. A lock file left by a killed process holds no flock and is taken over.
/// On a file system without locks (ENOSYS, ENOLCK) it warns and runs unlocked. Releasing (the
/// destructor) removes the lock file, and the directories taking it created when they are
/// still empty, so a refused start leaves no trace.
class RunLock {
 public:
  explicit RunLock(const std::string& run_dir, double other_host_wait_s = 0, const std::function<bool()>& stop = {});
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  void release();
  std::string path_;
  int fd_ = -1;
  std::vector<std::string> created_;  ///< directories made by the constructor, outermost first
};

}  // namespace dlrun::train
