// Evaluation: top-1, top-5 and mean loss over a loader, in eval mode without gradients.
#pragma once

#include <torch/torch.h>

#include "data/loader.h"
#include "metrics/sink.h"
#include "models/model.h"

namespace dlrun::train {

struct EvalResult {
  double accuracy = 0;  ///< top-1, in [0, 1]
  double top5 = 0;      ///< top-5 (top-k with k = min(5, classes))
  double loss = 0;      ///< mean cross-entropy (no label smoothing)
  int64_t samples = 0;
  bool complete = true;  ///< false when `stop` ended the pass early (the numbers are partial)
};

/// Evaluate `model` on one pass of `loader` (epoch 0). Restores train mode afterwards.
/// The sums are returned unreduced across ranks when `reduce` is given: it receives the
/// tensor [correct1, correct5, loss_sum, count] (float64) to all-reduce in place. `stop`,
/// when given, is asked before each batch; true ends the pass early (a preemption should not
/// wait for a long evaluation) and the result says it is incomplete.
EvalResult evaluate(models::Model& model, data::Loader& loader,
                    const std::function<void(torch::Tensor&)>& reduce = {},
                    const std::function<bool()>& stop = {});

/// An evaluation as summary.json and the monitor read it: {accuracy, top5, loss, samples, step,
/// split} (`split`: "eval", "val" or "test").
nlohmann::json eval_json(const EvalResult& r, int64_t step, const std::string& split);

/// Its metrics event, named after the split ("eval" when there is no validation split, "val",
/// "test"), with `epoch` and whether it is the best so far (checkpoint.keep_best).
metrics::Event eval_event(const nlohmann::json& result, int64_t epoch, bool best);

}  // namespace dlrun::train
