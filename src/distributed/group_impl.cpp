// Group::Impl (group_impl.h): the heartbeat and its watch, a loss and what it ends, the one wait
// every collective goes through, and how the process group is closed. No gloo or NCCL header:
// group.cpp alone opens the backends.
#include "distributed/group_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>

#include "base/error.h"
#include "base/log.h"
#include "distributed/deadline.h"

namespace dlrun::dist {

Group::Impl::~Impl() { stop_heartbeat(); }

namespace {

c10::intrusive_ptr<c10d::Store> connect_store(const World& world, const std::string& prefix, double timeout_s) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(world.master_port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  return c10::make_intrusive<c10d::PrefixStore>(prefix, c10::make_intrusive<c10d::TCPStore>(world.master_addr, o));
}

}  // namespace

c10::intrusive_ptr<c10d::Store> Group::Impl::connect_again(double timeout_s) const {
  return connect_store(world, prefix, timeout_s);
}

void Group::Impl::start_heartbeat() {
  // (copies: the beat thread may outlive this group, stuck on a store that vanished)
  heartbeat = std::make_unique<Heartbeat>(
      world, [w = world, p = prefix](double timeout_s) { return connect_store(w, p, timeout_s); });
  heartbeat->start(peer_timeout_s, [this](const Loss& l) { lose(l); });
}

void Group::Impl::stop_heartbeat() {
  if (heartbeat) heartbeat->stop();
}

void Group::Impl::lose(const Loss& l) noexcept {
  std::vector<std::function<void(const Loss&)>> tell;
  {
    std::lock_guard<std::mutex> lock(loss_mu);
    if (loss) return;
    loss = l;
    lost = true;
    tell = on_loss;
  }
  failed = true;
  log::error("distributed: {}; the survivors save what they hold", l.why);
  // NCCL: the kernels of a collective a lost peer never joins spin on the GPU, and every later
  // copy to the host would wait behind them. Aborting the communicators ends them (what c10d's
  // watchdog would do after dist.timeout_s by tearing the process down, the state with it).
  if (backend == "nccl" && pg) {
    try {
      pg->abort();
    } catch (const std::exception& e) {
      log::warn("distributed: aborting NCCL's communicators after the loss: {}", brief(e));
    }
  }
  for (auto& f : tell) {
    try {
      f(l);
    } catch (...) {
    }
  }
}

std::string Group::Impl::loss_text() const {
  std::lock_guard<std::mutex> lock(loss_mu);
  return loss ? loss->why : std::string();
}

void Group::Impl::wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  // In slices, so that a loss the watch sees while this waits ends the wait: the work itself
  // goes on waiting in the backend (gloo cannot cancel it) and is let go.
  // NCCL's wait() only orders the current CUDA stream after the collective and returns: the host
  // learns of a loss at GradSync::settle(), and the loss aborts the communicators (lose()).
  const bool slices = peer_timeout_s > 0 && backend != "nccl";
  for (;;) {
    if (lost) throw PeerLost(fmt::format("{} was ended by a lost peer: {}", what, loss_text()));
    try {
      work->wait(std::chrono::milliseconds(slices ? 100 : 0));
      return;
    } catch (const std::exception& e) {
      if (slices && !work->isCompleted()) continue;  // the slice ended, not the work
      fail(what, e);
    }
  }
}

std::string Group::Impl::peer_failure() const noexcept {
  try {  // a fresh connection (the main one may be the one stuck until dist.timeout_s), with a
         // deadline: a frozen rank 0's store accepts it and never answers (deadline.h)
    return within(std::max(2.0, peer_timeout_s), "the rendezvous store", [this] {
      const auto s = connect_again(2.0);
      if (!s->check({"failed"})) return std::string();
      const auto v = s->get("failed");
      return std::string(v.begin(), v.end());
    });
  } catch (const std::exception&) {
    return "";
  }
}

[[noreturn]] void Group::Impl::fail(const char* what, const std::exception& e) {
  failed = true;
  // A rank that failed on its own says so in the store (report_failure): its error is the run's
  // (exit 1), not a loss to save from -- the restarted run would meet it again.
  std::string who = peer_failure();
  if (who.empty() && peer_timeout_s > 0) {  // a peer's connection closed, or a timeout: a loss
    lose({{}, false, fmt::format("{} across {} ranks failed: {}", what, world.size, brief(e))});
    throw PeerLost(fmt::format("{} failed: {}", what, loss_text()));
  }
  if (who.empty() && world.rank != 0) {
    try {
      (void)connect_again(2.0);
    } catch (const std::exception&) {
      who = "rank 0, which hosts the rendezvous store, is gone";
    }
  }
  if (who.empty()) who = silent();  // a peer lost without a word: name it
  throw Error(ExitCode::kRuntime,
              fmt::format("{} across {} ranks failed{}: {}", what, world.size, who.empty() ? "" : " (" + who + ")",
                          brief(e)),
              "another rank failed or was killed (its own error is above, or in its log); dist.timeout_s bounds "
              "how long a rank waits for the others");
}

void Group::Impl::close(bool abort) noexcept {
  stop_heartbeat();
  if (!pg) return;
  try {
    abort ? pg->abort() : pg->shutdown();
    log::info("distributed: {} process group {}", backend,
              abort ? "aborted (this rank or a peer failed)" : "shut down");
  } catch (const std::exception& e) {
    log::warn("distributed: closing the {} process group: {}", backend, brief(e));
  }
  if (lost) {
    (void)pg.release();  // (its threads wait on the lost peer: destroying it would join them)
    return;
  }
  pg.reset();
}

std::string Group::Impl::silent() const noexcept {
  if (heartbeat) return heartbeat->silent();
  return Heartbeat(world, [this](double timeout_s) { return connect_again(timeout_s); }).silent();
}

}  // namespace dlrun::dist
