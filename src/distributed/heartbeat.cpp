// The ranks' heartbeat in the rendezvous store (see heartbeat.h).
#include "distributed/heartbeat.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace dlrun::dist {

struct Heartbeat::State {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;
};

Heartbeat::Heartbeat(World world, Connect connect)
    : world_(std::move(world)), connect_(std::move(connect)), s_(std::make_unique<State>()) {}

Heartbeat::~Heartbeat() { stop(); }

void Heartbeat::start() {
  s_->thread = std::thread([this] {
    c10::intrusive_ptr<c10d::Store> s;
    std::unique_lock<std::mutex> lock(s_->mu);
    while (!s_->stop) {
      lock.unlock();
      try {
        if (!s) s = connect_(kBeatS * 2);
        s->add(fmt::format("alive/{}", world_.rank), 1);
      } catch (const std::exception&) {
        s.reset();  // the store is gone or slow: try again at the next beat
      }
      lock.lock();
      s_->cv.wait_for(lock, std::chrono::duration<double>(kBeatS), [this] { return s_->stop; });
    }
  });
}

void Heartbeat::stop() {
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->stop = true;
  }
  s_->cv.notify_all();
  if (s_->thread.joinable()) s_->thread.join();
}

std::string Heartbeat::silent() const noexcept {
  if (world_.size < 2) return "";
  try {
    const auto s = connect_(2.0);
    std::vector<std::string> keys;
    std::vector<int> others;
    for (int r = 0; r < world_.size; ++r)
      if (r != world_.rank) {
        keys.push_back(fmt::format("alive/{}", r));
        others.push_back(r);
      }
    const auto count = [&] {
      std::vector<int64_t> out;
      for (const auto& k : keys) out.push_back(s->add(k, 0));
      return out;
    };
    const auto before = count();
    std::this_thread::sleep_for(std::chrono::duration<double>(3 * kBeatS));
    const auto after = count();
    std::vector<std::string> gone;
    for (size_t i = 0; i < others.size(); ++i) {
      if (after[i] != before[i]) continue;
      std::string where;
      try {
        const auto v = s->get(fmt::format("arrived/{}", others[i]));
        where = " on " + std::string(v.begin(), v.end());
      } catch (const std::exception&) {
      }
      gone.push_back(fmt::format("rank {}{}", others[i], where));
    }
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
