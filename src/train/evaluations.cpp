// A run's evaluations (see evaluations.h).
#include "train/evaluations.h"

#include <utility>

#include "base/fault.h"
#include "preempt/preempt.h"

namespace dlrun::train {

Evaluations::Evaluations(const Config& cfg, models::Model& model, data::Loader& eval, data::Loader* val,
                         Replicas& replicas, metrics::Reporter& report)
    : cfg_(cfg),
      model_(model),
      eval_(eval),
      val_(val),
      replicas_(replicas),
      report_(report),
      monitor_(cfg.checkpoint, cfg.train) {}

std::optional<EvalResult> Evaluations::pass(data::Loader& loader) {
  fault::during("eval");
  replicas_.sync_buffers(model_);
  auto r = evaluate(model_, loader, [this](torch::Tensor& sums) { replicas_.all_reduce(sums); },
                    [] { return preempt::stop_requested(); });
  if (replicas_.any(!r.complete)) return std::nullopt;
  return r;
}

bool Evaluations::periodic(int64_t step, int64_t epoch) {
  const std::optional<EvalResult> r = pass(val_ ? *val_ : eval_);
  if (!r) return false;
  last_step_ = step;
  last_ = eval_json(*r, step, val_ ? "val" : "eval");
  verdict_ = monitor_.observe(step, last_);
  report_.report(eval_event(last_, epoch, verdict_.best));
  return true;
}

bool Evaluations::test(int64_t step, int64_t epoch) {
  if (!val_ || !cfg_.train.eval_at_end) return true;  // the test split: read here only (and by `dlrun eval`)
  const std::optional<EvalResult> r = pass(eval_);
  if (!r) return false;
  test_ = eval_json(*r, step, "test");
  report_.report(eval_event(test_, epoch, false));
  return true;
}

Monitor::Verdict Evaluations::take_verdict() { return std::exchange(verdict_, Monitor::Verdict{}); }

}  // namespace dlrun::train
