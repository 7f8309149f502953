// CPU kernels of dlrun::bn_relu, dlrun::bn_add_relu and their backwards (what they compute:
// ops.h; the reference they are tested against: bn_relu.cpp), for float32, float64, fp16 and
// bf16 inputs in NCHW or channels_last (anything else goes to the reference).
//
// The passes: forward reads x once for the statistics and once more (with the residual) to
// write the output; backward reads (dy, out, x) twice and writes dx once (plus the residual's
// gradient) — fewer than the unfused BatchNorm2d + ReLU (+ add) makes. Fewer passes did not make
// them faster than ATen's AVX2/AVX-512 BatchNorm on the machine measured (docs/benchmarks.md),
// so model.fused_conv_bn_relu: auto leaves the CPU to the modules; these kernels are the
// operators' CPU implementation (`true`, and the CPU side the CUDA tests compare with).
//
// Statistics: each channel's values are shifted by the channel's first value before they are
// summed (sum and sum of squares of x - k are then small against the mean, so the variance
// does not cancel), summed in the accumulation type over runs of at most kRun values, and the
// runs' sums added in double. The order of every sum is fixed by the shape alone: the result
// does not depend on the thread count (resume is bitwise, docs/checkpoints.md).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "kernels/bn_relu_cpu_passes.h"
#include "kernels/reference.h"

namespace dlrun::kernels {
namespace {

using namespace cpu_passes;  // the loops this file drives

// A per-channel vector's values (any floating dtype, any strides), read without an ATen op: on
// small layers the operators' fixed cost is a share of their time.
template <typename acc_t>
std::vector<acc_t> values(const at::Tensor& t) {
  std::vector<acc_t> v(static_cast<size_t>(t.numel()));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t.scalar_type(), "dlrun::bn_relu values", [&] {
    const scalar_t* p = t.const_data_ptr<scalar_t>();
    const int64_t stride = t.dim() == 1 ? t.stride(0) : 1;
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<acc_t>(p[static_cast<int64_t>(i) * stride]);
  });
  return v;
}

// `v` (one value per channel) repeated to `t` values: position i holds channel i % v.size().
template <typename T>
std::vector<T> tiled(const std::vector<T>& v, int64_t t) {
  std::vector<T> out(static_cast<size_t>(t));
  for (size_t i = 0; i < out.size(); ++i) out[i] = v[i % v.size()];
  return out;
}

// A new 1-D tensor of `dtype` holding `v`.
at::Tensor from(const std::vector<double>& v, at::ScalarType dtype) {
  auto t = at::empty({static_cast<int64_t>(v.size())}, at::TensorOptions().dtype(dtype));
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "dlrun::bn_relu from", [&] {
    scalar_t* p = t.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<scalar_t>(v[i]);
  });
  return t;
}

// buffer = (1 - momentum) * buffer + momentum * v, in place (BatchNorm's running statistics),
// computed in double.
void move_towards(at::Tensor& buffer, const std::vector<double>& v, double momentum) {
  if (!buffer.is_contiguous() || buffer.dim() != 1) {
    buffer.mul_(1 - momentum).add_(from(v, buffer.scalar_type()), momentum);
    return;
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, buffer.scalar_type(), "dlrun::bn_relu running", [&] {
    scalar_t* p = buffer.mutable_data_ptr<scalar_t>();
    for (size_t i = 0; i < v.size(); ++i)
      p[i] = static_cast<scalar_t>((1 - momentum) * static_cast<double>(p[i]) + momentum * v[i]);
  });
}

