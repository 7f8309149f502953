// Activation checkpointing (see recompute.h).
#include "models/recompute.h"

#include <ATen/autocast_mode.h>

#include <atomic>
#include <mutex>

namespace dlrun::models {
namespace {

std::atomic<int64_t> g_recomputations{0};

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The random-number and autocast state a segment ran under, to run it again under the same.
struct RunState {
  torch::Tensor cpu_rng;
  std::optional<torch::Device> cuda;  ///< the input's CUDA device, whose generator is saved
  torch::Tensor cuda_rng;
  bool autocast_cpu = false, autocast_cuda = false;
  torch::ScalarType dtype_cpu = torch::kBFloat16, dtype_cuda = torch::kHalf;

  static at::Generator generator(const torch::Device& d) { return at::globalContext().defaultGenerator(d); }
  static torch::Tensor get(at::Generator g) {  // a handle: copies share the generator
    std::lock_guard<std::mutex> lock(g.mutex());
    return g.get_state();
  }
  static void set(at::Generator& g, const torch::Tensor& state) {
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_state(state);
  }

  static RunState capture(const torch::Tensor& x) {
    RunState s;
    s.cpu_rng = get(generator(torch::kCPU));
    if (x.is_cuda()) {
      s.cuda = x.device();
      s.cuda_rng = get(generator(x.device()));
    }
    s.autocast_cpu = at::autocast::is_autocast_enabled(c10::DeviceType::CPU);
    s.autocast_cuda = at::autocast::is_autocast_enabled(c10::DeviceType::CUDA);
    s.dtype_cpu = at::autocast::get_autocast_dtype(c10::DeviceType::CPU);
    s.dtype_cuda = at::autocast::get_autocast_dtype(c10::DeviceType::CUDA);
    return s;
  }
};

// For its lifetime: the generators and autocast as `s` recorded them; then back to what they
// were (torch.random.fork_rng plus torch.autocast, as torch.utils.checkpoint does).
class ReplayScope {
 public:
  explicit ReplayScope(const RunState& s) {
    cpu_gen_ = RunState::generator(torch::kCPU);
    cpu_now_ = RunState::get(cpu_gen_);
    RunState::set(cpu_gen_, s.cpu_rng);
    if (s.cuda) {
      cuda_gen_ = RunState::generator(*s.cuda);
      cuda_now_ = RunState::get(*cuda_gen_);
      RunState::set(*cuda_gen_, s.cuda_rng);
    }
    for (auto [dev, on, dt] : {std::tuple{c10::DeviceType::CPU, s.autocast_cpu, s.dtype_cpu},
                               std::tuple{c10::DeviceType::CUDA, s.autocast_cuda, s.dtype_cuda}}) {
      prev_.push_back({dev, at::autocast::is_autocast_enabled(dev), at::autocast::get_autocast_dtype(dev)});
      at::autocast::set_autocast_enabled(dev, on);
      at::autocast::set_autocast_dtype(dev, dt);
    }
    at::autocast::increment_nesting();
  }
  ~ReplayScope() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    for (auto [dev, on, dt] : prev_) {
      at::autocast::set_autocast_enabled(dev, on);
      at::autocast::set_autocast_dtype(dev, dt);
    }
    RunState::set(cpu_gen_, cpu_now_);
    if (cuda_gen_) RunState::set(*cuda_gen_, cuda_now_);
  }
  ReplayScope(const ReplayScope&) = delete;
  ReplayScope& operator=(const ReplayScope&) = delete;

