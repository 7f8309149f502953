// What dist::Group holds, for the files of src/distributed/ that work with it (group.cpp,
// grad_sync.cpp, rescue.cpp): the store, the process group, the heartbeat and its watch, and
// the one wait every collective goes through, so that a lost peer ends it (dist.peer_timeout_s).
// No gloo or NCCL header here: only group.cpp opens the backends.
#pragma once

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "distributed/group.h"
#include "distributed/heartbeat.h"

namespace dlrun::dist {

/// An exception's message in one line, for logs and errors: c10's without its C++ backtrace (a
/// store that went away raises errors of 30-110 lines of frames), anything after the first line
/// left out. A person needs what happened, not where in c10d.
inline std::string brief(const std::exception& e) {
  const auto* c10 = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10 != nullptr ? c10->what_without_backtrace() : e.what();
  const auto raised = text.find("Exception raised from");
  if (raised != std::string::npos) text.resize(raised);
  const auto nl = text.find('\n');
  if (nl != std::string::npos) text.resize(nl);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n')) text.pop_back();
  return text;
}

struct Group::Impl {
  World world;
  std::string backend;
  std::string nccl_version;
  torch::Device device = torch::kCPU;  ///< where the backend's tensors live
  std::chrono::milliseconds timeout{0};
  double peer_timeout_s = 0;              ///< dist.peer_timeout_s (0: no watch)
  c10::intrusive_ptr<c10d::Store> store;  ///< dlrun's keys, under "dlrun/<run id>/<restart>/"
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  bool cpu_collectives = false;  ///< a CPU backend is registered too (gloo; beside NCCL for host tensors)
  std::string prefix;            ///< the job's keys in the store
  std::unique_ptr<Heartbeat> heartbeat;  ///< from when every rank has arrived (heartbeat.h)
  /// Where the survivors may meet when the store is gone (rescue.h): rank 1 and the first rank
  /// of every other host, in rank order, with the address each reaches rank 0 from.
  std::vector<std::pair<int, std::string>> rescue_hosts;

  /// Set by a failed collective and by report_failure: the group is closed by abort().
  std::atomic<bool> failed{false};

  // ---- a lost peer ----
  mutable std::mutex loss_mu;
  std::optional<Loss> loss;  ///< the first loss this rank learned of
  std::atomic<bool> lost{false};
  /// Called once on a loss (GradSync's pending gradient averages end with it).
  std::vector<std::function<void(const Loss&)>> on_loss;

  /// Record a loss (the first one wins) and end what waits on the group. Never throws.
  void lose(const Loss& l) noexcept;
  /// The loss, for a person.
  std::string loss_text() const;

  /// Wait for `work`, a collective of this group, ending early (PeerLost) when a peer is lost;
  /// its own failure (a peer's connection closed, dist.timeout_s) is a loss too when the watch
  /// is on, else a dlrun::Error naming `what`.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what);
  /// The failure of a collective `what`: with the watch on, a loss (PeerLost); else
  /// dlrun::Error (exit 1) naming a rank that reported its own failure, or the silent ones.
  [[noreturn]] void fail(const char* what, const std::exception& e);

  /// What a rank that failed on its own recorded (report_failure), or "". Never throws.
  std::string peer_failure() const noexcept;
  c10::intrusive_ptr<c10d::Store> connect_again(double timeout_s) const;
  void start_heartbeat();
  void stop_heartbeat();
  ~Impl();  // also when connect() fails after the heartbeat started

  /// Close the process group however the process leaves: shutdown() after a clean run (as
  /// destroy_process_group: NCCL's communicators finalised, its watchdog stopped), abort() after
  /// a failure here or in a peer -- a shutdown would wait on a collective a dead peer left
  /// pending, and the exit would hang. After a lost peer the group is let go without being
  /// destroyed: gloo's threads still wait on the lost peer until dist.timeout_s, and destroying
  /// it would join them. (No-ops for gloo but the abort.)
  void close(bool abort) noexcept;
  /// Group::silent_ranks().
  std::string silent() const noexcept;
  /// `t` on a device the group has a backend for: itself, or a copy on the default backend's.
  torch::Tensor on_backend(const torch::Tensor& t) const {
    return t.device() == device || (cpu_collectives && t.is_cpu()) ? t : t.to(device);
  }
};

}  // namespace dlrun::dist
