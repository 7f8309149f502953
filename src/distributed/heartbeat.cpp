// The ranks' heartbeat in the rendezvous store, and the watch over it (see heartbeat.h).
#include "distributed/heartbeat.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "base/clock.h"

namespace dlrun::dist {

// What the threads share. The beat thread holds it too: a store call to a host that vanished
// (no FIN, no RST) blocks in recv() with no timeout of its own, so stop() may have to leave that
// thread behind, and it must then touch nothing but this.
struct Heartbeat::State {
  World world;
  Connect connect;  ///< owns nothing of the caller's (see Group::Impl::start_heartbeat)
  double peer_timeout_s = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool beat_done = false;          ///< the beat thread has returned
  double answered = 0;             ///< when the store last answered the beat (mono_now)
  std::optional<Loss> found;       ///< what the beat thread saw, for the monitor to report
  bool reported = false;           ///< the one loss was reported (or the silent peer left on its own)
  std::thread beat, monitor;
};

namespace {

std::string text_of(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

/// "rank 3 on host-b", with the host the rank arrived from when the store says (arrived/<rank>).
std::string rank_on_host(c10d::Store& s, int rank) {
  try {
    return fmt::format("rank {} on {}", rank, text_of(s.get(fmt::format("arrived/{}", rank))));
  } catch (const std::exception&) {
    return fmt::format("rank {}", rank);
  }
}

/// The beat thread: one beat a second -- this rank's counter, and with a watch the next rank's
/// counter and the job's "lost" key. What it finds goes to State::found; the monitor reports it.
/// The beat goes on after a loss (the survivors' rescue reads the counters to tell who is still
/// there). A store that is gone or slow is tried again at the next beat.
void beat(const std::shared_ptr<Heartbeat::State>& st) {
  const World& w = st->world;
  const bool watch = st->peer_timeout_s > 0 && w.size > 1;
  const int next = (w.rank + 1) % std::max(1, w.size);
  const std::string mine = fmt::format("alive/{}", w.rank), theirs = fmt::format("alive/{}", next);
  c10::intrusive_ptr<c10d::Store> s;
  int64_t seen = -1;
  double moved = mono_now();
  bool done = false;  // this thread's watch has found what it reports
  auto stopped = [&] {
    std::lock_guard<std::mutex> lock(st->mu);
    return st->stop;
  };
  auto find = [&](std::optional<Loss> loss) {
    std::lock_guard<std::mutex> lock(st->mu);
    done = true;
    if (!st->found && !st->reported) {
      if (loss) st->found = std::move(loss);
      else st->reported = true;  // the peer left on its own: nothing to report
    }
    st->cv.notify_all();
  };
  while (!stopped()) {
    const double now = mono_now();
    try {
      if (!s) {
        {
          std::lock_guard<std::mutex> lock(st->mu);
          if (st->found && st->found->store_gone) return;  // it will not come back: nothing more to beat on
        }
        s = st->connect(Heartbeat::kBeatS * 2);
      }
      s->add(mine, 1);
      {
        std::lock_guard<std::mutex> lock(st->mu);
        st->answered = mono_now();
      }
      if (watch && !done) {
        if (s->check({"lost"})) {  // another rank's watch saw it first
          find(Loss{{}, false, text_of(s->get("lost"))});
        } else {
          const int64_t count = s->add(theirs, 0);
          if (count != seen) seen = count, moved = now;
          if (now - moved > st->peer_timeout_s && (s->check({"failed"}) || s->check({"left/" + std::to_string(next)}))) {
            find(std::nullopt);  // it left, cleanly or with an error of its own: nothing to save from
          } else if (now - moved > st->peer_timeout_s) {
            Loss loss{{next}, false,
                      fmt::format("{} went silent (no heartbeat for {:.0f} s, dist.peer_timeout_s): its process or its "
                                  "host is gone",
                                  rank_on_host(*s, next), now - moved)};
            try {
              s->set("lost", loss.why);  // for the others' watches
            } catch (const std::exception&) {
            }
            find(std::move(loss));
          }
        }
      }
    } catch (const std::exception&) {
      s.reset();  // (the monitor tells a store gone for peer_timeout_s)
    }
    std::unique_lock<std::mutex> lock(st->mu);
    st->cv.wait_for(lock, std::chrono::duration<double>(Heartbeat::kBeatS), [&] { return st->stop; });
  }
}

}  // namespace

Heartbeat::Heartbeat(World world, Connect connect) : s_(std::make_shared<State>()) {
  s_->world = std::move(world);
  s_->connect = std::move(connect);
}

Heartbeat::~Heartbeat() { stop(); }

// The monitor, on this object's own thread (joined by stop()), is the one that calls `on_loss`:
// what the beat thread found, or a store that has not answered a beat for peer_timeout_s -- the
// beat thread may be the one stuck waiting for it.
void Heartbeat::start(double peer_timeout_s, OnLoss on_loss) {
  s_->peer_timeout_s = on_loss ? peer_timeout_s : 0;
  s_->answered = mono_now();
  s_->beat = std::thread([st = s_] {
    beat(st);
    std::lock_guard<std::mutex> lock(st->mu);
    st->beat_done = true;
    st->cv.notify_all();
  });
  if (s_->peer_timeout_s <= 0 || s_->world.size < 2) return;
  s_->monitor = std::thread([st = s_.get(), on_loss = std::move(on_loss)] {
    std::unique_lock<std::mutex> lock(st->mu);
    while (!st->stop && !st->reported) {
      st->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return st->stop || st->found.has_value(); });
      if (st->stop || st->reported) break;
      const double quiet = mono_now() - st->answered;
      if (!st->found && quiet > st->peer_timeout_s)
        st->found = Loss{{}, true,
                         fmt::format("the rendezvous store at {}:{} has not answered for {:.0f} s (dist.peer_timeout_s): "
                                     "rank 0's process or its host is gone",
                                     st->world.master_addr, st->world.master_port, quiet)};
      if (!st->found) continue;
      st->reported = true;
      const Loss loss = *st->found;
      lock.unlock();
      on_loss(loss);
      lock.lock();
    }
  });
}

