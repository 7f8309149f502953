// The training samples that did not decode under data.on_bad_sample: skip (docs/data.md, "A
// damaged image"). The loader replaces each such sample in its batch and names it there
// (data::Batch::bad); the tally takes the names of the batches the steps consumed, merges every
// rank's at the next step boundary, names each new one once (a warning and a "bad_sample" event),
// stops the run past data.max_bad_samples and keeps the count in the run's state
// (TrainState::bad_samples), which checkpoints carry: a resumed run counts exactly what an
// uninterrupted one does, the steps replayed after a kill included once.
#pragma once

#include <vector>

#include "config/options.h"
#include "data/loader.h"
#include "metrics/sink.h"
#include "run/state.h"

namespace dlrun::dist {
class Replicas;
}

namespace dlrun::train {

class BadSampleTally {
 public:
  BadSampleTally(const DataOptions& opts, TrainState& st, metrics::Reporter& report);
  /// A micro-batch handed to a step of this rank.
  void consumed(const data::Batch& b) { pending_.insert(pending_.end(), b.bad.begin(), b.bad.end()); }
  /// This rank holds bad samples not yet merged.
  bool pending() const { return !pending_.empty(); }
  /// Every rank's pending bad samples into the run's state, at the step boundary of `step`. A
  /// collective when distributed: every rank calls it when any rank has some (Replicas::any).
  /// Throws dlrun::Error (exit 2) past data.max_bad_samples distinct samples.
  void merge(dist::Replicas& replicas, int64_t step);

 private:
  const DataOptions& opts_;
  TrainState& st_;
  metrics::Reporter& report_;
  std::vector<data::BadSample> pending_;
};

/// summary.json's "bad_samples": the policy, the reads replaced, the distinct samples with the
/// error naming each (by dataset index) and how often each was read.
nlohmann::json bad_samples_json(const DataOptions& opts, const TrainState& st);

}  // namespace dlrun::train
