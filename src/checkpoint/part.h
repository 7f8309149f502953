// A checkpoint part: one piece of a live run's state that a checkpoint carries (the model, the
// optimizers, the loss scaler, every rank's RNG, the train state, the loader's position, and
// later averaged weights). A snapshot is the parts saved one after another; a resume checks
// every part, then loads every part. New checkpointed state is a new part, never a new
// parameter of a snapshot function (docs/design.md, "House rules").
#pragma once

#include <memory>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace dlrun::ckpt {

class Part {
 public:
  virtual ~Part() = default;
  /// What every rank does before the leader takes a snapshot, at the same point on every
  /// rank (a collective: rank 0's buffers on every rank, every rank's RNG to rank 0).
  virtual void gather() {}
  /// Copy this part's state into `snap`: tensor files (host copies the snapshot owns) and
  /// state.json keys. Runs on the leader only, at a step boundary.
  virtual void save(Snapshot& snap) = 0;
  /// Before anything is loaded: refuse (dlrun::Error, exit 2) a checkpoint this part cannot
  /// continue from under the config, naming the difference; warn about changes that alter
  /// results.
  virtual void check(const Snapshot& snap) { (void)snap; }
  /// Load this part's state from `snap` (every rank, after every part's check passed).
  virtual void load(const Snapshot& snap) = 0;
};

/// The tensor file `stem` of `snap`; exit 2 naming "<stem>.pt" when the checkpoint has none.
const TensorDict& tensor_file(const Snapshot& snap, const std::string& stem);

}  // namespace dlrun::ckpt
