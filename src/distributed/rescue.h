// The survivors' rescue after a lost peer (docs/design.md, "A peer lost without notice"): every
// surviving rank holds the whole model, optimizer and data position of the last step it
// completed, so the checkpoint a lost host would have cost exists in their memory and only has
// to be written. The survivors agree on which step to write and which of them writes it:
//
//   1. Each says what it can save (a RescueReport): the last step it completed -- or, when it
//      was inside a step whose collective the loss ended, the step before, whose state it kept
//      (a collective that died half-way may have finished on some ranks and not on others, so
//      the survivors may stand one step apart) -- and whether that state is exact (what an
//      uninterrupted checkpoint would hold: rank 0's BatchNorm statistics among it).
//   2. The first survivor to decide writes the decision (compare-and-set: one decision, read by
//      all): the latest step an exact report offers when it is the latest or one before it,
//      else the latest; its writer is the lowest rank that offers it.
//   3. The writer commits the checkpoint (and uploads it with checkpoint.remote) and says so;
//      every survivor then exits 75, or 1 when the writer could not commit.
//
// Every store call has a deadline of dist.peer_timeout_s's scale (deadline.h), never
// dist.timeout_s: a frozen rank 0 (SIGSTOP, a hung host) leaves a store that accepts connections
// and never answers, and the survivors treat it as gone.
//
// They meet in the rendezvous store while it answers. When it is gone with rank 0's host, the
// survivors meet in a store of their own: rank 1 and the first rank of every other host each
// open one at their address and MASTER_PORT + 1, and every survivor uses the first of those, in
// rank order, that answers. When every rank reports, no peer is lost: the failure was another
// one, and the run fails as it would have (exit 1).
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "distributed/group.h"

namespace c10d {
class Store;
}

namespace dlrun::dist {

/// What one survivor can save.
struct RescueReport {
  int rank = 0;
  int64_t step = 0;    ///< the step whose state it holds
  bool exact = false;  ///< that state is what an uninterrupted checkpoint of the step would hold
};

/// What the survivors agreed.
struct RescueDecision {
  bool lost = true;            ///< false: every rank reported, no peer is gone
  int64_t step = -1;           ///< the step to write
  int writer = -1;             ///< the rank that writes it
  bool exact = false;          ///< the writer's state of that step is exact
  std::vector<int> survivors;  ///< the ranks that reported, in order
};

/// The decision over `reports` (of a world of `world_size`): above, step 2. Pure.
RescueDecision decide(const std::vector<RescueReport>& reports, int world_size);

/// RescueDecision as text and back (what the store holds).
std::string to_text(const RescueDecision& d);
RescueDecision decision_from(const std::string& text);

class Rescue {
 public:
  /// For `group`, which has lost a peer (Group::lost()).
  explicit Rescue(Group& group);
  ~Rescue();
  Rescue(const Rescue&) = delete;
  Rescue& operator=(const Rescue&) = delete;

  /// Steps 1 and 2: report `mine`, wait for the other survivors (as long as their heartbeats
  /// say they are there, or a few seconds in a store of the survivors' own), and return the
  /// decision. Throws dlrun::Error (exit 1) when no store answers.
  RescueDecision agree(const RescueReport& mine);
  /// Step 3, the writer: say whether the checkpoint is committed (`failure` empty) or why not;
  /// then wait (bounded) until the other survivors have read it, when this rank hosts the store
  /// they meet in.
  void committed(const std::string& failure);
  /// Step 3, the others: wait for the writer's word; "" when committed, else why not.
  std::string await_committed();

 private:
  /// agree()'s wait for the other reports in `store` and the decision.
  RescueDecision agree_in(const c10::intrusive_ptr<c10d::Store>& store, double peer_s, double op_s);
  /// After the outcome: count this rank out; the host of the survivors' store waits for all.
  void linger() noexcept;
  struct State;
  Group::Impl& group_;
  std::unique_ptr<State> s_;
};

}  // namespace dlrun::dist
