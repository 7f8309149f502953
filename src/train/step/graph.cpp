// CUDA-graph capture of the step (see graph.h).
#include "train/step/graph.h"

#include "base/error.h"
#include "base/log.h"

#ifdef DLRUN_TORCH_HAS_CUDA
#include <ATen/autocast_mode.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
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
  if (cfg.train.mixup_alpha > 0 || cfg.train.cutmix_alpha > 0)
    return "train.mixup_alpha / cutmix_alpha draw each micro-batch's mixing on the host, which a replay cannot change";
  return "";
}

#ifdef DLRUN_TORCH_HAS_CUDA
struct CapturedStep::Graph {
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
struct CapturedStep::Graph {
  bool captured = false;
};
#endif

CapturedStep::CapturedStep(const torch::Device& device) : device_(device) {
  DLRUN_CHECK_INPUT(device.is_cuda(), "train.cuda_graphs needs a CUDA device, not {}", device.str());
  graph_ = std::make_unique<Graph>();
}

CapturedStep::~CapturedStep() = default;

bool CapturedStep::captured() const { return graph_ && graph_->captured; }

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

StepResult CapturedStep::run(const std::vector<data::Batch>& micro, const Body& body, StepTimer& timer) {
  if (!graph_) return body(micro);  // the capture failed: eager
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
    timer.set_enabled(false);  // no timing events inside a graph
    g.graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    g.out = body({sb});
    g.graph.capture_end();
    timer.set_enabled(true);
  } catch (const std::exception& e) {
    timer.set_enabled(true);
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
StepResult CapturedStep::run(const std::vector<data::Batch>& micro, const Body& body, StepTimer&) { return body(micro); }
#endif


}  // namespace dlrun::train
