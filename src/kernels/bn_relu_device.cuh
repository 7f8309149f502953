// The device side of dlrun's CUDA BatchNorm kernels (bn_relu.cu, which launches them and says
// what they compute and how): the reduction and elementwise kernels for NCHW and the scalar
// channels_last kernels (one channel a thread, the fallback where the vectorised ones of
// bn_relu_nhwc_vec.cuh do not apply), their Welford/Chan accumulators and their launch
// constants. Included by bn_relu.cu (and bn_relu_nhwc_vec.cuh) alone.
#pragma once

#include <ATen/OpMathType.h>
#include <ATen/cuda/detail/IntegerDivider.cuh>
#include <c10/macros/Macros.h>

#include <limits>

namespace dlrun::kernels::bn_cuda {

using at::cuda::detail::IntDivider;

constexpr int kThreads = 256;
constexpr int64_t kMaxChunks = 256;     // reduction blocks per channel (NCHW) or channel tile, at least
constexpr int64_t kFillBlocks = 2048;   // reduction and elementwise grids aim at this many blocks
constexpr int kTileC = 32, kTileR = 8;  // channels_last blocks: 32 channels x 8 rows (kThreads)

template <typename acc_t>
__device__ __forceinline__ acc_t relu(acc_t v) {
  return v < acc_t(0) ? acc_t(0) : v;  // NaN stays NaN, as torch.relu
}

// NCHW: where value j (0 <= j < N*H*W) of channel c lives, and the channel of a flat index.
template <typename index_t>
struct Nchw {
  IntDivider<index_t> hw, channels;
  index_t hw_n, channels_n;
  Nchw(index_t hw_, index_t c_) : hw(hw_), channels(c_), hw_n(hw_), channels_n(c_) {}
  __device__ __forceinline__ index_t offset(index_t c, index_t j) const {
    const auto dm = hw.divmod(j);
    return (dm.div * channels_n + c) * hw_n + dm.mod;
  }
  __device__ __forceinline__ index_t channel_of(index_t i) const { return channels.mod(hw.div(i)); }
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

// ---- forward ---------------------------------------------------------------------------------

// (1) NCHW: block (c, chunk) -> partial Welford of channel c over values [chunk * len, +len).
template <typename scalar_t, typename acc_t, typename index_t>
__global__ void stats_partial(const scalar_t* __restrict__ x, Nchw<index_t> l, index_t count, index_t chunk_len,
                              acc_t* __restrict__ p_mean, acc_t* __restrict__ p_m2, int64_t* __restrict__ p_n) {
  const index_t c = blockIdx.x, chunk = blockIdx.y;
  const index_t begin = chunk * chunk_len, end = begin + chunk_len < count ? begin + chunk_len : count;
  Welford<acc_t> w;
  for (index_t j = begin + threadIdx.x; j < end; j += blockDim.x) w.add(static_cast<acc_t>(x[l.offset(c, j)]));
  __shared__ acc_t s_mean[kThreads], s_m2[kThreads];
  __shared__ int64_t s_n[kThreads];
  s_mean[threadIdx.x] = w.mean;
  s_m2[threadIdx.x] = w.m2;
  s_n[threadIdx.x] = w.n;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      Welford<acc_t> a{s_mean[threadIdx.x], s_m2[threadIdx.x], s_n[threadIdx.x]};
      a.merge({s_mean[threadIdx.x + stride], s_m2[threadIdx.x + stride], s_n[threadIdx.x + stride]});
      s_mean[threadIdx.x] = a.mean;
      s_m2[threadIdx.x] = a.m2;
      s_n[threadIdx.x] = a.n;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int64_t k = static_cast<int64_t>(c) * gridDim.y + chunk;
    p_mean[k] = s_mean[0];
    p_m2[k] = s_m2[0];
    p_n[k] = s_n[0];
  }
}

// (1) channels_last: block (channel tile, chunk of rows) -> partial Welford of each of its
// channels over the chunk's rows. Threads past the last channel take part in the block's
// reduction with empty accumulators (no early return before __syncthreads).
template <typename scalar_t, typename acc_t>
__global__ void stats_partial_nhwc(const scalar_t* __restrict__ x, int64_t channels, int64_t rows,
                                   int64_t rows_per_chunk, acc_t* __restrict__ p_mean, acc_t* __restrict__ p_m2,
                                   int64_t* __restrict__ p_n) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(kTileC) + threadIdx.x, chunk = blockIdx.y;
  const int64_t begin = chunk * rows_per_chunk, end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  Welford<acc_t> w;
  if (c < channels)
    for (int64_t r = begin + threadIdx.y; r < end; r += kTileR) w.add(static_cast<acc_t>(x[r * channels + c]));
  __shared__ acc_t s_mean[kTileR][kTileC], s_m2[kTileR][kTileC];
  __shared__ int64_t s_n[kTileR][kTileC];
  s_mean[threadIdx.y][threadIdx.x] = w.mean;
  s_m2[threadIdx.y][threadIdx.x] = w.m2;
  s_n[threadIdx.y][threadIdx.x] = w.n;
  __syncthreads();
  for (int stride = kTileR / 2; stride > 0; stride /= 2) {
    if (threadIdx.y < stride) {
      Welford<acc_t> a{s_mean[threadIdx.y][threadIdx.x], s_m2[threadIdx.y][threadIdx.x], s_n[threadIdx.y][threadIdx.x]};
      const int y = threadIdx.y + stride;
      a.merge({s_mean[y][threadIdx.x], s_m2[y][threadIdx.x], s_n[y][threadIdx.x]});
      s_mean[threadIdx.y][threadIdx.x] = a.mean;
      s_m2[threadIdx.y][threadIdx.x] = a.m2;
      s_n[threadIdx.y][threadIdx.x] = a.n;
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < channels) {
    const int64_t k = c * gridDim.y + chunk;
    p_mean[k] = s_mean[0][threadIdx.x];
    p_m2[k] = s_m2[0][threadIdx.x];
    p_n[k] = s_n[0][threadIdx.x];
  }
}

// (2) one thread per channel merges the chunks; mean, inverse std, and the running statistics
// (moved in their own dtype's op-math type: float64 buffers stay float64).
template <typename acc_t, typename stat_t>
__global__ void stats_final(const acc_t* __restrict__ p_mean, const acc_t* __restrict__ p_m2,
                            const int64_t* __restrict__ p_n, int64_t channels, int64_t chunks, double momentum,
                            double eps, acc_t* __restrict__ mean, acc_t* __restrict__ invstd,
                            stat_t* __restrict__ running_mean, stat_t* __restrict__ running_var) {
  using upd_t = at::opmath_type<stat_t>;
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  Welford<acc_t> w;
  for (int64_t k = 0; k < chunks; ++k) w.merge({p_mean[c * chunks + k], p_m2[c * chunks + k], p_n[c * chunks + k]});
  const acc_t var = w.m2 / static_cast<acc_t>(w.n);
  mean[c] = w.mean;
  invstd[c] = static_cast<acc_t>(1) / sqrt(var + static_cast<acc_t>(eps));
  const upd_t unbiased = static_cast<upd_t>(w.m2) / static_cast<upd_t>(w.n - 1);
  const upd_t m = static_cast<upd_t>(momentum);
  running_mean[c] = static_cast<stat_t>((1 - m) * static_cast<upd_t>(running_mean[c]) + m * static_cast<upd_t>(w.mean));
  running_var[c] = static_cast<stat_t>((1 - m) * static_cast<upd_t>(running_var[c]) + m * unbiased);
}

// (3) NCHW: out = relu((x - mean) * scale + bias [+ residual]), scale = invstd * weight;
// residual may be null.
template <typename scalar_t, typename acc_t, typename index_t>
__global__ void normalize_relu(const scalar_t* __restrict__ x, const scalar_t* __restrict__ residual, Nchw<index_t> l,
                               index_t numel, const acc_t* __restrict__ mean, const acc_t* __restrict__ scale,
                               const acc_t* __restrict__ bias, scalar_t* __restrict__ out) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < numel; i += stride) {
    const index_t c = l.channel_of(i);
    acc_t v = (static_cast<acc_t>(x[i]) - mean[c]) * scale[c] + bias[c];
    if (residual != nullptr) v += static_cast<acc_t>(residual[i]);
    out[i] = static_cast<scalar_t>(relu(v));
  }
}

