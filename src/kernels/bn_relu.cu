// CUDA implementation of dlrun::bn_relu and dlrun::bn_relu_backward (what they compute:
// ops.h; the reference they are tested against: bn_relu.cpp), for float32, float64, fp16 and
// bf16 inputs in NCHW or channels_last, any batch and spatial size, on the current stream.
//
// Forward, training: (1) per-channel partial statistics — a grid of (channel, chunk) blocks,
// each thread a Welford accumulator over a strided run of the chunk, merged across the block
// with Chan's formula (stable for large N*H*W, unlike sum/sum-of-squares); (2) one thread per
// channel merges its chunks, writes mean and inverse std and updates the running statistics
// (unbiased variance, as BatchNorm2d); (3) one elementwise pass: normalise, scale, shift, ReLU.
// Eval skips (1) and (2). Backward: (1) per-channel partial sums of g = dy * (out > 0) and
// g * x̂ in the same grid; (2) their totals; (3) one elementwise pass for dx. Statistics and
// arithmetic in the op-math type (float32, float64 for float64).
//
// Not yet run on a GPU (none was available when it was written): the GPU-labelled tests in
// tests/kernels/ compare it with the reference.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace dlrun::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxChunks = 256;  // blocks per channel in the reduction passes

// Where element j (0 <= j < N*H*W) of channel c lives.
struct Layout {
  int64_t channels, hw;
  bool channels_last;
  __device__ __forceinline__ int64_t offset(int64_t c, int64_t j) const {
    return channels_last ? j * channels + c : (j / hw) * channels * hw + c * hw + (j % hw);
  }
  __device__ __forceinline__ int64_t channel_of(int64_t i) const {
    return channels_last ? i % channels : (i / hw) % channels;
  }
};

template <typename acc_t>
struct Welford {
  acc_t mean = 0, m2 = 0;
  int64_t n = 0;
  __device__ void add(acc_t v) {
    ++n;
    const acc_t d = v - mean;
    mean += d / static_cast<acc_t>(n);
    m2 += d * (v - mean);
  }
  __device__ void merge(const Welford& o) {
    if (o.n == 0) return;
    if (n == 0) {
      *this = o;
      return;
    }
    const int64_t total = n + o.n;
    const acc_t d = o.mean - mean;
    const acc_t w = static_cast<acc_t>(o.n) / static_cast<acc_t>(total);
    mean += d * w;
    m2 += o.m2 + d * d * static_cast<acc_t>(n) * w;
    n = total;
  }
};

// (1) forward: block (c, chunk) -> partial Welford of channel c over its chunk.
template <typename scalar_t, typename acc_t>
__global__ void stats_partial(const scalar_t* __restrict__ x, Layout l, int64_t count, int64_t chunk_len,
                              acc_t* __restrict__ p_mean, acc_t* __restrict__ p_m2, int64_t* __restrict__ p_n) {
  const int64_t c = blockIdx.x, chunk = blockIdx.y;
  const int64_t begin = chunk * chunk_len, end = begin + chunk_len < count ? begin + chunk_len : count;
  Welford<acc_t> w;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) w.add(static_cast<acc_t>(x[l.offset(c, j)]));
  __shared__ acc_t s_mean[kThreads], s_m2[kThreads];
  __shared__ int64_t s_n[kThreads];
  s_mean[threadIdx.x] = w.mean;
  s_m2[threadIdx.x] = w.m2;
  s_n[threadIdx.x] = w.n;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      Welford<acc_t> a{s_mean[threadIdx.x], s_m2[threadIdx.x], s_n[threadIdx.x]};
      const Welford<acc_t> b{s_mean[threadIdx.x + stride], s_m2[threadIdx.x + stride], s_n[threadIdx.x + stride]};
      a.merge(b);
      s_mean[threadIdx.x] = a.mean;
      s_m2[threadIdx.x] = a.m2;
      s_n[threadIdx.x] = a.n;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int64_t k = c * gridDim.y + chunk;
    p_mean[k] = s_mean[0];
    p_m2[k] = s_m2[0];
    p_n[k] = s_n[0];
  }
}

