// `dlrun train`'s start-up (see trainer.h and start.h): the signal handlers, the job's layout,
// the run directory's lock, the device, the process group; then train_in() (trainer.cpp). Every
// refusal before the Trainer's begin() leaves the run directory as it was (docs/design.md,
// "Start-up").
#include "train/start.h"

#include <memory>
#include <string>

#include "base/error.h"
#include "base/log.h"
#include "preempt/preempt.h"
#include "train/observe/goodput.h"
#include "world/world.h"

namespace dlrun::train {

/// A stop request that arrives during start-up (on any rank): nothing has been trained or
/// written, so there is nothing to save and requeueing loses nothing.
bool stopped_during_startup(const char* phase, dist::Group* group) {
  const bool mine = preempt::stop_requested();
  if (!(group ? group->any(mine) : mine)) return false;
  log0::warn("{} received during start-up ({}): nothing trained yet, the run directory is unchanged; exiting with "
             "code 75",
             mine ? preempt::stop_reason() : std::string("a stop request on another rank"), phase);
  return true;
}

int run(const TrainArgs& args) {
  preempt::install_signal_handlers();  // (again: `dlrun train` installs them before loading the config)
  price_per_hour(args.cfg.run.price_per_hour);  // a malformed DLRUN_PRICE_PER_HOUR: exit 2 before anything is written
  const dist::World world = dist::world_from_env();
  log::set_rank(world.rank, world.size);
  RunDir dir(args.run_dir, args.cfg.checkpoint.dir);
  std::unique_ptr<RunLock> lock;  // one trainer per run directory; in a multi-process run, rank 0 writes it
  if (world.rank == 0) lock = std::make_unique<RunLock>(dir.path(), args.cfg.run.lock_wait_s, preempt::stop_requested);
  const Placement placement = place(args.cfg, world);
  std::unique_ptr<dist::Group> group;
  // A world of one trains without a process group, unless it was started by a launcher and
  // dist.backend names a backend: then the whole distributed path runs on one rank (what the
  // Reducer and the collectives cost, measured against the plain run; docs/distributed.md).
  const bool one_rank_group = world.launcher != "none" && args.cfg.dist.backend != DistBackend::kAuto;
  if (world.distributed() || one_rank_group) {
    try {
      group = dist::Group::connect(world, args.cfg.dist, placement.device);
    } catch (const dist::StoppedDuringRendezvous& e) {
      log::warn("{}: nothing trained yet, the run directory is unchanged; exiting with code 75", e.what());
      return static_cast<int>(ExitCode::kInterrupted);
    }
    log0::info("{}", group->describe());
  }
  try {
    return train_in(args, dir, placement, group.get());
  } catch (const Error& e) {
    if (group) group->report_failure(e.message());
    throw;
  } catch (const std::exception& e) {  // (a collective inside backward, the Reducer's, times out here)
    if (group) group->report_failure(e.what());
    if (const std::string lost = group ? group->silent_ranks() : ""; !lost.empty()) log::error("{}", lost);
    throw;
  }
}

}  // namespace dlrun::train
