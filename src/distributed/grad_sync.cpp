// Gradient averaging for one model through c10d::Reducer (see group.h, GradSync). The Reducer
// buckets the gradients and starts each bucket's all-reduce as backward produces it; the
// all-reduce itself is a communication hook of ours, computing what the Reducer's own does (each
// bucket multiplied by 1/world size, then summed across ranks) through a future this file owns,
// so that a lost peer can end the backward waiting on it: the backend's future would wait until
// dist.timeout_s, ours fails as soon as the group learns of the loss (group_impl.h).
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "base/log.h"
#include "distributed/group_impl.h"

namespace dlrun::dist {
// Named, not anonymous: GradSync::State (a member of a class with linkage) holds one.
namespace grad_sync_detail {

/// The buckets' all-reduces in flight, each with the future the Reducer waits on.
struct InFlight {
  std::mutex mu;        ///< guards pending and keep
  std::mutex life_mu;   ///< guards closed (and so the group a callback reaches)
  bool closed = false;  ///< the GradSync is gone (and perhaps its group): late callbacks do nothing
  std::unordered_set<c10::ivalue::Future*> pending;
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> keep;  ///< the pending ones, alive

  void add(const c10::intrusive_ptr<c10::ivalue::Future>& f) {
    std::lock_guard<std::mutex> lock(mu);
    pending.insert(f.get());
    keep.push_back(f);
  }
  /// `f` completed with `value`, or failed (unless a loss failed it first).
  void finish(const c10::intrusive_ptr<c10::ivalue::Future>& f, c10::ivalue::Future& from) {
    std::lock_guard<std::mutex> lock(mu);
    if (!pending.erase(f.get())) return;  // a loss ended it already
    if (from.hasError()) f->setError(from.exception_ptr());
    else f->markCompleted(from.value());
    keep.erase(std::remove_if(keep.begin(), keep.end(), [&](const auto& k) { return k.get() == f.get(); }), keep.end());
  }
  /// Every pending future fails with `why`.
  void fail_all(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& f : keep)
      if (pending.erase(f.get())) f->setError(std::make_exception_ptr(PeerLost(why)));
    keep.clear();
  }
};

}  // namespace grad_sync_detail

namespace {

using grad_sync_detail::InFlight;

/// The Reducer's all-reduce of a bucket, through an abortable future (above).
class AbortableAllReduce : public c10d::CommHookInterface {
 public:
  AbortableAllReduce(Group::Impl& group, std::shared_ptr<InFlight> inflight)
      : group_(group), inflight_(std::move(inflight)) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    auto out = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    if (group_.lost) {
      out->setError(std::make_exception_ptr(PeerLost("the gradients' all-reduce: a peer is lost: " + group_.loss_text())));
      return out;
    }
    // What the Reducer does without a hook: the bucket times 1/world size (it does so while
    // copying the gradients in; here in place, the same products), then summed.
    at::Tensor& buffer = bucket.getBufferRef();
    buffer.mul_(at::native::wrapped_scalar_tensor(1.0 / static_cast<double>(group_.world.size)));
    std::vector<at::Tensor> tensors{buffer};
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = group_.pg->allreduce(tensors);
    } catch (const std::exception& e) {
      if (group_.peer_timeout_s <= 0 || !group_.peer_failure().empty()) throw;
      group_.lose({{}, false, fmt::format("the gradients' all-reduce across {} ranks failed: {}", group_.world.size,
                                          brief(e))});
      out->setError(std::make_exception_ptr(PeerLost(group_.loss_text())));
      return out;
    }
    inflight_->add(out);
    const auto from = work->getFuture();
    from->addCallback([out, inflight = inflight_, &group = group_](c10::ivalue::Future& f) {
      {
        std::lock_guard<std::mutex> lock(inflight->life_mu);
        if (inflight->closed) return;  // (a work the backend finished after a loss let it go)
        // A peer's connection closed: a loss, unless that peer recorded a failure of its own.
        if (f.hasError() && group.peer_timeout_s > 0 && group.peer_failure().empty())
          group.lose({{}, false, fmt::format("the gradients' all-reduce across {} ranks failed: {}",
                                             group.world.size, f.tryRetrieveErrorMessage())});
      }
      inflight->finish(out, f);
    });
    return out;
  }

  at::Tensor parseHookResult(const c10::IValue& result) override {
    return c10d::detail::parseCppCommHookResult(result);
  }

 private:
  Group::Impl& group_;
  std::shared_ptr<InFlight> inflight_;
};

}  // namespace

