// A run's evaluations (see evaluations.h).
#include "train/observe/evaluations.h"

#include <utility>

#include <fmt/format.h>

#include "base/fault.h"
#include "preempt/preempt.h"

namespace dlrun::train {

Evaluations::Evaluations(const Config& cfg, models::Model& model, data::Loader* eval, data::Loader* val,
                         dist::Replicas& replicas, metrics::Reporter& report, std::vector<WeightAverage*> averages)
    : cfg_(cfg),
      model_(model),
      eval_(eval),
      val_(val),
      replicas_(replicas),
      report_(report),
      averages_(std::move(averages)),
      monitor_(cfg.checkpoint, cfg.train) {}

data::Loader& Evaluations::eval_split() {
  DLRUN_CHECK(eval_ != nullptr, ExitCode::kRuntime,
              "an evaluation of the evaluation split, which this run does not read (config::reads_eval_split)");
  return *eval_;
}

std::optional<EvalResult> Evaluations::pass(models::Model& model, data::Loader& loader) {
  fault::during("eval");
  replicas_.sync_buffers(model);
  auto r = evaluate(model, loader, [this](torch::Tensor& sums) { replicas_.all_reduce(sums); },
                    [] { return preempt::stop_requested(); });
  if (replicas_.any(!r.complete)) return std::nullopt;
  return r;
}

nlohmann::json Evaluations::both(data::Loader& loader, int64_t step, const std::string& split) {
  const std::optional<EvalResult> r = pass(model_, loader);
  if (!r) return nullptr;
  nlohmann::json j = eval_json(*r, step, split);
  for (WeightAverage* a : averages_) {
    models::Model* average = a->evaluated_with_weights() ? a->ready() : nullptr;
    if (!average) continue;
    const std::optional<EvalResult> e = pass(*average, loader);
    if (!e) return nullptr;
    j[a->name()] = eval_json(*e, step, split);
  }
  return j;
}

bool Evaluations::periodic(int64_t step, int64_t epoch) {
  nlohmann::json j = both(val_ ? *val_ : eval_split(), step, val_ ? "val" : "eval");
  if (j.is_null()) return false;
  last_step_ = step;
  last_ = std::move(j);
  verdict_ = monitor_.observe(step, last_);
  report_.report(eval_event(last_, epoch, verdict_.best));
  return true;
}

bool Evaluations::test(int64_t step, int64_t epoch) {
  if (!val_ || !cfg_.train.eval_at_end) return true;  // the test split: read here only (and by `dlrun eval`)
  nlohmann::json j = both(eval_split(), step, "test");
  if (j.is_null()) return false;
  test_ = std::move(j);
  report_.report(eval_event(test_, epoch, false));
  return true;
}

bool Evaluations::at_end(int64_t step, int64_t epoch) {
  if (!cfg_.train.eval_at_end) return true;
  const std::string split = val_ ? "val" : "eval";
  for (WeightAverage* a : averages_) {
    models::Model* model = a->evaluated_with_weights() ? nullptr : a->ready();
    if (!model) continue;
    const std::optional<EvalResult> r = pass(*model, val_ ? *val_ : eval_split());
    if (!r) return false;
    const std::string& name = a->name();
    if (last_.is_object()) last_[name] = eval_json(*r, step, split);
    metrics::Event e{name, step};
    e.scalars = {{"accuracy", r->accuracy}, {"top5", r->top5}, {"loss", r->loss}};
    e.fields = {{"epoch", epoch}, {"split", split}, {"samples", r->samples}};
    e.message = fmt::format("{} average on the {} split: accuracy {:.4f}, top-5 {:.4f}, loss {:.4f}", name, split,
                            r->accuracy, r->top5, r->loss);
    report_.report(std::move(e));
  }
  return true;
}

Monitor::Verdict Evaluations::take_verdict() { return std::exchange(verdict_, Monitor::Verdict{}); }

}  // namespace dlrun::train