// ---- the operators --------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_add_relu_cpu(const at::Tensor& x, const at::Tensor& residual,
                                                               const at::Tensor& weight, const at::Tensor& bias,
                                                               at::Tensor& running_mean, at::Tensor& running_var,
                                                               bool training, double momentum, double eps) {
  const char* op = residual.defined() ? "dlrun::bn_add_relu" : "dlrun::bn_relu";
  reference::check_bn_inputs(op, x, residual, weight, bias, running_mean, running_var);
  if (!handled(x))
    return reference::bn_add_relu(x, residual, weight, bias, running_mean, running_var, training, momentum, eps);
  const Geometry g = *geometry_of(x);
  TORCH_CHECK(!training || g.count() > 1, op, ": training needs more than one value per channel, got input of shape ",
              x.sizes());
  const at::Tensor r = residual.defined() ? residual.to(x.scalar_type()).contiguous(g.format()) : at::Tensor();
  at::Tensor out = at::empty_like(x);
  const auto acc_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor mean, invstd;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "dlrun::bn_add_relu cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* rp = r.defined() ? r.const_data_ptr<scalar_t>() : nullptr;
    scalar_t* outp = out.mutable_data_ptr<scalar_t>();
    const auto w = values<double>(weight), b = values<double>(bias);
    // Per channel: the mean, scale = invstd * weight and the bias, in the accumulation type.
    std::vector<acc_t> mv(g.c), sv(g.c), bv(b.begin(), b.end());
    std::vector<acc_t> mt, st, bt;  // channels_last: the same, tiled (Geometry::tile)
    auto tile = [&] {
      mt = tiled(mv, g.tile());
      st = tiled(sv, g.tile());
      bt = tiled(bv, g.tile());
    };
    auto apply_run = [&](int64_t o, int64_t len, int64_t c) {
      normalize_run(xp + o, rp ? rp + o : nullptr, len, mv[c], sv[c], bv[c], outp + o);
    };
    auto apply_rows = [&](int64_t o, int64_t len) {
      normalize_rows(xp + o, rp ? rp + o : nullptr, len, g.tile(), mt.data(), st.data(), bt.data(), outp + o);
    };
    if (!training) {
      // Fresh tensors (autograd saves the mean, which must not follow later buffer updates).
      const auto m = values<double>(running_mean), var = values<double>(running_var);
      std::vector<double> inv(g.c);
      for (int64_t c = 0; c < g.c; ++c) {
        inv[c] = 1.0 / std::sqrt(var[c] + eps);
        mv[c] = static_cast<acc_t>(m[c]);
        sv[c] = static_cast<acc_t>(inv[c] * w[c]);
      }
      mean = from(m, acc_dtype);
      invstd = from(inv, acc_dtype);
      if (g.nhwc) tile();
      one_pass(g, apply_run, apply_rows);
      return;
    }
    // The shift: each channel's first value (NCHW: of plane (0, c); channels_last: of row 0).
    std::vector<acc_t> k(g.c);
    for (int64_t c = 0; c < g.c; ++c) k[c] = static_cast<acc_t>(xp[g.nhwc ? c : c * g.hw]);
    const auto kt = g.nhwc ? tiled(k, g.tile()) : std::vector<acc_t>();
    const double n = static_cast<double>(g.count());
    std::vector<double> m(g.c), inv(g.c), unbiased(g.c);
    two_passes<acc_t>(
        g, [&](int64_t o, int64_t len, int64_t c, double& t1, double& t2) { stats_run(xp + o, len, k[c], t1, t2); },
        [&](int64_t o, int64_t len, acc_t* a, acc_t* q) { stats_rows(xp + o, len, g.tile(), kt.data(), a, q); },
        [&](int64_t c, double t1, double t2) {
          const double d = t1 / n, var = std::max(0.0, t2 / n - d * d);
          m[c] = static_cast<double>(k[c]) + d;
          inv[c] = 1.0 / std::sqrt(var + eps);
          unbiased[c] = var * n / (n - 1);
          mv[c] = static_cast<acc_t>(m[c]);
          sv[c] = static_cast<acc_t>(inv[c] * w[c]);
        },
        tile, apply_run, apply_rows);
    mean = from(m, acc_dtype);
    invstd = from(inv, acc_dtype);
    move_towards(running_mean, m, momentum);
    move_towards(running_var, unbiased, momentum);
  });
  return {out, mean, invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_add_relu_backward_impl(
    const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& out_in, const at::Tensor& weight,
    const at::Tensor& mean, const at::Tensor& invstd, bool training, bool want_residual_grad) {
  const char* op = want_residual_grad ? "dlrun::bn_add_relu_backward" : "dlrun::bn_relu_backward";
  TORCH_CHECK(x.dim() == 4 && grad_out.sizes() == x.sizes() && out_in.sizes() == x.sizes(), op, ": grad_out ",
              grad_out.sizes(), " and output ", out_in.sizes(), " must have the input's shape ", x.sizes());
  TORCH_CHECK(weight.numel() == x.size(1) && mean.numel() == x.size(1) && invstd.numel() == x.size(1), op,
              ": expected weight, save_mean and save_invstd of shape (", x.size(1), "), got ", weight.sizes(), ", ",
              mean.sizes(), ", ", invstd.sizes());
  if (!handled(x)) return reference::bn_add_relu_backward(grad_out, x, out_in, weight, mean, invstd, training);
  const Geometry g = *geometry_of(x);
  const at::Tensor dy = grad_out.to(x.scalar_type()).contiguous(g.format());
  const at::Tensor out = out_in.to(x.scalar_type()).contiguous(g.format());
  at::Tensor dx = at::empty_like(x);
  at::Tensor gres = want_residual_grad ? at::empty_like(x) : at::Tensor();
  std::vector<double> sum_g(g.c), sum_g_xhat(g.c);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "dlrun::bn_add_relu_backward cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t *dyp = dy.const_data_ptr<scalar_t>(), *outp = out.const_data_ptr<scalar_t>(),
                   *xp = x.const_data_ptr<scalar_t>();
    scalar_t* gp = gres.defined() ? gres.mutable_data_ptr<scalar_t>() : nullptr;
    scalar_t* dxp = dx.mutable_data_ptr<scalar_t>();
    const auto mv = values<acc_t>(mean);
    const auto inv = values<double>(invstd), w = values<double>(weight);
    const double n = static_cast<double>(g.count());
    // dx = w*invstd * (g - [training] (sum(g) + x̂ * sum(g*x̂)) / n), x̂ = (x - mean) * invstd:
    // k1 * g + k2 * (x - mean) + k3 per channel. With the residual, pass 1 writes g and pass 2
    // reads it back instead of dy and the output.
    std::vector<acc_t> k1(g.c), k2(g.c), k3(g.c), k1t, k2t, k3t;  // channels_last: k's tiled
    const auto mt = g.nhwc ? tiled(mv, g.tile()) : std::vector<acc_t>();
    two_passes<acc_t>(
        g,
        [&](int64_t o, int64_t len, int64_t c, double& t1, double& t2) {
          grad_sums_run(dyp + o, outp + o, xp + o, len, mv[c], gp ? gp + o : nullptr, t1, t2);
        },
        [&](int64_t o, int64_t len, acc_t* a, acc_t* q) {
          grad_sums_rows(dyp + o, outp + o, xp + o, len, g.tile(), mt.data(), gp ? gp + o : nullptr, a, q);
        },
        [&](int64_t c, double t1, double t2) {
          sum_g[c] = t1;
          sum_g_xhat[c] = t2 * inv[c];
          const double a = w[c] * inv[c];
          k1[c] = static_cast<acc_t>(a);
          k2[c] = static_cast<acc_t>(training ? -a * inv[c] * sum_g_xhat[c] / n : 0.0);
          k3[c] = static_cast<acc_t>(training ? -a * t1 / n : 0.0);
        },
        [&] {
          k1t = tiled(k1, g.tile());
          k2t = tiled(k2, g.tile());
          k3t = tiled(k3, g.tile());
        },
        [&](int64_t o, int64_t len, int64_t c) {
          grad_input_run(dyp + o, outp + o, gp ? gp + o : nullptr, xp + o, len, mv[c], k1[c], k2[c], k3[c], dxp + o);
        },
        [&](int64_t o, int64_t len) {
          grad_input_rows(dyp + o, outp + o, gp ? gp + o : nullptr, xp + o, len, g.tile(), mt.data(), k1t.data(),
                          k2t.data(), k3t.data(), dxp + o);
        });
  });
  return {dx, gres, from(sum_g_xhat, weight.scalar_type()), from(sum_g, weight.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_relu_cpu(const at::Tensor& x, const at::Tensor& weight,
                                                           const at::Tensor& bias, at::Tensor& running_mean,
                                                           at::Tensor& running_var, bool training, double momentum,
                                                           double eps) {
  return bn_add_relu_cpu(x, at::Tensor(), weight, bias, running_mean, running_var, training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_relu_backward_cpu(const at::Tensor& grad_out, const at::Tensor& x,
                                                                    const at::Tensor& out, const at::Tensor& weight,
                                                                    const at::Tensor& mean, const at::Tensor& invstd,
                                                                    bool training,
                                                                    const std::optional<at::Tensor>& /*bias*/) {
  // (the mask from the output: the CPU kernels read it in the same pass as x)
  auto [dx, g, dw, db] = bn_add_relu_backward_impl(grad_out, x, out, weight, mean, invstd, training, false);
  return {dx, dw, db};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_add_relu_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& out, const at::Tensor& weight,
    const at::Tensor& mean, const at::Tensor& invstd, bool training) {
  return bn_add_relu_backward_impl(grad_out, x, out, weight, mean, invstd, training, true);
}

}  // namespace

TORCH_LIBRARY_IMPL(dlrun, CPU, m) {
  m.impl("bn_relu", TORCH_FN(bn_relu_cpu));
  m.impl("bn_relu_backward", TORCH_FN(bn_relu_backward_cpu));
  m.impl("bn_add_relu", TORCH_FN(bn_add_relu_cpu));
  m.impl("bn_add_relu_backward", TORCH_FN(bn_add_relu_backward_cpu));
}

}  // namespace dlrun::kernels
