// CUDA implementation of dlrun::bn_relu, dlrun::bn_add_relu and their backwards (what they
// compute: ops.h; the reference they are tested against: bn_relu.cpp), for float32, float64,
// fp16 and bf16 inputs in NCHW or channels_last, any batch and spatial size, on the current
// stream.
//
// Forward, training: (1) per-channel partial statistics over chunks of the batch; (2) a
// finalize that merges each channel's chunks, writes mean and inverse std and updates the
// running statistics (unbiased variance, as BatchNorm2d); (3) one elementwise pass: normalise,
// scale, shift, [add the residual,] ReLU. Eval skips (1) and (2). Backward: (1) per-channel
// partial sums of g = dy * (out > 0) and g * x̂; (2) their totals; (3) one elementwise pass for
// dx (and, for bn_add_relu, g itself: the residual's gradient). Statistics, parameters and
// arithmetic in the op-math type (float32; float64 for float64 inputs).
//
// Three sets of kernels, by memory format:
//
// channels_last, vectorised (bn_relu_nhwc_vec.cuh; vec_plan below says when): fp16/bf16 with C
// a multiple of 8, float32 with C a multiple of 4, fewer than 2^31 values, every activation
// pointer 16-byte aligned. Each thread owns 16 bytes of a row (8 or 4 channels), loads and stores
// them as one vector, keeps those channels' constants in registers, and indexes in 32 bits.
// Statistics are float32 sums of x - K and (x - K)^2 with K the channel's value in row 0 (no
// division per value; why it is accurate: the header), chunks capped at 1,024 rows a thread,
// merged per channel in float64 by one warp per channel. Backward: one reduction pass, a warp-
// per-channel finalize, one elementwise pass; in evaluation the reduction pass writes dx (and g)
// itself, so the activations are read once. Grids are sized to one wave of resident blocks
// (cudaOccupancyMaxActiveBlocksPerMultiprocessor).
//
// channels_last, scalar (bn_relu_device.cuh; the fallback: float64, other channel counts,
// unaligned views, 2^31 values or more): blocks are tiles of 32 channels x 8 rows, so a warp
// reads 32 neighbouring channels of one row, each thread a Welford accumulator, merged with
// Chan's formula; one thread per channel merges the chunks.
//
// NCHW (bn_relu_device.cuh): blocks walk one channel's values, Welford/Chan as above; the plane
// and channel of a flat index come from ATen's IntDivider (a multiply and a shift in 32-bit
// indexing, which tensors under 2^31 values use). H*W = 1 lies as channels_last does and takes
// the channels_last kernels.
//
// This file checks the arguments, launches the kernels and registers the operators for the CUDA
// dispatch key; the grids and the vectorised path's plan are bn_relu_launch.cuh's.
//
// The vectorised kernels have not yet run on a GPU (none was available when they were written):
// the GPU-labelled tests in tests/kernels/ compare them with the CPU kernels, themselves tested
// against the reference, and the first-use self-check (self_check.cpp: 40 channels) takes them.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/detail/IntegerDivider.cuh>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "kernels/bn_relu_device.cuh"
#include "kernels/bn_relu_launch.cuh"
#include "kernels/bn_relu_nhwc_vec.cuh"

#include <cstdint>
#include <limits>
#include <tuple>

// The dtypes of the vectorised path (float64 keeps the scalar kernels).
#define DLRUN_DISPATCH_VEC_TYPES(TYPE, NAME, ...)                                                   \
  AT_DISPATCH_SWITCH(TYPE, NAME, AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__)                          \
                                     AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__)                       \
                                         AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__))

