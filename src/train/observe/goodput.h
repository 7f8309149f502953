// What a run's wall clock went to, across its interruptions, read back from its own record
// (metrics.jsonl): each process that trained it is a segment, from its "start" event to its last
// record. A segment's time is paid for (a cloud bills the instance while the process lives); of
// it, the start-up (process start to its first step), the steps after the checkpoint the next
// segment resumed from (computed again: replayed), the stop (last step to the process's end:
// the stop's save and upload, or the final save) and the training stalled by periodic saves are
// not useful. The gap between one segment's end and the next one's start (the requeue, a new
// VM) is downtime, not paid. With a price per hour (run.price_per_hour, else the environment's
// DLRUN_PRICE_PER_HOUR), the run's cost so far and the part of it that interruptions cost.
// docs/checkpoints.md, "What a preemption cost". No LibTorch here.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "metrics/sink.h"

namespace dlrun::train {

/// One process's part of the run.
struct Segment {
  double process_start = 0;  ///< when the process started (wall seconds)
  double first_step = 0;     ///< its first step record (0: it made no step)
  double last_step = 0;      ///< its last step record
  double end = 0;            ///< its last record
  int64_t start_step = 0;    ///< the step it started or resumed at
  int64_t furthest_step = 0; ///< the furthest step it recorded
  double save_stall_s = 0;   ///< training waiting for its periodic saves
  std::string status;        ///< "completed", "interrupted", "peer_lost", "failed"; "" when killed (no end record)
  std::vector<std::pair<int64_t, double>> marks;  ///< (step, time) of its step and checkpoint records

  /// When it had got to `step`: the time of its last mark at or before `step` (its first step
  /// when none).
  double time_at(int64_t step) const;
};

/// The segments of metrics.jsonl from byte `offset` on, in order (each begins at a "start" event;
/// records before the first one and lines that are not JSON objects are skipped). A missing
/// file: none.
std::vector<Segment> read_segments(const std::string& metrics_jsonl, uint64_t offset = 0);

/// Seconds, summed over the segments.
struct Goodput {
  double paid_s = 0;          ///< the processes' lifetimes
  double startup_s = 0;       ///< process start to first step
  double replayed_s = 0;      ///< steps after the checkpoint the next segment resumed from
  int64_t replayed_steps = 0;
  double stop_s = 0;          ///< last step to the process's end
  double save_stall_s = 0;    ///< periodic saves
  double downtime_s = 0;      ///< between segments: not paid
  double interruptions_s = 0; ///< lost to interruptions: each one's stop, replay and the next start-up
  int64_t interruptions = 0;  ///< segments that ended before the run did
  /// Of those, the ones a lost peer ended (a "peer_lost" event: dist.peer_timeout_s), and what
  /// they cost: from the last step before the loss to the first step after the restart.
  int64_t peer_losses = 0;
  double peer_lost_s = 0;
  int64_t segments = 0;       ///< processes that trained the run
  double useful_s() const;
  /// summary.json's "wall_clock" and, with a price, "cost" (null without).
  nlohmann::json wall_clock_json() const;
  nlohmann::json cost_json(double price_per_hour) const;
};

/// The account of `segments`; the last one (the live process) ends at `now` when later than its
/// last record, and with `live_status` ("interrupted" while it stops) ends so.
Goodput account(std::vector<Segment> segments, double now, const std::string& live_status = "");

/// The interruption between segments[i-1] and segments[i] (i >= 1), as the "resume" event and
/// the start of segment i report it: the stop, the replayed steps, the downtime, segment i's
/// start-up (to `first_step_time`, wall), and with a price what it cost.
nlohmann::json interruption_json(const std::vector<Segment>& segments, size_t i, double first_step_time,
                                 double price_per_hour);

/// run.price_per_hour when > 0, else DLRUN_PRICE_PER_HOUR (a number > 0, else exit 2), else 0.
double price_per_hour(double configured);

/// The live run's account, for the trainer: the earlier processes' segments are read once when
/// this one begins, and only this process's own records (from where the file ended then) each
/// time the account is asked for -- a stop has little time to spare.
class RunAccount {
 public:
  /// `configured`: run.price_per_hour (a malformed DLRUN_PRICE_PER_HOUR throws here, exit 2).
  RunAccount(double configured, std::string metrics_jsonl);
  /// Leader, before this process's first record: read the earlier segments.
  void begin();
  /// The account now; `live_status` "interrupted" while this process stops.
  Goodput now(const std::string& live_status = "") const;
  double price() const { return price_; }
  /// The paid seconds of the run's earlier processes (read by begin()).
  double paid_before_s() const;
  /// What the run has cost at a wall time, as now() would count it (the earlier processes' paid
  /// time and this process's since it started), without reading metrics.jsonl: for the live
  /// endpoint's gauge, on its own thread. Null without a price. Call after begin().
  std::function<double(double wall_time)> live_cost() const;
  /// The account now as an event's "wall_clock" and "cost" fields (the preempt event's).
  void add_to(nlohmann::json& fields, const std::string& live_status) const;
  /// The "resume" event's fields: what the interruption before this process cost, its first
  /// step done now. Empty when this process is the run's first.
  nlohmann::json interruption() const;
  /// The "resume" event at `step`, the first after resuming at `resumed_step`; none when this
  /// process is the run's first in metrics.jsonl (--force, a new run directory).
  std::optional<metrics::Event> resume_event(int64_t step, int64_t resumed_step) const;

 private:
  std::vector<Segment> all() const;

  double price_;
  std::string path_;
  uint64_t offset_ = 0;
  std::vector<Segment> earlier_;
};

}  // namespace dlrun::train
