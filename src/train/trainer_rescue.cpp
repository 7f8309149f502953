// The trainer after a peer was lost without notice (docs/design.md, "A peer lost without notice"),
// and the records of an interruption whose checkpoint is committed.
#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "distributed/group.h"
#include "distributed/rescue.h"
#include "train/trainer_loop.h"

namespace dlrun::train {

// A peer lost without notice (dist.peer_timeout_s; docs/design.md, "A peer lost without
// notice"): the survivors agree which step to write and who writes it (dist::Rescue), the writer
// commits it -- rank 0, or another rank when rank 0 is the one lost -- and every survivor exits 75.
// nullopt when no peer is lost: the failure is another one, and goes on.
std::optional<int> Trainer::rescue() {
  dist::Group* group = replicas_.group();
  if (!group || !group->lost()) return std::nullopt;
  const dist::Loss loss = *group->lost();
  const double lost_at = wall_now();
  const bool mid_step = std::exchange(in_step_, false);
  if (mid_step) {  // the optimizer has not run: the step's batches and counters are given back
    runner_.abandon_step();
    c_.train_loader->seek(boundary_);
  }
  const bool exact = replicas_.buffers_at_boundary(mid_step);
  log::error("{}; {}: saving the checkpoint of step {} with the other survivors", loss.why,
             mid_step ? fmt::format("step {} was under way", st_.step + 1) : "at a step boundary", st_.step);
  dist::Rescue rescue(*group);
  const dist::RescueDecision d = rescue.agree({replicas_.rank(), st_.step, exact});
  if (!d.lost) return std::nullopt;
  const std::string what = fmt::format("the checkpoint of step {} after {}", d.step, loss.why);
  Checkpointer::StopUpload upload;
  double commit_time = 0;
  if (d.writer == replicas_.rank()) {
    std::string failure;
    try {
      if (!leader()) ckpt_.take_over();
      if (leader() && ckpt_.saved(st_.step)) {
        ckpt_.wait_written(SaveReason::kPreemption, st_.step);
      } else {
        ckpt_.save(SaveReason::kPreemption, /*sync=*/true, st_.step,
                   [this] { return std::optional<ckpt::Snapshot>(parts_.snapshot_alone()); });
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
    rescue.committed(failure);
    if (!failure.empty())
      throw Error(ExitCode::kRuntime, fmt::format("{} could not be written: {}", what, failure));
    commit_time = wall_now();
    log::info("{} is committed{}, {:.2f} s after the loss was seen; exiting with code 75", what,
              d.exact ? "" : " (inexact: rank 0's BatchNorm statistics of that step went with it)",
              commit_time - lost_at);
    upload = ckpt_.upload_before_deadline(st_.step, lost_at, "a lost peer");
  } else {
    const std::string failure = rescue.await_committed();
    if (!failure.empty())
      throw Error(ExitCode::kRuntime, fmt::format("rank {} could not write {}: {}", d.writer, what, failure));
    log::info("rank {} committed {}; exiting with code 75", d.writer, what);
  }
  if (!leader()) return kInterrupted;
  metrics::Event e{"peer_lost", d.step};  // rank 0 survived: the run's records
  e.message = loss.why;
  e.scalars = {{"latency_s", commit_time > 0 ? commit_time - lost_at : 0.0}};
  // The ranks the watch named, else (a collective that failed first: a killed process closes its
  // connections before its heartbeat can go silent) those that did not report to the rescue.
  std::vector<int> lost_ranks = loss.ranks;
  if (lost_ranks.empty())
    for (int r = 0; r < group->size(); ++r)
      if (std::find(d.survivors.begin(), d.survivors.end(), r) == d.survivors.end()) lost_ranks.push_back(r);
  e.fields = {{"lost_ranks", lost_ranks}, {"store_gone", loss.store_gone}, {"why", loss.why},
              {"writer", d.writer}, {"exact", d.exact}, {"survivors", d.survivors}, {"mid_step", mid_step}};
  record_interruption(std::move(e), "peer_lost", lost_at, upload, /*read_loss=*/false);
  ckpt_.upload_history(lost_at);
  return kInterrupted;
}

// The event of an interruption whose checkpoint is committed (a stop request or a lost peer), in
// metrics.jsonl, state.json's record (st_.preemption, with `record_extra`) and summary.json. A failure here loses no
// work: it is logged.
void Trainer::record_interruption(metrics::Event e, const std::string& status, double since,
                                  const Checkpointer::StopUpload& upload, bool read_loss,
                                  const nlohmann::json& record_extra) {
  try {
    if (read_loss) meter_.read_last_loss();
    upload.add_to(e, since);
    account_.add_to(e.fields, status);
    st_.preemption = e.fields;
    st_.preemption["event"] = e.kind;
    st_.preemption.update(record_extra);
    st_.preemption["step"] = e.step;
    report_.report(std::move(e));
    dir_.write_summary(summary("interrupted"));
    report_.close();
  } catch (const std::exception& ex) {
    log::error("the checkpoint is committed, but the run's records could not be written: {}", ex.what());
  }
}

}  // namespace dlrun::train
