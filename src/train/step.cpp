// The step runner (see step.h).
#include "train/step.h"

#include <fmt/ranges.h>

#include <limits>

#include "base/clock.h"
#include "base/error.h"
#include "base/fault.h"
#include "base/log.h"
#include "distributed/group.h"
#include "train/ema.h"
#include "train/memory.h"
#include "train/optim.h"
#include "train/rng.h"

#include <ATen/record_function.h>

#ifdef DLRUN_TORCH_HAS_CUDA
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>

#include <optional>
#endif

namespace dlrun::train {

std::string cuda_graph_obstacle(const Config& cfg, const torch::Device& device, bool distributed) {
#ifndef DLRUN_TORCH_HAS_CUDA
  return "this dlrun's LibTorch was built without CUDA";
#endif
  if (!device.is_cuda()) return fmt::format("the step runs on {}, not on a CUDA device", device.str());
  if (distributed)
    return "the run has a process group, whose gradient all-reduce runs from autograd hooks outside any graph "
           "(capture with DDP is not implemented)";
  if (cfg.train.grad_accum > 1) return "train.grad_accum > 1 (a captured step holds one micro-batch)";
  if (cfg.train.micro_batch == MicroBatch::kAuto)
    return "train.micro_batch: auto (a captured step's memory is fixed when it is captured, and cannot be split)";
  if (cfg.model.activation_checkpointing != ActivationCheckpointing::kNone)
    return "model.activation_checkpointing saves and restores RNG states on the host, which a capture cannot";
  if (cfg.model.dtype != ModelDtype::kFloat32) return "model.dtype is not float32";
  return "";
}

#ifdef DLRUN_TORCH_HAS_CUDA
struct StepRunner::Graph {
  at::cuda::CUDAGraph graph;
  torch::Tensor x, y;  ///< static inputs: each replay reads the batch copied here
  StepResult out;      ///< static outputs: each replay writes here
  int warm = 0;        ///< eager warm-up steps run so far
  bool captured = false;
  bool told_ragged = false;
  /// The one side stream of the warm-up steps and the capture. The caching allocator reuses a
  /// freed block only on the stream it was allocated on: a new stream per warm-up step would
  /// leave a step's activations cached on each.
  std::optional<c10::cuda::CUDAStream> side;
};
#else
struct StepRunner::Graph {
  bool captured = false;
};
#endif

StepRunner::~StepRunner() = default;

bool StepRunner::graph_captured() const { return graph_ && graph_->captured; }

void StepRunner::use_cuda_graphs() {
  DLRUN_CHECK_INPUT(device_.is_cuda(), "train.cuda_graphs needs a CUDA device, not {}", device_.str());
  use_device_lr(optim_, device_);
  if (ema_) ema_->use_device_weights();
  graph_ = std::make_unique<Graph>();
}

StepRunner::StepRunner(const TrainOptions& train, const AmpOptions& amp, models::Model& model,
                       torch::optim::Optimizer& optim, const torch::Device& device, Ema* ema)
    : train_(train),
      model_(model),
      optim_(optim),
      device_(device),
      autocast_(amp.enabled),
      autocast_dtype_(amp.dtype == AmpDtype::kBf16 ? torch::kBFloat16 : torch::kHalf),
      scaler_(amp, autocast_ && autocast_dtype_ == torch::kHalf, device),
      ema_(ema),
      timer_(device) {
  DLRUN_CHECK_INPUT(!autocast_ || device.is_cuda() || autocast_dtype_ == torch::kBFloat16,
                    "amp.dtype: fp16 autocast needs a CUDA device; on {} use amp.dtype: bf16", device.str());
  for (auto& p : model.parameters())
    if (p.requires_grad()) params_.push_back(p);
}

void StepRunner::distribute(dist::GradSync* sync, std::function<void()> before_step) {
  sync_ = sync;
  before_step_ = std::move(before_step);
}

void StepRunner::clip(const std::vector<torch::Tensor>& grads) const {
  // Global L2 norm as torch.nn.utils.clip_grad_norm_ computes it, kept on the device: the
  // factor is clamped to 1 instead of branching on the norm on the host.
  torch::NoGradGuard no_grad;
  const auto norms = at::_foreach_norm(grads, 2);
  const auto total = at::linalg_vector_norm(at::stack(norms), 2);
  const auto factor = (train_.clip_grad_norm / (total + 1e-6)).clamp_max(1.0);
  at::_foreach_mul_(grads, factor);
}

StepResult StepRunner::run(const std::vector<data::Batch>& micro, double lr, int64_t step) {
  step_ = step;
  set_lr(optim_, lr);
  if (ema_) ema_->before_step(step);
  return graph_ ? run_graphed(micro) : body(micro);
}

void StepRunner::set_split(int64_t split) { split_ = std::max<int64_t>(1, split); }

StepResult StepRunner::body(const std::vector<data::Batch>& micro) {
  if (train_.micro_batch == MicroBatch::kAuto) return body_splitting(micro);
  // Phases are timed (step_timer.h) and named for the profiler's trace (profile.*); neither
  // costs anything when off. A step being captured into a CUDA graph is not timed.
  auto loss_sum = begin_attempt();
  accumulate(micro, loss_sum, 0);
  return update(loss_sum, micro.size());
}

torch::Tensor StepRunner::begin_attempt() {
  timer_.start();
  optim_.zero_grad(true);
  auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  if (before_step_) before_step_();
  return loss_sum;
}

std::vector<torch::Tensor> StepRunner::grads() const {
  std::vector<torch::Tensor> out;
  out.reserve(params_.size());
  for (const auto& p : params_)
    if (p.grad().defined()) out.push_back(p.grad());
  return out;
}

void StepRunner::accumulate(const std::vector<data::Batch>& micro, torch::Tensor& loss_sum, int attempt) {
  const auto n = static_cast<double>(micro.size());
  const bool auto_split = train_.micro_batch == MicroBatch::kAuto;
  for (size_t i = 0; i < micro.size(); ++i) {
    const auto& b = micro[i];
    const int64_t size = b.x.size(0);
    const int64_t k = std::min(split_, std::max<int64_t>(size, 1));
    const std::vector<torch::Tensor> xs = k > 1 ? b.x.tensor_split(k) : std::vector<torch::Tensor>{b.x};
    const std::vector<torch::Tensor> ys = k > 1 ? b.y.tensor_split(k) : std::vector<torch::Tensor>{b.y};
    for (size_t j = 0; j < xs.size(); ++j) {
      const int64_t piece = xs[j].size(0);
      torch::Tensor loss;
      {
        RECORD_USER_SCOPE("dlrun::forward");
        AutocastScope ac(autocast_, autocast_dtype_, device_.type());
        auto logits = model_.forward(xs[j]);  // (b, classes)
        loss = torch::nn::functional::cross_entropy(
            logits.to(model_.dtype()), ys[j],  // float32 under autocast too
            torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(train_.label_smoothing));
      }
      if (fault::out_of_memory(step_, attempt, piece))
        TORCH_CHECK_WITH(OutOfMemoryError, false, "DLRUN_FAULT: step ", step_, " ran out of memory (", piece,
                         " samples in a micro-batch)");
      // A piece counts by its share of its micro-batch: the loss of a micro-batch cut into k equal
      // pieces is the mean of theirs (a halving is exact), and each piece's gradient is divided
      // by n * k, as train.grad_accum n * k would divide it.
      const double pieces = static_cast<double>(size) / static_cast<double>(piece);  // k when equal
      loss_sum += k > 1 ? loss.detach().to(torch::kFloat64) / pieces : loss.detach().to(torch::kFloat64);
      auto scaled = scaler_.scale(k > 1 ? loss / (n * pieces) : loss / n);
      timer_.end_of(Phase::kForward);
      {
        RECORD_USER_SCOPE("dlrun::backward");
        // This backward all-reduces (under auto_split the average comes after every rank's backward).
        if (sync_ && !auto_split && i + 1 == micro.size() && j + 1 == xs.size()) sync_->prepare(scaled);
        scaled.backward();
      }
      timer_.end_of(Phase::kBackward);
    }
  }
}

StepResult StepRunner::body_splitting(const std::vector<data::Batch>& micro) {
  // What a failed attempt changes besides the gradients, put back before the redo: the
  // BatchNorm buffers its forward updated and the RNG its dropout drew from.
  std::vector<torch::Tensor> buffers, kept;
  for (const auto& t : model_.buffers()) buffers.push_back(t), kept.push_back(t.detach().clone());
  const auto rng = rng_states(device_);
  int64_t smallest = std::numeric_limits<int64_t>::max();
  for (const auto& b : micro) smallest = std::min(smallest, b.x.size(0));
  split_ = std::min(split_, std::max<int64_t>(smallest, 1));
  std::vector<int64_t> tried;
  double first_error = 0;
  for (int attempt = 0;; ++attempt) {
    auto loss_sum = begin_attempt();
    bool oom = false;
    std::string what;
    try {
      accumulate(micro, loss_sum, attempt);
    } catch (const c10::Error& e) {
      if (!is_out_of_memory(e)) throw;
      if (tried.empty()) first_error = mono_now();
      oom = true;
      what = e.what_without_backtrace();
      what = what.substr(0, what.find('\n'));
    }
    // Every rank learns whether any ran out: then all cut further (the finest split any needed).
    if (sync_) oom = sync_->any_rank(torch::full({}, oom ? 1 : 0, torch::TensorOptions().device(device_))).item<bool>();
    if (!oom) {
      if (!tried.empty())
        log0::info("train.micro_batch: step {} fits with each micro-batch split into {} ({:.2f} s from the "
                   "out-of-memory error to the end of its backward); the split is kept",
                   step_, split_, mono_now() - first_error);
      if (sync_) sync_->average(grads());
      return update(loss_sum, micro.size());
    }
    if (tried.empty() && first_error == 0) first_error = mono_now();  // another rank's error
    tried.push_back(split_);
    loss_sum = torch::Tensor();
    release_after_out_of_memory(optim_, device_);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(kept[i]);
    }
    set_rng_states(rng, device_);
    if (what.empty()) what = "another rank ran out of memory";
    DLRUN_CHECK(split_ < smallest, ExitCode::kRuntime,
                "step {} runs out of device memory ({}) even with one sample per micro-batch piece: tried splitting "
                "each micro-batch of {} samples into {} (train.micro_batch: auto); lower data.batch_size or use a "
                "larger device",
                step_, what, smallest, fmt::join(tried, ", "));
    split_ = std::min(split_ * 2, smallest);
    log0::warn("train.micro_batch: step {} ran out of device memory ({}); redoing it on the same samples with each "
               "micro-batch of {} split into {}",
               step_, what, smallest, split_);
  }
}

