// Evaluation loop (see evaluate.h).
#include "train/observe/evaluate.h"

namespace dlrun::train {

EvalResult evaluate(models::Model& model, data::Loader& loader, const std::function<void(torch::Tensor&)>& reduce,
                    const std::function<bool()>& stop) {
  const bool was_training = model.is_training();
  model.eval();
  torch::NoGradGuard no_grad;
  // Sums kept on the device as [correct1, correct5, loss_sum, count] and read back once.
  torch::Tensor sums;
  const bool complete = data::each_batch(loader, stop, [&](const data::Batch& b) {
    auto logits = model.forward(b.x).to(model.dtype());  // (b, classes), float32 under autocast too
    auto y = b.y.to(logits.device());
    // A label of -1 is a sample that did not decode, left out (data.on_bad_sample: skip): no
    // class matches it, cross_entropy ignores it and it is not counted.
    auto loss_sum = torch::nn::functional::cross_entropy(
        logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(-1));
    const int64_t k = std::min<int64_t>(5, logits.size(1));
    auto topk = std::get<1>(logits.topk(k, 1));  // (b, k)
    auto hit = topk.eq(y.unsqueeze(1));           // (b, k)
    auto batch = torch::stack({hit.select(1, 0).sum().to(torch::kFloat64), hit.any(1).sum().to(torch::kFloat64),
                               loss_sum.to(torch::kFloat64),
                               b.bad.empty() ? torch::full({}, static_cast<double>(y.size(0)),
                                                           hit.options().dtype(torch::kFloat64))
                                             : y.ge(0).sum().to(torch::kFloat64)});
    sums = sums.defined() ? sums + batch : batch;
  });
  auto t = sums.defined() ? sums.to(torch::kCPU) : torch::zeros({4}, torch::kFloat64);
  if (reduce) reduce(t);
  const double c1 = t[0].item<double>(), c5 = t[1].item<double>(), loss_sum = t[2].item<double>(),
               count = t[3].item<double>();
  if (was_training) model.train();
  EvalResult r;
  r.complete = complete;
  r.samples = static_cast<int64_t>(count);
  if (count > 0) {
    r.accuracy = c1 / count;
    r.top5 = c5 / count;
    r.loss = loss_sum / count;
  }
  return r;
}

nlohmann::json eval_json(const EvalResult& r, int64_t step, const std::string& split) {
  return {{"accuracy", r.accuracy}, {"top5", r.top5}, {"loss", r.loss}, {"samples", r.samples}, {"step", step},
          {"split", split}};
}

metrics::Event eval_event(const nlohmann::json& result, int64_t epoch, bool best) {
  const std::string split = result.at("split").get<std::string>();
  const int64_t step = result.at("step").get<int64_t>();
  const double acc = result.at("accuracy").get<double>(), top5 = result.at("top5").get<double>(),
               loss = result.at("loss").get<double>();
  metrics::Event e{split, step};
  e.scalars = {{"accuracy", acc}, {"top5", top5}, {"loss", loss}};
  e.fields = {{"epoch", epoch}, {"samples", result.at("samples")}};
  if (split != "test") e.fields["best"] = best;
  e.message = fmt::format("{} at step {} (epoch {}): accuracy {:.4f}, top-5 {:.4f}, loss {:.4f}{}", split, step, epoch,
                          acc, top5, loss, best ? " (best so far)" : "");
  if (const auto ema = result.find("ema"); ema != result.end() && ema->is_object()) {  // the moving average's
    const double ema_acc = ema->at("accuracy").get<double>(), ema_loss = ema->at("loss").get<double>();
    e.scalars.push_back({"ema_accuracy", ema_acc});
    e.scalars.push_back({"ema_top5", ema->at("top5").get<double>()});
    e.scalars.push_back({"ema_loss", ema_loss});
    e.message += fmt::format("; EMA accuracy {:.4f}, loss {:.4f}", ema_acc, ema_loss);
  }
  return e;
}

}  // namespace dlrun::train