// (2) forward: one thread per channel merges the chunks; mean, inverse std, running statistics.
template <typename acc_t, typename stat_t>
__global__ void stats_final(const acc_t* __restrict__ p_mean, const acc_t* __restrict__ p_m2,
                            const int64_t* __restrict__ p_n, int64_t channels, int64_t chunks, double momentum,
                            double eps, acc_t* __restrict__ mean, acc_t* __restrict__ invstd,
                            stat_t* __restrict__ running_mean, stat_t* __restrict__ running_var) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  Welford<acc_t> w;
  for (int64_t k = 0; k < chunks; ++k) w.merge({p_mean[c * chunks + k], p_m2[c * chunks + k], p_n[c * chunks + k]});
  const acc_t var = w.m2 / static_cast<acc_t>(w.n);
  mean[c] = w.mean;
  invstd[c] = static_cast<acc_t>(1) / sqrt(var + static_cast<acc_t>(eps));
  const acc_t unbiased = w.m2 / static_cast<acc_t>(w.n - 1);
  const acc_t m = static_cast<acc_t>(momentum);
  running_mean[c] = static_cast<stat_t>((1 - m) * static_cast<acc_t>(running_mean[c]) + m * w.mean);
  running_var[c] = static_cast<stat_t>((1 - m) * static_cast<acc_t>(running_var[c]) + m * unbiased);
}

// (3) forward: out = max(0, (x - mean) * invstd * weight + bias).
template <typename scalar_t, typename acc_t, typename param_t>
__global__ void normalize_relu(const scalar_t* __restrict__ x, Layout l, int64_t numel, const acc_t* __restrict__ mean,
                               const acc_t* __restrict__ invstd, const param_t* __restrict__ weight,
                               const param_t* __restrict__ bias, scalar_t* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < numel;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = l.channel_of(i);
    const acc_t v = (static_cast<acc_t>(x[i]) - mean[c]) * invstd[c] * static_cast<acc_t>(weight[c]) +
                    static_cast<acc_t>(bias[c]);
    out[i] = static_cast<scalar_t>(v > 0 ? v : acc_t(0));
  }
}

// (1) backward: block (c, chunk) -> partial sums of g and g * x̂, g = dy where out > 0.
template <typename scalar_t, typename acc_t>
__global__ void grad_partial(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ x,
                             const scalar_t* __restrict__ out, Layout l, int64_t count, int64_t chunk_len,
                             const acc_t* __restrict__ mean, const acc_t* __restrict__ invstd,
                             acc_t* __restrict__ p_dy, acc_t* __restrict__ p_dy_xhat) {
  const int64_t c = blockIdx.x, chunk = blockIdx.y;
  const int64_t begin = chunk * chunk_len, end = begin + chunk_len < count ? begin + chunk_len : count;
  acc_t a = 0, b = 0;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const int64_t o = l.offset(c, j);
    if (static_cast<acc_t>(out[o]) > 0) {
      const acc_t g = static_cast<acc_t>(dy[o]);
      a += g;
      b += g * (static_cast<acc_t>(x[o]) - mean[c]) * invstd[c];
    }
  }
  __shared__ acc_t s_a[kThreads], s_b[kThreads];
  s_a[threadIdx.x] = a;
  s_b[threadIdx.x] = b;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      s_a[threadIdx.x] += s_a[threadIdx.x + stride];
      s_b[threadIdx.x] += s_b[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    p_dy[c * gridDim.y + chunk] = s_a[0];
    p_dy_xhat[c * gridDim.y + chunk] = s_b[0];
  }
}

// (3) backward: dx = weight * invstd * (g - [training] (sum_dy + x̂ * sum_dy_xhat) / count).
template <typename scalar_t, typename acc_t, typename param_t>
__global__ void grad_input(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ x,
                           const scalar_t* __restrict__ out, Layout l, int64_t numel, double count,
                           const acc_t* __restrict__ mean, const acc_t* __restrict__ invstd,
                           const param_t* __restrict__ weight, const acc_t* __restrict__ sum_dy,
                           const acc_t* __restrict__ sum_dy_xhat, bool training, scalar_t* __restrict__ dx) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < numel;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = l.channel_of(i);
    const acc_t g = static_cast<acc_t>(out[i]) > 0 ? static_cast<acc_t>(dy[i]) : acc_t(0);
    acc_t v = g;
    if (training) {
      const acc_t xhat = (static_cast<acc_t>(x[i]) - mean[c]) * invstd[c];
      v -= (sum_dy[c] + xhat * sum_dy_xhat[c]) / static_cast<acc_t>(count);
    }
    dx[i] = static_cast<scalar_t>(v * invstd[c] * static_cast<acc_t>(weight[c]));
  }
}

// ---- host side -----------------------------------------------------------------------------

Layout layout_of(const at::Tensor& x) {
  const bool cl = x.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
  return {x.size(1), x.size(2) * x.size(3), cl};
}