StepResult StepRunner::update(torch::Tensor& loss_sum, size_t micro_batches) {
  const auto n = static_cast<double>(micro_batches);
  RECORD_USER_SCOPE("dlrun::optimizer");

  // Unscale (by 1 without fp16 scaling) and look for inf/NaN in one pass over the gradients.
  const std::vector<torch::Tensor> grads = this->grads();
  const auto found_inf = scaler_.unscale_(grads);  // float32 0-dim: 1 = a gradient is inf/NaN
  if (fault::nonfinite_loss(step_)) loss_sum += std::numeric_limits<double>::infinity();
  auto loss_bad = loss_sum.isfinite().logical_not();
  // The loss is each rank's own (the gradients are averaged, so their check agrees already):
  // any rank's non-finite loss counts on every rank, or ranks would skip different steps and
  // their replicas part silently.
  if (sync_) loss_bad = sync_->any_rank(loss_bad);
  StepResult r;
  r.loss = loss_sum / n;
  // With fp16 scaling, overflowing gradients are routine (the scale is searched for); only
  // a non-finite loss is the model's problem.
  r.nonfinite = scaler_.active() ? loss_bad : loss_bad.logical_or(found_inf.gt(0));
  if (train_.clip_grad_norm > 0 && !grads.empty()) clip(grads);

  // Whether to apply the update, decided on the device: the fused optimizer kernels skip it
  // where the flag is 1.
  torch::Tensor skip;
  if (scaler_.active() && train_.nonfinite == NonfinitePolicy::kSkip)
    skip = found_inf.gt(0).logical_or(r.nonfinite).to(torch::kFloat32);
  else if (scaler_.active())
    skip = found_inf;
  else if (train_.nonfinite == NonfinitePolicy::kSkip)
    skip = r.nonfinite.to(torch::kFloat32);
  optimizer_step(optim_, skip);
  scaler_.update(found_inf);
  if (ema_) ema_->update();
  if (skip.defined()) r.skipped = skip.gt(0);
  timer_.end_of(Phase::kOptimizer);
  return r;
}

