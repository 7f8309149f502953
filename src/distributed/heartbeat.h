// The ranks' heartbeat: every rank adds 1 to "alive/<rank>" in the rendezvous store every
// kBeatS on a connection of its own, so that after a failure a rank can name the peers that went
// silent -- a host taken away without a word sends no FIN and writes no error of its own in the
// store (docs/distributed.md, "When a host is lost"). The process group (group.cpp) starts it
// once every rank has arrived and stops it when it closes.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <functional>
#include <memory>
#include <string>

#include "world/world.h"

namespace c10d {
class Store;
}

namespace dlrun::dist {

class Heartbeat {
 public:
  /// A fresh connection to the job's keys in the rendezvous store, giving up after `timeout_s`.
  using Connect = std::function<c10::intrusive_ptr<c10d::Store>(double timeout_s)>;
  static constexpr double kBeatS = 1.0;

  Heartbeat(World world, Connect connect);
  ~Heartbeat();  ///< stops
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  /// Beats from now on, on a thread of its own (a store that is gone or slow: tried again at the
  /// next beat).
  void start();
  /// Stops beating (at once: the thread does not finish a beat's wait).
  void stop();
  /// The peers whose beat stopped, watched for 3 beats, with the host each arrived from: "rank
  /// 1 on host-b went silent (...)"; or that the store itself does not answer (rank 0's process
  /// or host is gone); "" when every peer beats. Never throws.
  std::string silent() const noexcept;

 private:
  struct State;
  World world_;
  Connect connect_;
  std::unique_ptr<State> s_;
};

}  // namespace dlrun::dist
