// The rendezvous of the ranks on the store, and the check that it is this job's (see rendezvous.h).
#include "distributed/rendezvous.h"

#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/host.h"
#include "distributed/group.h"
#include "preempt/preempt.h"

namespace dlrun::dist {
namespace {

/// The key that says whose store this is, outside every job's prefix, so that another job's
/// worker finds it.
constexpr const char* kJobKey = "dlrun/job";

/// What kJobKey holds: the run id and the world size (ranks of one job never differ in either;
/// without a run id, the size still tells many jobs apart). In torchrun's agent store the run id
/// alone: the agent keeps its store across restarts, and an elastic job's size may change.
std::string job_label(const World& w) {
  const std::string id = w.run_id.empty() ? "none" : w.run_id;
  return w.agent_store ? fmt::format("'{}'", id) : fmt::format("'{}' ({} ranks)", id, w.size);
}

/// keys[i] for every rank i: "<what>/<i>".
std::vector<std::string> rank_keys(const char* what, int size) {
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(fmt::format("{}/{}", what, r));
  return keys;
}

}  // namespace

void await_ranks(c10d::Store& store, const World& w, double timeout_s) {
  const std::string me = std::to_string(w.rank);
  const auto stopped = [&](const std::string& why) {
    return StoppedDuringRendezvous(fmt::format("{} {} at {}:{}", why, "during the rendezvous", w.master_addr,
                                               w.master_port));
  };
  const auto leave = [&]() {
    const std::string reason = preempt::stop_reason() + " received";
    try {
      store.set("stop/" + me, "1");
    } catch (const std::exception&) {
    }
    return stopped(reason);
  };
  const auto ask = [&](const std::vector<std::string>& keys) {
    try {
      return store.check(keys);
    } catch (const std::exception&) {
      if (preempt::stop_requested()) throw leave();
      throw;
    }
  };
  const double deadline = mono_now() + timeout_s;
  const auto wait_a_little = [&](const std::vector<std::string>& keys, const char* round) {
    if (mono_now() > deadline) {
      std::vector<int> missing;
      for (int r = 0; r < w.size; ++r)
        if (!ask({keys[r]})) missing.push_back(r);
      throw Error(ExitCode::kRuntime,
                  fmt::format("rendezvous at {}:{}: rank(s) {} of {} did not {} within dist.timeout_s={} s",
                              w.master_addr, w.master_port, fmt::join(missing, ", "), w.size, round, timeout_s),
                  "start every rank (torchrun / scripts/dlrun-launch with the same --nnodes, --master-addr and "
                  "--master-port on each host), or raise dist.timeout_s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  };

  store.set("arrived/" + me, fmt::format("{} (pid {})", hostname("?"), getpid()));
  const auto arrived = rank_keys("arrived", w.size);
  while (!ask(arrived)) {
    if (preempt::stop_requested()) throw leave();
    wait_a_little(arrived, "arrive");
  }
  if (preempt::stop_requested()) throw leave();
  store.set("go/" + me, "1");
  const auto go = rank_keys("go", w.size), stop = rank_keys("stop", w.size);
  while (!ask(go)) {
    for (int r = 0; r < w.size; ++r)
      if (ask({stop[r]})) throw stopped(fmt::format("rank {} received a stop request", r));
    wait_a_little(go, "agree to start");
  }
}

void check_job(c10d::Store& tcp, const World& w, bool host, double timeout_s) {
  const std::string mine = job_label(w);
  const std::vector<uint8_t> claim(mine.begin(), mine.end());
  if (host) {
    tcp.set(kJobKey, claim);
    return;
  }
  std::vector<uint8_t> found;
  if (w.agent_store) {
    // torchrun's agent hosts the store (its own keys are there already) and every rank is a
    // client: the first rank of this job to get here claims it, the others find that claim. A
    // store kept by the agent across restarts holds this job's claim already.
    found = tcp.compareSet(kJobKey, {}, claim);
  } else {
    // Rank 0 claims its store before anything of this job is written there, so a store with
    // keys but no claim is another program's, or an older dlrun's. The grace covers a stray
    // client of another job that wrote into this job's store in the instant before the claim.
    constexpr double kGraceS = 1.0;
    const double deadline = mono_now() + timeout_s;
    double keys_since = -1;
    for (;;) {
      if (tcp.check({kJobKey})) {
        found = tcp.get(kJobKey);
        break;
      }
      const int64_t keys = tcp.getNumKeys();
      const double now = mono_now();
      if (keys > 0 && keys_since < 0) keys_since = now;
      if (keys > 0 && now - keys_since > kGraceS)
        throw Error(ExitCode::kBadInput,
                    fmt::format("the rendezvous store at {}:{} is not a dlrun job's (it holds {} key(s), none "
                                "naming a job), but this worker is job {}: another job (another program, or an "
                                "older dlrun) uses this port",
                                w.master_addr, w.master_port, keys, mine),
                    "pick another port with --master-port (MASTER_PORT), the same for every rank, or start a "
                    "single-node job with scripts/dlrun-launch --standalone, which picks a free one");
      if (preempt::stop_requested())
        throw StoppedDuringRendezvous(fmt::format("{} received while waiting for rank 0's claim on the "
                                                  "rendezvous store at {}:{}",
                                                  preempt::stop_reason(), w.master_addr, w.master_port));
      if (now >= deadline)
        throw Error(ExitCode::kRuntime,
                    fmt::format("the rendezvous store at {}:{} named no job within dist.timeout_s={} s (this job's "
                                "rank 0 names it on hosting): another program's store?",
                                w.master_addr, w.master_port, timeout_s),
                    "is MASTER_ADDR:MASTER_PORT rank 0's address? Else pick another port with --master-port "
                    "(MASTER_PORT), or use scripts/dlrun-launch --standalone");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  const std::string theirs(found.begin(), found.end());
  if (theirs != mine)
    throw Error(ExitCode::kBadInput,
                fmt::format("the rendezvous store at {}:{} belongs to job {} but this worker (rank {}) is job {}: "
                            "another job uses this port",
                            w.master_addr, w.master_port, theirs, w.rank, mine),
                "pick another port with --master-port (MASTER_PORT), the same for every rank, or start a "
                "single-node job with scripts/dlrun-launch --standalone, which picks a free one");
}

}  // namespace dlrun::dist