// x in its own memory format, dense (NCHW-contiguous or channels_last-contiguous).
at::Tensor dense(const at::Tensor& x) { return x.contiguous(x.suggest_memory_format()); }

int blocks_for(int64_t numel) {
  return static_cast<int>(std::min<int64_t>((numel + kThreads - 1) / kThreads, int64_t{65535} * 8));
}

void check(const char* op, const at::Tensor& x, std::initializer_list<std::pair<const char*, const at::Tensor*>> params) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 4, op, ": expected a 4-D CUDA input, got ", x.sizes(), " on ", x.device());
  TORCH_CHECK(x.size(0) * x.size(2) * x.size(3) > 0, op, ": empty input of shape ", x.sizes());
  for (const auto& [name, t] : params) {
    TORCH_CHECK(t->defined() && t->dim() == 1 && t->size(0) == x.size(1), op, ": expected ", name, " of shape (",
                x.size(1), ") for input of shape ", x.sizes(), ", got ", t->defined() ? t->sizes() : c10::IntArrayRef{});
    TORCH_CHECK(t->device() == x.device(), op, ": ", name, " is on ", t->device(), ", input on ", x.device());
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_relu_cuda(const at::Tensor& x_in, const at::Tensor& weight_in,
                                                            const at::Tensor& bias_in, at::Tensor& running_mean,
                                                            at::Tensor& running_var, bool training, double momentum,
                                                            double eps) {
  check("dlrun::bn_relu", x_in,
        {{"weight", &weight_in}, {"bias", &bias_in}, {"running_mean", &running_mean}, {"running_var", &running_var}});
  TORCH_CHECK(running_mean.is_contiguous() && running_var.is_contiguous(),
              "dlrun::bn_relu: running statistics must be contiguous");
  TORCH_CHECK(running_mean.scalar_type() == running_var.scalar_type(),
              "dlrun::bn_relu: running_mean and running_var differ in dtype");
  const c10::cuda::CUDAGuard guard(x_in.device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor x = dense(x_in);
  const at::Tensor weight = weight_in.contiguous().to(running_mean.scalar_type());
  const at::Tensor bias = bias_in.contiguous().to(running_mean.scalar_type());
  const Layout l = layout_of(x);
  const int64_t channels = x.size(1), count = x.size(0) * l.hw, numel = x.numel();
  TORCH_CHECK(!training || count > 1, "dlrun::bn_relu: training needs more than one value per channel, got input "
              "of shape ", x.sizes());
  at::Tensor out = at::empty_like(x);
  const auto acc_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto opts = x.options().dtype(acc_dtype);
  at::Tensor mean, invstd;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "dlrun::bn_relu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    if (training) {
      const int64_t chunks = std::min<int64_t>(kMaxChunks, (count + kThreads * 8 - 1) / (kThreads * 8));
      const int64_t chunk_len = (count + chunks - 1) / chunks;
      auto p_mean = at::empty({channels, chunks}, opts), p_m2 = at::empty({channels, chunks}, opts);
      auto p_n = at::empty({channels, chunks}, x.options().dtype(at::kLong));
      TORCH_CHECK(channels <= 2147483647 && chunks <= 65535, "dlrun::bn_relu: too many channels: ", channels);
      stats_partial<scalar_t, acc_t><<<dim3(channels, chunks), kThreads, 0, stream>>>(
          x.const_data_ptr<scalar_t>(), l, count, chunk_len, p_mean.mutable_data_ptr<acc_t>(),
          p_m2.mutable_data_ptr<acc_t>(), p_n.mutable_data_ptr<int64_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      mean = at::empty({channels}, opts);
      invstd = at::empty({channels}, opts);
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, running_mean.scalar_type(), "dlrun::bn_relu stats", [&] {
        using stat_t = scalar_t;
        stats_final<acc_t, stat_t><<<(channels + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
            p_mean.const_data_ptr<acc_t>(), p_m2.const_data_ptr<acc_t>(), p_n.const_data_ptr<int64_t>(), channels,
            chunks, momentum, eps, mean.mutable_data_ptr<acc_t>(), invstd.mutable_data_ptr<acc_t>(),
            running_mean.mutable_data_ptr<stat_t>(), running_var.mutable_data_ptr<stat_t>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    } else {
      mean = running_mean.to(acc_dtype);
      invstd = (running_var.to(acc_dtype) + eps).rsqrt();
    }
  });
  // The elementwise pass, dispatched on (input dtype, parameter dtype).
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "dlrun::bn_relu normalize", [&] {
    using in_t = scalar_t;
    using acc_t = at::opmath_type<in_t>;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, weight.scalar_type(), "dlrun::bn_relu params", [&] {
      normalize_relu<in_t, acc_t, scalar_t><<<blocks_for(numel), kThreads, 0, stream>>>(
          x.const_data_ptr<in_t>(), l, numel, mean.const_data_ptr<acc_t>(), invstd.const_data_ptr<acc_t>(),
          weight.const_data_ptr<scalar_t>(), bias.const_data_ptr<scalar_t>(), out.mutable_data_ptr<in_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return {out, mean, invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_relu_backward_cuda(const at::Tensor& grad_out_in,
                                                                     const at::Tensor& x_in, const at::Tensor& out_in,
                                                                     const at::Tensor& weight_in,
                                                                     const at::Tensor& mean, const at::Tensor& invstd,
                                                                     bool training) {
  check("dlrun::bn_relu_backward", x_in, {{"weight", &weight_in}, {"save_mean", &mean}, {"save_invstd", &invstd}});
  TORCH_CHECK(grad_out_in.sizes() == x_in.sizes() && out_in.sizes() == x_in.sizes(),
              "dlrun::bn_relu_backward: grad_out ", grad_out_in.sizes(), " and output ", out_in.sizes(),
              " must have the input's shape ", x_in.sizes());
  const c10::cuda::CUDAGuard guard(x_in.device());
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto format = x_in.suggest_memory_format();
  const at::Tensor x = x_in.contiguous(format);
  const at::Tensor out = out_in.contiguous(format);
  const at::Tensor dy = grad_out_in.to(x.scalar_type()).contiguous(format);
  const at::Tensor weight = weight_in.contiguous();
  const Layout l = layout_of(x);
  const int64_t channels = x.size(1), count = x.size(0) * l.hw, numel = x.numel();
  const auto acc_dtype = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  TORCH_CHECK(mean.scalar_type() == acc_dtype && invstd.scalar_type() == acc_dtype,
              "dlrun::bn_relu_backward: expected save_mean and save_invstd in ", acc_dtype, ", got ",
              mean.scalar_type());
  const auto opts = x.options().dtype(acc_dtype);
  const int64_t chunks = std::min<int64_t>(kMaxChunks, (count + kThreads * 8 - 1) / (kThreads * 8));
  const int64_t chunk_len = (count + chunks - 1) / chunks;
  auto p_dy = at::empty({channels, chunks}, opts), p_dy_xhat = at::empty({channels, chunks}, opts);
  at::Tensor dx = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "dlrun::bn_relu_backward", [&] {
    using in_t = scalar_t;
    using acc_t = at::opmath_type<in_t>;
    grad_partial<in_t, acc_t><<<dim3(channels, chunks), kThreads, 0, stream>>>(
        dy.const_data_ptr<in_t>(), x.const_data_ptr<in_t>(), out.const_data_ptr<in_t>(), l, count, chunk_len,
        mean.const_data_ptr<acc_t>(), invstd.const_data_ptr<acc_t>(), p_dy.mutable_data_ptr<acc_t>(),
        p_dy_xhat.mutable_data_ptr<acc_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  const at::Tensor sum_dy = p_dy.sum(1), sum_dy_xhat = p_dy_xhat.sum(1);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "dlrun::bn_relu_backward dx", [&] {
    using in_t = scalar_t;
    using acc_t = at::opmath_type<in_t>;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, weight.scalar_type(), "dlrun::bn_relu_backward w", [&] {
      grad_input<in_t, acc_t, scalar_t><<<blocks_for(numel), kThreads, 0, stream>>>(
          dy.const_data_ptr<in_t>(), x.const_data_ptr<in_t>(), out.const_data_ptr<in_t>(), l, numel,
          static_cast<double>(count), mean.const_data_ptr<acc_t>(), invstd.const_data_ptr<acc_t>(),
          weight.const_data_ptr<scalar_t>(), sum_dy.const_data_ptr<acc_t>(), sum_dy_xhat.const_data_ptr<acc_t>(),
          training, dx.mutable_data_ptr<in_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return {dx, sum_dy_xhat.to(weight_in.scalar_type()), sum_dy.to(weight_in.scalar_type())};
}

}  // namespace

TORCH_LIBRARY_IMPL(dlrun, CUDA, m) {
  m.impl("bn_relu", TORCH_FN(bn_relu_cuda));
  m.impl("bn_relu_backward", TORCH_FN(bn_relu_backward_cuda));
}

}  // namespace dlrun::kernels
