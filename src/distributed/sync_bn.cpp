// Synchronised BatchNorm (see sync_bn.h). Math, per channel c, over the global batch of N
// values per channel (all ranks):
//   forward   mean, var (biased) from the ranks' (mean_r, var_r, n_r):
//               mean = sum n_r mean_r / N,  var = sum n_r (var_r + (mean_r - mean)^2) / N
//             y = (x - mean) * invstd * w + b,  invstd = 1 / sqrt(var + eps)
//             running_mean/var move by `momentum` towards mean and the unbiased var * N/(N-1)
//   backward  xhat = (x - mean) * invstd; with S1 = sum dy, S2 = sum dy * xhat over all ranks
//             dx = w * invstd * (dy - S1/N - xhat * S2/N)
//             dw = sum dy * xhat, db = sum dy over this rank only: the Reducer averages them
//             across ranks like every other gradient, which gives the global loss's gradient.
// Statistics are computed in float32 (float64 for the cross-rank combination) for float16,
// bfloat16 and float32 inputs, as cuDNN does, and in float64 for float64 inputs.
#include "distributed/sync_bn.h"

namespace dlrun::dist {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// The dtype statistics and the normalisation are computed in: at least float32.
torch::ScalarType compute_type(const torch::Tensor& x) {
  return x.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

std::vector<int64_t> reduce_dims(const torch::Tensor& x) {
  std::vector<int64_t> d{0};
  for (int64_t i = 2; i < x.dim(); ++i) d.push_back(i);
  return d;
}

/// (C) -> (1, C, 1, ...) to broadcast against x.
torch::Tensor per_channel(const torch::Tensor& v, const torch::Tensor& x) {
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = v.size(0);
  return v.view(shape);
}

struct SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, torch::Tensor running_mean, torch::Tensor running_var,
                               double momentum, double eps, int64_t group_ptr) {
    auto* group = reinterpret_cast<Group*>(group_ptr);
    const auto ct = compute_type(x);
    const auto xf = x.to(ct);
    const auto dims = reduce_dims(x);
    const auto [var, mean] = at::var_mean(xf, dims, /*correction=*/0, /*keepdim=*/false);  // (C), (C)
    const int64_t channels = x.size(1);
    const double n_local = static_cast<double>(x.numel() / std::max<int64_t>(channels, 1));
    // (2C + 1): this rank's mean, variance and count, in float64 for the combination.
    const auto mine = torch::cat({mean.to(torch::kFloat64), var.to(torch::kFloat64),
                                  torch::full({1}, n_local, mean.options().dtype(torch::kFloat64))});
    const auto all = torch::stack(group->all_gather(mine));  // (ranks, 2C + 1)
    const auto means = all.narrow(1, 0, channels), vars = all.narrow(1, channels, channels);
    const auto counts = all.narrow(1, 2 * channels, 1);  // (ranks, 1)
    // The global count N stays a tensor on the device, used there (the unbiased variance, the
    // backward): reading it back to the host would wait for the GPU once per layer per step (53
    // times per ResNet-50 forward). Ranks may hold unequal slices; the counts weigh them.
    const auto n = counts.sum();                                                         // (1)
    const auto g_mean = (counts * means).sum(0) / n;                                    // (C)
    const auto g_var = (counts * (vars + (means - g_mean).pow(2))).sum(0) / n;          // (C)
    {
      torch::NoGradGuard no_grad;
      if (running_mean.defined()) {
        running_mean.mul_(1 - momentum).add_(g_mean.to(running_mean.dtype()), momentum);
        // var * N / (N - 1), and the biased var for a single value (N = 1).
        const auto unbiased = torch::where(n > 1, g_var * (n / (n - 1).clamp_min(1)), g_var);
        running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype()), momentum);
      }
    }
    const auto mean_f = g_mean.to(ct);
    const auto invstd = (g_var + eps).rsqrt().to(ct);  // (C)
    auto y = (xf - per_channel(mean_f, x)) * per_channel(invstd * weight.to(ct), x) + per_channel(bias.to(ct), x);
    ctx->save_for_backward({x, weight, mean_f, invstd, n.to(ct)});
    ctx->saved_data["group"] = group_ptr;
    return y.to(x.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3], &total = saved[4];
    auto* group = reinterpret_cast<Group*>(ctx->saved_data["group"].toInt());
    const auto ct = compute_type(x);
    const auto dy = grads[0].to(ct);
    const auto dims = reduce_dims(x);
    const auto xhat = (x.to(ct) - per_channel(mean, x)) * per_channel(invstd, x);
    const auto sum_dy = dy.sum(dims);                 // (C), this rank
    const auto sum_dy_xhat = (dy * xhat).sum(dims);  // (C), this rank
    auto sums = torch::cat({sum_dy, sum_dy_xhat});
    group->all_reduce(sums);  // over every rank
    const int64_t channels = x.size(1);
    const auto s1 = sums.narrow(0, 0, channels), s2 = sums.narrow(0, channels, channels);
    const auto dx = (dy - per_channel(s1 / total, x) - xhat * per_channel(s2 / total, x)) *
                    per_channel(invstd * weight.to(ct), x);
    return {dx.to(x.scalar_type()), sum_dy_xhat.to(weight.scalar_type()), sum_dy.to(weight.scalar_type()),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

class GroupBatchNorm : public models::BatchNormSync {
 public:
  explicit GroupBatchNorm(Group& group) : group_(group) {}

  torch::Tensor forward(const torch::Tensor& x, torch::nn::BatchNorm2dImpl& bn) override {
    const auto& o = bn.options;
    TORCH_CHECK(o.affine(), "synchronised BatchNorm needs affine BatchNorm layers");
    double momentum = o.momentum().value_or(0.0);
    if (o.track_running_stats()) {
      torch::NoGradGuard no_grad;
      bn.num_batches_tracked.add_(1);
      if (!o.momentum()) momentum = 1.0 / static_cast<double>(bn.num_batches_tracked.item<int64_t>());
    }
    return SyncBatchNormFunction::apply(x, bn.weight, bn.bias, o.track_running_stats() ? bn.running_mean : torch::Tensor(),
                                        o.track_running_stats() ? bn.running_var : torch::Tensor(), momentum, o.eps(),
                                        reinterpret_cast<int64_t>(&group_));
  }

 private:
  Group& group_;
};

}  // namespace

std::shared_ptr<models::BatchNormSync> sync_batchnorm(Group& group) { return std::make_shared<GroupBatchNorm>(group); }

}  // namespace dlrun::dist
