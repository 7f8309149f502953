// Evaluation loop (see evaluate.h).
#include "train/evaluate.h"

namespace dlrun::train {

EvalResult evaluate(models::Model& model, data::Loader& loader, const std::function<void(torch::Tensor&)>& reduce,
                    const std::function<bool()>& stop) {
  const bool was_training = model.is_training();
  model.eval();
  torch::NoGradGuard no_grad;
  // Sums kept on the device as [correct1, correct5, loss_sum, count] and read back once.
  torch::Tensor sums;
  loader.start_epoch(0, 0);
  bool complete = true;
  while (true) {
    if (stop && stop()) {
      complete = false;
      break;
    }
    auto b = loader.next();
    if (!b) break;
    auto logits = model.forward(b->x).to(model.dtype());  // (b, classes), float32 under autocast too
    auto y = b->y.to(logits.device());
    auto loss_sum = torch::nn::functional::cross_entropy(
        logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    const int64_t k = std::min<int64_t>(5, logits.size(1));
    auto topk = std::get<1>(logits.topk(k, 1));  // (b, k)
    auto hit = topk.eq(y.unsqueeze(1));           // (b, k)
    auto batch = torch::stack({hit.select(1, 0).sum().to(torch::kFloat64), hit.any(1).sum().to(torch::kFloat64),
                               loss_sum.to(torch::kFloat64),
                               torch::full({}, static_cast<double>(y.size(0)), hit.options().dtype(torch::kFloat64))});
    sums = sums.defined() ? sums + batch : batch;
  }
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

}  // namespace dlrun::train