struct GradSync::State {
  using InFlight = grad_sync_detail::InFlight;
  Group* group = nullptr;
  std::shared_ptr<c10d::Reducer> reducer;
  std::shared_ptr<InFlight> inflight = std::make_shared<InFlight>();
  size_t buckets = 0;
};

GradSync::GradSync(Group& group, std::vector<torch::Tensor> params, double bucket_mb)
    : state_(std::make_unique<State>()) {
  state_->group = &group;
  // Buckets as PyTorch DDP ends up with them once it has rebuilt them in gradient-ready
  // order after its first step: filled from the last parameter backwards (backward produces
  // the last layers' gradients first), the first bucket capped at 1 MiB so communication
  // starts early, the others at bucket_mb MiB. Bucket 0 is ready first and all-reduced first.
  const auto cap = static_cast<int64_t>(bucket_mb * 1024 * 1024);
  const int64_t first = 1024 * 1024;
  const std::vector<bool> sparse(params.size(), false);
  std::vector<int64_t> backward_order;  // the original index of each tensor in `reversed`
  std::vector<torch::Tensor> reversed;
  for (size_t i = params.size(); i-- > 0;) {
    backward_order.push_back(static_cast<int64_t>(i));
    reversed.push_back(params[i]);
  }
  auto [indices, limits] = c10d::compute_bucket_assignment_by_size(
      reversed, {static_cast<size_t>(first), static_cast<size_t>(std::max<int64_t>(cap, 1))}, sparse, backward_order);
  std::vector<int64_t> limit_list(limits.begin(), limits.end());
  state_->buckets = indices.size();
  Group::Impl& g = *group.impl_;
  state_->reducer = std::make_shared<c10d::Reducer>(
      std::move(params), std::move(indices), g.pg, sparse, cap, /*find_unused_parameters=*/false,
      /*gradient_as_bucket_view=*/false, std::unordered_map<size_t, std::string>{}, first,
      /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false, std::move(limit_list));
  state_->reducer->register_comm_hook(std::make_unique<AbortableAllReduce>(g, state_->inflight));
  std::lock_guard<std::mutex> lock(g.loss_mu);
  g.on_loss.push_back([inflight = state_->inflight](const Loss& l) { inflight->fail_all(l.why); });
}

GradSync::~GradSync() {
  std::lock_guard<std::mutex> lock(state_->inflight->life_mu);
  state_->inflight->closed = true;
}

void GradSync::prepare(const torch::Tensor& loss) {
  // As DDP before each forward: after the first synchronised backward the Reducer re-buckets in
  // the order the gradients arrived (a collective: every rank reaches it at the same step). Until
  // it has, each backward appends every parameter to its record of that order, which would
  // grow by a few KB a step for the whole run.
  if (state_->reducer->rebuild_buckets())
    log0::info("dist: gradient buckets rebuilt in the order the first step's gradients arrived");
  state_->reducer->prepare_for_forward();
  state_->reducer->prepare_for_backward({loss});
}

void GradSync::settle(const torch::Device& device) {
  Group::Impl& g = *state_->group->impl_;
  if (g.peer_timeout_s <= 0) return;
  if (g.lost) throw PeerLost("the step's collectives were ended by a lost peer: " + g.loss_text());
  if (!device.is_cuda() || g.backend != "nccl") return;  // gloo's waits ended on the host already
  // Everything queued so far (the gradients' all-reduce, the agreed flags) done on the device, or
  // a loss: the update is not queued behind a collective that will never finish.
  c10::Event done(device.type());
  const c10::impl::VirtualGuardImpl guard(device.type());
  done.record(guard.getStream(device));
  while (!done.query()) {
    if (g.lost) throw PeerLost("the step's collectives were ended by a lost peer: " + g.loss_text());
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (g.lost) throw PeerLost("the step's collectives were ended by a lost peer: " + g.loss_text());
}

size_t GradSync::buckets() const { return state_->buckets; }

torch::Tensor GradSync::any_rank(const torch::Tensor& flag) {
  auto t = flag.to(torch::kInt32);
  state_->group->all_reduce(t, Reduce::kMax);
  return t.gt(0);
}

void GradSync::average(const std::vector<torch::Tensor>& grads) {
  // One tensor at a time, in place: no copy of all the gradients at once, in a step that has
  // just run out of memory (a contiguous copy only for a tensor that is not).
  const double n = state_->group->size();
  for (const auto& g : grads) {
    torch::Tensor t = g.is_contiguous() ? g : g.contiguous();
    state_->group->all_reduce(t, Reduce::kSum);
    t.div_(n);
    if (!t.is_same(g)) g.copy_(t);
  }
}

}  // namespace dlrun::dist