// (3) channels_last: block (channel tile, rows); each thread one channel, its constants in
// registers, rows strided across the grid.
template <typename scalar_t, typename acc_t>
__global__ void normalize_relu_nhwc(const scalar_t* __restrict__ x, const scalar_t* __restrict__ residual,
                                    int64_t channels, int64_t rows, const acc_t* __restrict__ mean,
                                    const acc_t* __restrict__ scale, const acc_t* __restrict__ bias,
                                    scalar_t* __restrict__ out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(kTileC) + threadIdx.x;
  if (c >= channels) return;
  const acc_t m = mean[c], s = scale[c], b = bias[c];
  for (int64_t r = blockIdx.y * static_cast<int64_t>(kTileR) + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.y) * kTileR) {
    const int64_t i = r * channels + c;
    acc_t v = (static_cast<acc_t>(x[i]) - m) * s + b;
    if (residual != nullptr) v += static_cast<acc_t>(residual[i]);
    out[i] = static_cast<scalar_t>(relu(v));
  }
}

// ---- backward --------------------------------------------------------------------------------

// (1) NCHW: block (c, chunk) -> partial sums of g and g * x̂, g = dy where out > 0.
template <typename scalar_t, typename acc_t, typename index_t>
__global__ void grad_partial(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ x,
                             const scalar_t* __restrict__ out, Nchw<index_t> l, index_t count, index_t chunk_len,
                             const acc_t* __restrict__ mean, const acc_t* __restrict__ invstd,
                             acc_t* __restrict__ p_dy, acc_t* __restrict__ p_dy_xhat) {
  const index_t c = blockIdx.x, chunk = blockIdx.y;
  const index_t begin = chunk * chunk_len, end = begin + chunk_len < count ? begin + chunk_len : count;
  const acc_t m = mean[c], s = invstd[c];
  acc_t a = 0, b = 0;
  for (index_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const index_t o = l.offset(c, j);
    if (static_cast<acc_t>(out[o]) > 0) {
      const acc_t g = static_cast<acc_t>(dy[o]);
      a += g;
      b += g * (static_cast<acc_t>(x[o]) - m) * s;
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
    const int64_t k = static_cast<int64_t>(c) * gridDim.y + chunk;
    p_dy[k] = s_a[0];
    p_dy_xhat[k] = s_b[0];
  }
}

// (1) channels_last: block (channel tile, chunk of rows) -> partial sums of g and g * x̂ of each
// of its channels.
template <typename scalar_t, typename acc_t>
__global__ void grad_partial_nhwc(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ x,
                                  const scalar_t* __restrict__ out, int64_t channels, int64_t rows,
                                  int64_t rows_per_chunk, const acc_t* __restrict__ mean,
                                  const acc_t* __restrict__ invstd, acc_t* __restrict__ p_dy,
                                  acc_t* __restrict__ p_dy_xhat) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(kTileC) + threadIdx.x, chunk = blockIdx.y;
  const int64_t begin = chunk * rows_per_chunk, end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  acc_t a = 0, b = 0;
  if (c < channels) {
    const acc_t m = mean[c], s = invstd[c];
    for (int64_t r = begin + threadIdx.y; r < end; r += kTileR) {
      const int64_t o = r * channels + c;
      if (static_cast<acc_t>(out[o]) > 0) {
        const acc_t g = static_cast<acc_t>(dy[o]);
        a += g;
        b += g * (static_cast<acc_t>(x[o]) - m) * s;
      }
    }
  }
  __shared__ acc_t s_a[kTileR][kTileC], s_b[kTileR][kTileC];
  s_a[threadIdx.y][threadIdx.x] = a;
  s_b[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  for (int stride = kTileR / 2; stride > 0; stride /= 2) {
    if (threadIdx.y < stride) {
      s_a[threadIdx.y][threadIdx.x] += s_a[threadIdx.y + stride][threadIdx.x];
      s_b[threadIdx.y][threadIdx.x] += s_b[threadIdx.y + stride][threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < channels) {
    p_dy[c * gridDim.y + chunk] = s_a[0][threadIdx.x];
    p_dy_xhat[c * gridDim.y + chunk] = s_b[0][threadIdx.x];
  }
}

// Per channel, what (3) needs: dx = scale * (g - mean_dy - x̂ * mean_dy_xhat), scale = weight *
// invstd; in eval the statistics do not depend on x and both means are 0.
template <typename acc_t>
struct GradConstants {
  const acc_t* mean;
  const acc_t* invstd;
  const acc_t* weight;
  const acc_t* sum_dy;
  const acc_t* sum_dy_xhat;
  acc_t inv_count;
  bool training;
};

// (3) NCHW: dx, and g itself into g_out when given (bn_add_relu: the residual's gradient).
template <typename scalar_t, typename acc_t, typename index_t>
__global__ void grad_input(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ x,
                           const scalar_t* __restrict__ out, Nchw<index_t> l, index_t numel, GradConstants<acc_t> k,
                           scalar_t* __restrict__ dx, scalar_t* __restrict__ g_out) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < numel; i += stride) {
    const index_t c = l.channel_of(i);
    const acc_t g = static_cast<acc_t>(out[i]) > 0 ? static_cast<acc_t>(dy[i]) : acc_t(0);
    if (g_out != nullptr) g_out[i] = static_cast<scalar_t>(g);
    acc_t v = g;
    if (k.training) {
      const acc_t xhat = (static_cast<acc_t>(x[i]) - k.mean[c]) * k.invstd[c];
      v -= (k.sum_dy[c] + xhat * k.sum_dy_xhat[c]) * k.inv_count;
    }
    dx[i] = static_cast<scalar_t>(v * k.invstd[c] * k.weight[c]);
  }
}

// (3) channels_last: grad_input's arithmetic, one channel per thread.
template <typename scalar_t, typename acc_t>
__global__ void grad_input_nhwc(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ x,
                                const scalar_t* __restrict__ out, int64_t channels, int64_t rows,
                                GradConstants<acc_t> k, scalar_t* __restrict__ dx, scalar_t* __restrict__ g_out) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(kTileC) + threadIdx.x;
  if (c >= channels) return;
  const acc_t m = k.mean[c], s = k.invstd[c], scale = s * k.weight[c];
  const acc_t mean_dy = k.training ? k.sum_dy[c] * k.inv_count : acc_t(0);
  const acc_t mean_dy_xhat = k.training ? k.sum_dy_xhat[c] * k.inv_count : acc_t(0);
  for (int64_t r = blockIdx.y * static_cast<int64_t>(kTileR) + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.y) * kTileR) {
    const int64_t i = r * channels + c;
    const acc_t g = static_cast<acc_t>(out[i]) > 0 ? static_cast<acc_t>(dy[i]) : acc_t(0);
    if (g_out != nullptr) g_out[i] = static_cast<scalar_t>(g);
    const acc_t v = k.training ? g - mean_dy - (static_cast<acc_t>(x[i]) - m) * s * mean_dy_xhat : g;
    dx[i] = static_cast<scalar_t>(v * scale);
  }
}

}  // namespace dlrun::kernels::bn_cuda