 private:
  at::Generator cpu_gen_;
  torch::Tensor cpu_now_;
  std::optional<at::Generator> cuda_gen_;
  torch::Tensor cuda_now_;
  std::vector<std::tuple<c10::DeviceType, bool, torch::ScalarType>> prev_;
};

// What backward needs besides the saved input (an IValue capsule in the autograd context).
struct Segment : torch::CustomClassHolder {
  SegmentFn fn;
  std::vector<torch::Tensor> params;   ///< every parameter of the segment's modules
  std::vector<torch::Tensor> buffers;  ///< restored after the recomputation
  RunState state;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // Called with grad mode off (Function::apply turns it off): nothing inside is recorded.
  static torch::Tensor forward(AutogradContext* ctx, c10::intrusive_ptr<Segment> seg, const torch::Tensor& x,
                               at::TensorList params) {
    seg->state = RunState::capture(x);
    torch::Tensor y = seg->fn(x);
    (void)params;  // forward's inputs, so that their gradients flow; backward reads seg->params
    ctx->save_for_backward({x});
    ctx->saved_data["segment"] = c10::IValue::make_capsule(std::move(seg));
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto seg = c10::static_intrusive_pointer_cast<Segment>(ctx->saved_data["segment"].toCapsule());
    const torch::Tensor x_saved = ctx->get_saved_variables().at(0);
    const torch::Tensor x = x_saved.detach().requires_grad_(x_saved.requires_grad());
    std::vector<torch::Tensor> buffers_before;
    for (const auto& b : seg->buffers) buffers_before.push_back(b.clone());
    torch::Tensor y;
    {
      ReplayScope replay(seg->state);
      torch::AutoGradMode grad_on(true);
      y = seg->fn(x);
    }
    ++g_recomputations;

    // Gradients for the input (when it needs one) and every parameter that needs one, in the
    // order of forward's arguments: the segment (none), x, the parameters.
    std::vector<torch::Tensor> wrt;
    if (x.requires_grad()) wrt.push_back(x);
    for (const auto& p : seg->params)
      if (p.requires_grad()) wrt.push_back(p);
    std::vector<torch::Tensor> grads;
    if (!wrt.empty() && y.requires_grad())
      grads = torch::autograd::grad({y}, wrt, {grad_out.at(0)}, /*retain_graph=*/false, /*create_graph=*/false,
                                    /*allow_unused=*/true);
    // Only now (BatchNorm's backward reads the running statistics it saved, version-checked):
    // the buffers as the forward left them.
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < buffers_before.size(); ++i) seg->buffers[i].copy_(buffers_before[i]);
    }
    variable_list out{torch::Tensor()};
    size_t k = 0;
    out.push_back(x.requires_grad() && k < grads.size() ? grads[k++] : torch::Tensor());
    for (const auto& p : seg->params) out.push_back(p.requires_grad() && k < grads.size() ? grads[k++] : torch::Tensor());
    return out;
  }
};

}  // namespace

torch::Tensor checkpoint(const SegmentFn& fn, const torch::Tensor& x,
                         const std::vector<std::shared_ptr<torch::nn::Module>>& modules) {
  if (!torch::GradMode::is_enabled()) return fn(x);
  auto seg = c10::make_intrusive<Segment>();
  bool any_grad = x.requires_grad();
  for (const auto& m : modules) {
    for (auto& p : m->parameters()) {
      any_grad = any_grad || p.requires_grad();
      seg->params.push_back(p);
    }
    for (auto& b : m->buffers()) seg->buffers.push_back(b);
  }
  if (!any_grad) return fn(x);
  seg->fn = fn;
  const std::vector<torch::Tensor> params = seg->params;
  return CheckpointFunction::apply(std::move(seg), x, at::TensorList(params));
}

torch::Tensor forward_span(torch::nn::Sequential& seq, size_t begin, size_t end, torch::Tensor x, bool checkpointed) {
  auto run = [seq, begin, end](const torch::Tensor& in) mutable {  // a copy of the holder: backward calls it later
    torch::Tensor t = in;
    for (size_t i = begin; i < end; ++i) t = (seq->begin() + static_cast<std::ptrdiff_t>(i))->forward(t);
    return t;
  };
  if (!checkpointed) return run(x);
  std::vector<std::shared_ptr<torch::nn::Module>> modules;
  for (size_t i = begin; i < end; ++i) modules.push_back(seq->ptr(i));
  return checkpoint(run, x, modules);
}

int64_t recomputations() { return g_recomputations.load(); }

}  // namespace dlrun::models