#ifdef DLRUN_TORCH_HAS_CUDA
namespace {

// Work queued on `from` so far happens before what is queued on `to` from now on.
void order_after(const c10::cuda::CUDAStream& from, const c10::cuda::CUDAStream& to) {
  at::cuda::CUDAEvent e;
  e.record(from);
  e.block(to);
}

// After a capture that failed (a kernel that cannot be captured, an allocation that does not
// fit): end the capture on its own stream if that stream is still capturing (capture_end checks
// the current stream, hence the guard), consume the error, and close what capture_begin opened
// and capture_end did not get to close -- the device and pinned-host allocators routing
// allocations to the graph's pool, and the pool itself -- so that the eager steps that follow
// allocate, and free cached blocks when memory runs short, as before. Each step tolerates
// having been done already: capture_end may have got part of the way.
//
// Who gives the pool back must be exactly one party. When the graph says its capture ended
// (pool() answers), its destructor does. Otherwise this function does -- and then the graph must
// never be destroyed: how CUDAGraph::reset() decides to release depends on torch's version (a
// failed instantiation after the capture ended leaves a graph whose pool() refuses while, in
// some versions, its reset() still releases), and a second release of the same pool corrupts
// the caching allocator. Returns true when it released the pool here (the caller then leaks the
// graph object, a few hundred bytes, once per run: a failed capture is not tried again).
bool abandon_capture(at::cuda::CUDAGraph& graph, const c10::cuda::CUDAStream& side, const at::cuda::MempoolId_t& pool) {
  const c10::cuda::CUDAStreamGuard on_side(side);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(side.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(side.stream(), &partial) == cudaSuccess && partial != nullptr) cudaGraphDestroy(partial);
  }
  (void)cudaGetLastError();
  bool ended = true;  // capture_end finished: the graph's destructor gives the pool back
  try {
    (void)graph.pool();
  } catch (const c10::Error&) {
    ended = false;
  }
  if (ended) return false;
  const auto device = side.device_index();
  auto* host = at::getHostAllocator(at::kCUDA);
  auto quietly = [](auto&& close) {
    try {
      close();
    } catch (const c10::Error&) {  // already closed by capture_end
    }
  };
  quietly([&] { c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool); });
  quietly([&] { host->end_allocate_to_pool(pool); });
  quietly([&] { c10::cuda::CUDACachingAllocator::releasePool(device, pool); });
  quietly([&] { host->release_pool(pool); });
  return true;
}