void Heartbeat::stop() {
  std::unique_lock<std::mutex> lock(s_->mu);
  s_->stop = true;
  s_->cv.notify_all();
  lock.unlock();
  if (s_->monitor.joinable()) s_->monitor.join();
  if (!s_->beat.joinable()) return;
  // A beat waiting on a store that vanished would wait for ever: it is left behind (it holds
  // only the shared state, and returns once the call does).
  lock.lock();
  const bool ended = s_->cv.wait_for(lock, std::chrono::duration<double>(2 * kBeatS), [this] { return s_->beat_done; });
  lock.unlock();
  if (ended) s_->beat.join();
  else s_->beat.detach();
}

std::vector<int> Heartbeat::beating(c10d::Store& store, const std::vector<int>& ranks, double seconds) {
  auto count = [&](int r) { return store.add(fmt::format("alive/{}", r), 0); };
  std::vector<int64_t> before;
  for (int r : ranks) before.push_back(count(r));
  std::vector<bool> moved(ranks.size(), false);
  const double until = mono_now() + seconds;
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (!moved[i]) moved[i] = count(ranks[i]) != before[i];
      all = all && moved[i];
    }
    if (all || mono_now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::vector<int> out;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (moved[i]) out.push_back(ranks[i]);
  return out;
}

std::string Heartbeat::silent() const noexcept {
  const World& world_ = s_->world;
  if (world_.size < 2) return "";
  try {
    const auto s = s_->connect(2.0);
    std::vector<int> others;
    for (int r = 0; r < world_.size; ++r)
      if (r != world_.rank) others.push_back(r);
    const std::vector<int> alive = beating(*s, others, 3 * kBeatS);
    std::vector<std::string> gone;
    for (int r : others)
      if (std::find(alive.begin(), alive.end(), r) == alive.end()) gone.push_back(rank_on_host(*s, r));
    if (gone.empty()) return "";
    return fmt::format("{} went silent (no heartbeat for {:.0f} s): its process or its host is gone",
                       fmt::join(gone, ", "), 3 * kBeatS);
  } catch (const std::exception&) {
    if (world_.rank == 0 && !world_.agent_store) return "";
    return fmt::format("the rendezvous store at {}:{} does not answer: rank 0's process or host is gone",
                       world_.master_addr, world_.master_port);
  }
}

}  // namespace dlrun::dist