namespace dlrun::kernels {
namespace {

using namespace bn_cuda;

void check(const char* op, const at::Tensor& x, std::initializer_list<std::pair<const char*, const at::Tensor*>> params) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 4, op, ": expected a 4-D CUDA input, got ", x.sizes(), " on ", x.device());
  TORCH_CHECK(x.is_floating_point(), op, ": expected a floating input, got ", x.scalar_type());
  TORCH_CHECK(x.size(1) <= std::numeric_limits<int32_t>::max(), op, ": too many channels: ", x.size(1));
  for (const auto& [name, t] : params) {
    TORCH_CHECK(t->defined() && t->dim() == 1 && t->size(0) == x.size(1), op, ": expected ", name, " of shape (",
                x.size(1), ") for input of shape ", x.sizes(), ", got ", t->defined() ? t->sizes() : c10::IntArrayRef{});
    TORCH_CHECK(t->device() == x.device(), op, ": ", name, " is on ", t->device(), ", input on ", x.device());
  }
}

// A per-channel vector in the op-math type, dense (the kernels read parameters at full precision
// whatever their dtype).
at::Tensor acc(const at::Tensor& t, at::ScalarType acc_dtype) { return t.to(acc_dtype).contiguous(); }

// bn_relu (residual undefined) and bn_add_relu.
std::tuple<at::Tensor, at::Tensor, at::Tensor> forward_cuda(const char* op, const at::Tensor& x_in,
                                                            const at::Tensor& residual_in, const at::Tensor& weight_in,
                                                            const at::Tensor& bias_in, at::Tensor& running_mean,
                                                            at::Tensor& running_var, bool training, double momentum,
                                                            double eps) {
  check(op, x_in,
        {{"weight", &weight_in}, {"bias", &bias_in}, {"running_mean", &running_mean}, {"running_var", &running_var}});
  TORCH_CHECK(running_mean.is_contiguous() && running_var.is_contiguous(), op,
              ": running statistics must be contiguous");
  TORCH_CHECK(running_mean.scalar_type() == running_var.scalar_type(), op,
              ": running_mean and running_var differ in dtype: ", running_mean.scalar_type(), " and ",
              running_var.scalar_type());
  if (residual_in.defined())
    TORCH_CHECK(residual_in.sizes() == x_in.sizes() && residual_in.device() == x_in.device(), op,
                ": expected residual of the input's shape ", x_in.sizes(), " on ", x_in.device(), ", got ",
                residual_in.sizes(), " on ", residual_in.device());
  const c10::cuda::CUDAGuard guard(x_in.device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor x = dense(x_in);
  const Shape s = shape_of(x);
  TORCH_CHECK(!training || s.count > 1, op, ": training needs more than one value per channel, got input of shape ",
              x.sizes());
  const auto acc_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor out = at::empty_like(x);
  if (s.numel == 0)  // eval of an empty batch, or no channels: nothing to compute
    return {out, running_mean.to(acc_dtype, false, /*copy=*/true), (running_var.to(acc_dtype) + eps).rsqrt()};
  // The residual, cast to x's dtype, is added in the op-math type before the output's rounding.
  const at::Tensor residual =
      residual_in.defined() ? residual_in.to(x.scalar_type()).contiguous(x.suggest_memory_format()) : at::Tensor();
  const auto opts = x.options().dtype(acc_dtype);
  const VecPlan vp = vec_plan(s, x.scalar_type(),
                              {x.const_data_ptr(), residual.defined() ? residual.const_data_ptr() : nullptr,
                               out.const_data_ptr()});
  at::Tensor mean, invstd;
  if (training && vp.ok) {
    mean = at::empty({s.channels}, opts);
    invstd = at::empty({s.channels}, opts);
    DLRUN_DISPATCH_VEC_TYPES(x.scalar_type(), "dlrun::bn_relu stats", [&] {
      const VecChunks ch = vec_chunks(vp, resident_blocks(vec::stats_partial_vec<scalar_t>, vp.block));
      auto p_s1 = at::empty({s.channels, ch.count}, opts), p_s2 = at::empty({s.channels, ch.count}, opts);
      vec::stats_partial_vec<scalar_t><<<dim3(vp.tiles, ch.count), vp.block, 0, stream>>>(
          x.const_data_ptr<scalar_t>(), vp.cv, vp.rows, ch.rows, p_s1.mutable_data_ptr<float>(),
          p_s2.mutable_data_ptr<float>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      using in_t = scalar_t;
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, running_mean.scalar_type(), "dlrun::bn_relu running",
                                      [&] {
        using stat_t = scalar_t;
        vec::stats_final_vec<in_t, stat_t><<<warp_blocks(s.channels), kThreads, 0, stream>>>(
            x.const_data_ptr<in_t>(), p_s1.const_data_ptr<float>(), p_s2.const_data_ptr<float>(),
            static_cast<uint32_t>(s.channels), ch.count, static_cast<double>(s.count), momentum, eps, mean.mutable_data_ptr<float>(),
            invstd.mutable_data_ptr<float>(), running_mean.mutable_data_ptr<stat_t>(),
            running_var.mutable_data_ptr<stat_t>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
  } else if (training) {
    const Chunks ch = chunks_for(s);
    auto p_mean = at::empty({s.channels, ch.count}, opts), p_m2 = at::empty({s.channels, ch.count}, opts);
    auto p_n = at::empty({s.channels, ch.count}, x.options().dtype(at::kLong));
    mean = at::empty({s.channels}, opts);
    invstd = at::empty({s.channels}, opts);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "dlrun::bn_relu stats", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      if (s.nhwc) {
        stats_partial_nhwc<scalar_t, acc_t>
            <<<dim3((s.channels + kTileC - 1) / kTileC, ch.count), kTile, 0, stream>>>(
                x.const_data_ptr<scalar_t>(), s.channels, s.count, ch.len, p_mean.mutable_data_ptr<acc_t>(),
                p_m2.mutable_data_ptr<acc_t>(), p_n.mutable_data_ptr<int64_t>());
      } else if (small_indices(s)) {
        using index_t = uint32_t;
        stats_partial<scalar_t, acc_t, index_t><<<dim3(s.channels, ch.count), kThreads, 0, stream>>>(
            x.const_data_ptr<scalar_t>(), Nchw<index_t>(s.hw, s.channels), s.count, ch.len,
            p_mean.mutable_data_ptr<acc_t>(), p_m2.mutable_data_ptr<acc_t>(), p_n.mutable_data_ptr<int64_t>());
      } else {
        stats_partial<scalar_t, acc_t, int64_t><<<dim3(s.channels, ch.count), kThreads, 0, stream>>>(
            x.const_data_ptr<scalar_t>(), Nchw<int64_t>(s.hw, s.channels), s.count, ch.len,
            p_mean.mutable_data_ptr<acc_t>(), p_m2.mutable_data_ptr<acc_t>(), p_n.mutable_data_ptr<int64_t>());
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      const auto stat_dtype = running_mean.scalar_type();
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, stat_dtype, "dlrun::bn_relu running", [&] {
        using stat_t = scalar_t;
        stats_final<acc_t, stat_t><<<(s.channels + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
            p_mean.const_data_ptr<acc_t>(), p_m2.const_data_ptr<acc_t>(), p_n.const_data_ptr<int64_t>(), s.channels,
            ch.count, momentum, eps, mean.mutable_data_ptr<acc_t>(), invstd.mutable_data_ptr<acc_t>(),
            running_mean.mutable_data_ptr<stat_t>(), running_var.mutable_data_ptr<stat_t>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
  } else {
    // A copy: autograd saves the mean, which must not follow later updates of the buffer.
    mean = running_mean.to(acc_dtype, false, /*copy=*/true);
    invstd = (running_var.to(acc_dtype) + eps).rsqrt();
  }
  const at::Tensor weight = acc(weight_in, acc_dtype), bias = acc(bias_in, acc_dtype);
  if (vp.ok) {
    // (invstd * weight is multiplied inside the kernel: no launch of its own)
    DLRUN_DISPATCH_VEC_TYPES(x.scalar_type(), "dlrun::bn_relu normalize", [&] {
      const float *m = mean.const_data_ptr<float>(), *is = invstd.const_data_ptr<float>(),
                  *w = weight.const_data_ptr<float>(), *b = bias.const_data_ptr<float>();
      const scalar_t* xp = x.const_data_ptr<scalar_t>();
      scalar_t* o = out.mutable_data_ptr<scalar_t>();
      if (residual.defined()) {
        const auto kernel = vec::normalize_relu_vec<scalar_t, true>;
        kernel<<<vec_grid(vp, resident_blocks(kernel, vp.block)), vp.block, 0, stream>>>(
            xp, residual.const_data_ptr<scalar_t>(), vp.cv, vp.rows, m, is, w, b, o);
      } else {
        const auto kernel = vec::normalize_relu_vec<scalar_t, false>;
        kernel<<<vec_grid(vp, resident_blocks(kernel, vp.block)), vp.block, 0, stream>>>(xp, nullptr, vp.cv, vp.rows,
                                                                                          m, is, w, b, o);
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
    return {out, mean, invstd};
  }
  const at::Tensor scale = invstd * weight;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "dlrun::bn_relu normalize", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* r = residual.defined() ? residual.const_data_ptr<scalar_t>() : nullptr;
    const acc_t *m = mean.const_data_ptr<acc_t>(), *sc = scale.const_data_ptr<acc_t>(), *b = bias.const_data_ptr<acc_t>();
    if (s.nhwc) {
      normalize_relu_nhwc<scalar_t, acc_t><<<nhwc_grid(s), kTile, 0, stream>>>(
          x.const_data_ptr<scalar_t>(), r, s.channels, s.count, m, sc, b, out.mutable_data_ptr<scalar_t>());
    } else if (small_indices(s)) {
      normalize_relu<scalar_t, acc_t, uint32_t><<<blocks_for(s.numel), kThreads, 0, stream>>>(
          x.const_data_ptr<scalar_t>(), r, Nchw<uint32_t>(s.hw, s.channels), s.numel, m, sc, b,
          out.mutable_data_ptr<scalar_t>());
    } else {
      normalize_relu<scalar_t, acc_t, int64_t><<<blocks_for(s.numel), kThreads, 0, stream>>>(
          x.const_data_ptr<scalar_t>(), r, Nchw<int64_t>(s.hw, s.channels), s.numel, m, sc, b,
          out.mutable_data_ptr<scalar_t>());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {out, mean, invstd};
}

// bn_relu_backward -> (dx, undefined, dweight, dbias); bn_add_relu_backward also returns the
// residual's gradient g. `bias` (bn_relu's, optional): the vectorised kernels recompute the ReLU's
// mask from x instead of reading the output (bn_relu_nhwc_vec.cuh, "backward").
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward_cuda(const char* op, const at::Tensor& grad_out_in,
                                                                         const at::Tensor& x_in,
                                                                         const at::Tensor& out_in,
                                                                         const at::Tensor& weight_in,
                                                                         const at::Tensor& mean,
                                                                         const at::Tensor& invstd, bool training,
                                                                         bool residual_grad,
                                                                         const std::optional<at::Tensor>& bias_in) {
  check(op, x_in, {{"weight", &weight_in}, {"save_mean", &mean}, {"save_invstd", &invstd}});
  TORCH_CHECK(grad_out_in.sizes() == x_in.sizes() && out_in.sizes() == x_in.sizes(), op, ": grad_out ",
              grad_out_in.sizes(), " and output ", out_in.sizes(), " must have the input's shape ", x_in.sizes());
  TORCH_CHECK(grad_out_in.device() == x_in.device() && out_in.device() == x_in.device(), op, ": grad_out on ",
              grad_out_in.device(), " and output on ", out_in.device(), ", input on ", x_in.device());
  const auto acc_dtype = x_in.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  TORCH_CHECK(mean.scalar_type() == acc_dtype && invstd.scalar_type() == acc_dtype, op,
              ": expected save_mean and save_invstd in ", acc_dtype, ", got ", mean.scalar_type(), " and ",
              invstd.scalar_type());
  const c10::cuda::CUDAGuard guard(x_in.device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto format = x_in.suggest_memory_format();
  const at::Tensor x = x_in.contiguous(format);
  const Shape s = shape_of(x);
  at::Tensor dx = at::empty_like(x);
  at::Tensor g = residual_grad ? at::empty_like(x) : at::Tensor();
  if (s.numel == 0)
    return {dx, g, at::zeros_like(weight_in), at::zeros_like(weight_in)};
  const at::Tensor out = out_in.to(x.scalar_type()).contiguous(format);
  const at::Tensor dy = grad_out_in.to(x.scalar_type()).contiguous(format);
  const at::Tensor weight = acc(weight_in, acc_dtype), mean_c = mean.contiguous(), invstd_c = invstd.contiguous();
  const auto opts = x.options().dtype(acc_dtype);
  const VecPlan vp = vec_plan(s, x.scalar_type(),
                              {x.const_data_ptr(), out.const_data_ptr(), dy.const_data_ptr(), dx.const_data_ptr(),
                               g.defined() ? g.const_data_ptr() : nullptr});
  // The mask from x (bn_relu with its bias) or from the output (bn_add_relu; a caller without the bias).
  const bool mask_from_x = !residual_grad && bias_in.has_value() && bias_in->defined();
  if (mask_from_x)
    TORCH_CHECK(bias_in->dim() == 1 && bias_in->size(0) == x.size(1) && bias_in->device() == x.device(), op,
                ": expected bias of shape (", x.size(1), ") on ", x.device(), ", got ", bias_in->sizes(), " on ",
                bias_in->device());
  if (vp.ok) {
    // One reduction pass (in evaluation also the only pass: it writes dx and g as well), a
    // finalize of one warp per channel, and in training one elementwise pass for dx and g.
    at::Tensor sum_dy = at::empty({s.channels}, opts), sum_dy_xhat = at::empty({s.channels}, opts);
    const at::Tensor bias = mask_from_x ? acc(*bias_in, acc_dtype) : at::Tensor();
    DLRUN_DISPATCH_VEC_TYPES(x.scalar_type(), "dlrun::bn_relu_backward", [&] {
      if (mask_from_x)
        vec_backward<scalar_t, true>(vp, s, training, dy, x, out, weight, bias, mean_c, invstd_c, dx, g, sum_dy,
                                     sum_dy_xhat, stream);
      else
        vec_backward<scalar_t, false>(vp, s, training, dy, x, out, weight, bias, mean_c, invstd_c, dx, g, sum_dy,
                                      sum_dy_xhat, stream);
    });
    return {dx, g, sum_dy_xhat.to(weight_in.scalar_type()), sum_dy.to(weight_in.scalar_type())};
  }
  const Chunks ch = chunks_for(s);
  auto p_dy = at::empty({s.channels, ch.count}, opts), p_dy_xhat = at::empty({s.channels, ch.count}, opts);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "dlrun::bn_relu_backward sums", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t *dyp = dy.const_data_ptr<scalar_t>(), *xp = x.const_data_ptr<scalar_t>(),
                   *outp = out.const_data_ptr<scalar_t>();
    const acc_t *m = mean_c.const_data_ptr<acc_t>(), *is = invstd_c.const_data_ptr<acc_t>();
    acc_t *pa = p_dy.mutable_data_ptr<acc_t>(), *pb = p_dy_xhat.mutable_data_ptr<acc_t>();
    if (s.nhwc) {
      grad_partial_nhwc<scalar_t, acc_t><<<dim3((s.channels + kTileC - 1) / kTileC, ch.count), kTile, 0, stream>>>(
          dyp, xp, outp, s.channels, s.count, ch.len, m, is, pa, pb);
    } else if (small_indices(s)) {
      grad_partial<scalar_t, acc_t, uint32_t><<<dim3(s.channels, ch.count), kThreads, 0, stream>>>(
          dyp, xp, outp, Nchw<uint32_t>(s.hw, s.channels), s.count, ch.len, m, is, pa, pb);
    } else {
      grad_partial<scalar_t, acc_t, int64_t><<<dim3(s.channels, ch.count), kThreads, 0, stream>>>(
          dyp, xp, outp, Nchw<int64_t>(s.hw, s.channels), s.count, ch.len, m, is, pa, pb);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  const at::Tensor sum_dy = p_dy.sum(1), sum_dy_xhat = p_dy_xhat.sum(1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "dlrun::bn_relu_backward dx", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const GradConstants<acc_t> k{mean_c.const_data_ptr<acc_t>(),  invstd_c.const_data_ptr<acc_t>(),
                                 weight.const_data_ptr<acc_t>(),  sum_dy.const_data_ptr<acc_t>(),
                                 sum_dy_xhat.const_data_ptr<acc_t>(), static_cast<acc_t>(1.0 / static_cast<double>(s.count)),
                                 training};
    const scalar_t *dyp = dy.const_data_ptr<scalar_t>(), *xp = x.const_data_ptr<scalar_t>(),
                   *outp = out.const_data_ptr<scalar_t>();
    scalar_t* gp = g.defined() ? g.mutable_data_ptr<scalar_t>() : nullptr;
    scalar_t* dxp = dx.mutable_data_ptr<scalar_t>();
    if (s.nhwc) {
      grad_input_nhwc<scalar_t, acc_t><<<nhwc_grid(s), kTile, 0, stream>>>(dyp, xp, outp, s.channels, s.count, k, dxp,
                                                                          gp);
    } else if (small_indices(s)) {
      grad_input<scalar_t, acc_t, uint32_t><<<blocks_for(s.numel), kThreads, 0, stream>>>(
          dyp, xp, outp, Nchw<uint32_t>(s.hw, s.channels), s.numel, k, dxp, gp);
    } else {
      grad_input<scalar_t, acc_t, int64_t><<<blocks_for(s.numel), kThreads, 0, stream>>>(
          dyp, xp, outp, Nchw<int64_t>(s.hw, s.channels), s.numel, k, dxp, gp);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {dx, g, sum_dy_xhat.to(weight_in.scalar_type()), sum_dy.to(weight_in.scalar_type())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_relu_cuda(const at::Tensor& x, const at::Tensor& weight,
                                                            const at::Tensor& bias, at::Tensor& running_mean,
                                                            at::Tensor& running_var, bool training, double momentum,
                                                            double eps) {
  return forward_cuda("dlrun::bn_relu", x, at::Tensor(), weight, bias, running_mean, running_var, training, momentum,
                      eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_add_relu_cuda(const at::Tensor& x, const at::Tensor& residual,
                                                                const at::Tensor& weight, const at::Tensor& bias,
                                                                at::Tensor& running_mean, at::Tensor& running_var,
                                                                bool training, double momentum, double eps) {
  return forward_cuda("dlrun::bn_add_relu", x, residual, weight, bias, running_mean, running_var, training, momentum,
                      eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_relu_backward_cuda(const at::Tensor& grad_out, const at::Tensor& x,
                                                                     const at::Tensor& out, const at::Tensor& weight,
                                                                     const at::Tensor& mean, const at::Tensor& invstd,
                                                                     bool training,
                                                                     const std::optional<at::Tensor>& bias) {
  auto [dx, g, dw, db] =
      backward_cuda("dlrun::bn_relu_backward", grad_out, x, out, weight, mean, invstd, training, false, bias);
  return {dx, dw, db};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_add_relu_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& out, const at::Tensor& weight,
    const at::Tensor& mean, const at::Tensor& invstd, bool training) {
  return backward_cuda("dlrun::bn_add_relu_backward", grad_out, x, out, weight, mean, invstd, training, true,
                       std::nullopt);
}

}  // namespace

TORCH_LIBRARY_IMPL(dlrun, CUDA, m) {
  m.impl("bn_relu", TORCH_FN(bn_relu_cuda));
  m.impl("bn_relu_backward", TORCH_FN(bn_relu_backward_cuda));
  m.impl("bn_add_relu", TORCH_FN(bn_add_relu_cuda));
  m.impl("bn_add_relu_backward", TORCH_FN(bn_add_relu_backward_cuda));
}

}  // namespace dlrun::kernels