StepResult copy_of(const StepResult& r) {  // the static outputs change at the next replay
  StepResult c;
  c.loss = r.loss.clone();
  c.nonfinite = r.nonfinite.clone();
  if (r.skipped.defined()) c.skipped = r.skipped.clone();
  return c;
}

}  // namespace

StepResult StepRunner::run_graphed(const std::vector<data::Batch>& micro) {
  Graph& g = *graph_;
  const data::Batch& b = micro.at(0);
  if (g.captured) {
    if (micro.size() == 1 && b.x.sizes() == g.x.sizes() && b.x.scalar_type() == g.x.scalar_type() &&
        b.y.sizes() == g.y.sizes()) {
      g.x.copy_(b.x, /*non_blocking=*/true);
      g.y.copy_(b.y, /*non_blocking=*/true);
      g.graph.replay();
      return copy_of(g.out);
    }
    if (!g.told_ragged) {
      log0::info("train.cuda_graphs: a batch of {} samples (the captured step takes {}) runs eagerly", b.x.size(0),
                 g.x.size(0));
      g.told_ragged = true;
    }
    return body(micro);
  }
  const auto current = c10::cuda::getCurrentCUDAStream(device_.index());
  if (!g.side) g.side = c10::cuda::getStreamFromPool(false, device_.index());
  const c10::cuda::CUDAStream side = *g.side;
  if (g.warm < kGraphWarmupSteps) {
    ++g.warm;
    order_after(current, side);
    StepResult r;
    {
      c10::cuda::CUDAStreamGuard on_side(side);
      r = body(micro);
    }
    order_after(side, current);
    return r;
  }
  // Capture. Capturing records the kernels without running them; the step is then replayed
  // once. Casts cached by autocast would be freed when the scope ends and are not captured as
  // allocations of the graph, so the cache is off while capturing (torch.cuda.graphs says so).
  g.x = torch::empty_like(b.x);
  g.y = torch::empty_like(b.y);
  g.x.copy_(b.x);
  g.y.copy_(b.y);
  data::Batch sb = b;
  sb.x = g.x;
  sb.y = g.y;
  const bool cache = at::autocast::is_autocast_cache_enabled();
  // As torch.cuda.graph does: the warm-up steps' work done and the allocator's cached blocks
  // given back, so that the graph's private pool can take the memory they held (while capturing,
  // the allocator cannot free cached blocks to make room).
  c10::cuda::device_synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();
  const at::cuda::MempoolId_t pool = at::cuda::graph_pool_handle();
  try {
    c10::cuda::CUDAStreamGuard on_side(side);
    at::autocast::set_autocast_cache_enabled(false);
    timer_.set_enabled(false);  // no timing events inside a graph
    g.graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    g.out = body({sb});
    g.graph.capture_end();
    timer_.set_enabled(true);
  } catch (const std::exception& e) {
    timer_.set_enabled(true);
    at::autocast::set_autocast_cache_enabled(cache);
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    if (abandon_capture(g.graph, side, pool)) {
      g.x = g.y = torch::Tensor();
      g.out = StepResult();
      (void)graph_.release();  // its destructor must not release the pool a second time (above)
    } else {
      graph_.reset();
    }
    log0::warn("train.cuda_graphs: the step could not be captured ({}); training goes on eagerly", what);
    return body(micro);
  }
  at::autocast::set_autocast_cache_enabled(cache);
  order_after(side, current);
  g.captured = true;
  log0::info("train.cuda_graphs: the step was captured after {} eager steps and is replayed from now on",
             kGraphWarmupSteps);
  g.graph.replay();
  return copy_of(g.out);
}
#else
StepResult StepRunner::run_graphed(const std::vector<data::Batch>& micro) { return body(micro); }
#endif

std::string StepRunner::skip_reason() const {
  if (scaler_.active() && train_.nonfinite == NonfinitePolicy::kSkip)
    return "fp16 gradient overflow, or a non-finite loss";
  if (scaler_.active()) return "fp16 gradient overflow (the loss scale backs off)";
  return "non-finite loss or gradients";
}

}  // namespace dlrun::train
