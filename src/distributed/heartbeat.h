// The ranks' heartbeat, and the watch over it that notices a lost peer in seconds: every rank
// adds 1 to "alive/<rank>" in the rendezvous store every kBeatS on a connection of its own, and
// (with dist.peer_timeout_s) watches the next rank's counter, ring-wise. A counter that does not
// move for peer_timeout_s -- a host taken away without a word sends no FIN and writes no error
// of its own -- is a loss; so is a store that does not answer for as long (rank 0's process or
// host is gone). The rank that sees it records it in the store ("lost"), where every other
// rank's watch reads it at its next beat, so the whole job learns of a loss within a beat or two
// of the first rank, whatever dist.timeout_s is. The process group (group.cpp) starts it once
// every rank has arrived, and ends its collectives on a loss (docs/distributed.md, "When a host
// is lost").
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "world/world.h"

namespace c10d {
class Store;
}

namespace dlrun::dist {

/// What a watch found: the peers gone (when known), whether the store is gone, and why, for a
/// person ("rank 1 on host-b went silent ...").
struct Loss {
  std::vector<int> ranks;
  bool store_gone = false;
  std::string why;
};

class Heartbeat {
 public:
  /// A fresh connection to the job's keys in the rendezvous store, giving up after `timeout_s`.
  /// It must hold nothing of its caller's: the beat thread may outlive the Heartbeat (stop()).
  using Connect = std::function<c10::intrusive_ptr<c10d::Store>(double timeout_s)>;
  /// Told of the first loss, once, on the heartbeat's monitor thread (joined by stop()).
  using OnLoss = std::function<void(const Loss&)>;
  static constexpr double kBeatS = 1.0;

  Heartbeat(World world, Connect connect);
  ~Heartbeat();  ///< stops
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  /// Beats from now on, on a thread of its own (a store that is gone or slow: tried again at the
  /// next beat). With `peer_timeout_s` > 0 the thread also watches (above) and calls `on_loss`.
  void start(double peer_timeout_s = 0, OnLoss on_loss = {});
  /// Stops beating (at once: the thread does not finish a beat's wait). A beat stuck on a store
  /// that vanished without closing its connection is left behind after 2 beats, not joined.
  void stop();
  /// The peers whose beat stopped, watched for 3 beats, with the host each arrived from: "rank
  /// 1 on host-b went silent (...)"; or that the store itself does not answer (rank 0's process
  /// or host is gone); "" when every peer beats. Never throws.
  std::string silent() const noexcept;
  /// Which of `ranks` beat within the next `seconds` (their counters moved), through `store`;
  /// the others are silent. For the rescue (rescue.h), which must tell the survivors.
  static std::vector<int> beating(c10d::Store& store, const std::vector<int>& ranks, double seconds);

 struct State;  ///< (heartbeat.cpp)

 private:
  std::shared_ptr<State> s_;
};

}  // namespace dlrun::dist
