// Out-of-memory recovery by finer micro-batches (see micro_batch.h).
#include "train/step/micro_batch.h"

#include <fmt/ranges.h>

#include <limits>
#include <string>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "checkpoint/rng.h"
#include "train/step/memory.h"

namespace dlrun::train {

torch::Tensor MicroBatchSplit::fit(const std::vector<data::Batch>& micro, int64_t step, models::Model& model,
                                   torch::optim::Optimizer& optim, const torch::Device& device, const Attempt& attempt,
                                   const std::function<bool(bool)>& any_rank) {
  // What a failed attempt changes besides the gradients, put back before the redo: the
  // BatchNorm buffers its forward updated and the RNG its dropout drew from.
  std::vector<torch::Tensor> buffers, kept;
  for (const auto& t : model.buffers()) buffers.push_back(t), kept.push_back(t.detach().clone());
  const auto rng = ckpt::rng_states(device);
  int64_t smallest = std::numeric_limits<int64_t>::max();
  for (const auto& b : micro) smallest = std::min(smallest, b.x.size(0));
  split_ = std::min(split_, std::max<int64_t>(smallest, 1));
  std::vector<int64_t> tried;
  double first_error = 0;
  for (int n = 0;; ++n) {
    torch::Tensor loss_sum;
    bool oom = false;
    std::string what;
    try {
      loss_sum = attempt(n);
    } catch (const c10::Error& e) {
      if (!is_out_of_memory(e)) throw;
      if (tried.empty()) first_error = mono_now();
      oom = true;
      what = e.what_without_backtrace();
      what = what.substr(0, what.find('\n'));
    }
    // Every rank learns whether any ran out: then all cut further (the finest split any needed).
    oom = any_rank(oom);
    if (!oom) {
      if (!tried.empty())
        log0::info("train.micro_batch: step {} fits with each micro-batch split into {} ({:.2f} s from the "
                   "out-of-memory error to the end of its backward); the split is kept",
                   step, split_, mono_now() - first_error);
      return loss_sum;
    }
    if (tried.empty() && first_error == 0) first_error = mono_now();  // another rank's error
    tried.push_back(split_);
    loss_sum = torch::Tensor();
    release_after_out_of_memory(optim, device);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(kept[i]);
    }
    ckpt::set_rng_states(rng, device);
    if (what.empty()) what = "another rank ran out of memory";
    DLRUN_CHECK(split_ < smallest, ExitCode::kRuntime,
                "step {} runs out of device memory ({}) even with one sample per micro-batch piece: tried splitting "
                "each micro-batch of {} samples into {} (train.micro_batch: auto); lower data.batch_size or use a "
                "larger device",
                step, what, smallest, fmt::join(tried, ", "));
    split_ = std::min(split_ * 2, smallest);
    log0::warn("train.micro_batch: step {} ran out of device memory ({}); redoing it on the same samples with each "
               "micro-batch of {} split into {}",
               step, what, smallest, split_);
  }
}

}  // namespace dlrun::train
