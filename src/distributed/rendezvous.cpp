// The rendezvous of the ranks on the store (see rendezvous.h).
#include "distributed/rendezvous.h"

#include <fmt/ranges.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "distributed/group.h"
#include "preempt/preempt.h"

namespace dlrun::dist {
namespace {

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
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

  store.set("arrived/" + me, fmt::format("{} (pid {})", hostname(), getpid()));
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

}  // namespace dlrun::dist
