// The vectorised channels_last kernels of dlrun's CUDA BatchNorm (bn_relu.cu launches them, and
// falls back to the scalar kernels of bn_relu_device.cuh where they do not apply): for fp16/bf16
// (8 channels per thread) and float32 (4 channels per thread) inputs whose channel count is a
// multiple of that, whose pointers are 16-byte aligned and whose tensors hold fewer than 2^31
// values. Every global access of an activation is one 16-byte load or store; indices are 32-bit.
//
// Layout. x is a (rows, C) matrix, rows = N*H*W, in vectors of kLanes channels: cv = C / kLanes
// vectors a row. A block is (tx, ty) threads, tx vector columns x ty rows (bn_relu.cu sizes it:
// tx = cv split evenly into tiles of at most 32, ty = 256 / tx); a thread keeps one vector column
// (its kLanes channels' constants and accumulators in registers) and steps over rows by ty (a
// chunk of rows: the reductions) or by the grid's rows (the elementwise passes). Where tx = cv a
// warp reads one contiguous run of 512 bytes.
//
// The reductions write per-(channel, chunk) partials, (C, chunks) row-major, and a finalize kernel
// adds each channel's chunks with one warp per channel (lane-strided, coalesced, in float64, then
// shuffles): no serial merge of hundreds of partials in one thread.
//
// Statistics: shifted sums, no per-value division. Every thread of channel c accumulates in
// float32 s1 = sum(x - K_c) and s2 = sum((x - K_c)^2), K_c = x[row 0, c] (the same shift in every
// block, so partials add plainly: Chan's merge reduces to a sum when all partials share one
// origin). Why this is accurate enough: the plain sum of squares loses the variance to
// cancellation when |mean| >> std (s2/n - mean^2 of two nearly equal numbers); shifted by a value
// of the channel itself, |mean - K| is a few std at worst, so the cancellation costs at most a
// few bits. The float32 running sums themselves are short: bn_relu.cu caps a thread's rows at
// kMaxRowsPerThread (more chunks for larger batches), so a thread's rounding error stays near
// 2^-24 * sqrt(1024); the block's tree adds <= 256 such sums, and the finalize adds the chunks in
// float64. mean = K + S1 / n, variance = (S2 - S1^2 / n) / n, in float64.
#pragma once

#include <ATen/OpMathType.h>
#include <c10/macros/Macros.h>

#include <cstdint>
#include <cstring>

#include "kernels/bn_relu_device.cuh"

namespace dlrun::kernels::bn_cuda::vec {

constexpr int kBlockThreads = 256;           // at most tx * ty
constexpr int64_t kMaxRowsPerThread = 1024;  // a thread's float32 sums cover at most this many rows
constexpr int64_t kMinRowsPerThread = 4;     // and at least this many (shorter blocks cost more than they fill)

// Channels a 16-byte vector holds.
template <typename scalar_t>
constexpr int kLanes = static_cast<int>(16 / sizeof(scalar_t));

// Load 16 bytes (vector i of p) as kLanes floats; store kLanes floats as 16 bytes.
template <typename scalar_t>
__device__ __forceinline__ void load(const scalar_t* __restrict__ p, uint32_t i, float (&f)[kLanes<scalar_t>]) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p) + i);
  scalar_t v[kLanes<scalar_t>];
  memcpy(&v, &u, sizeof u);
#pragma unroll
  for (int k = 0; k < kLanes<scalar_t>; ++k) f[k] = static_cast<float>(v[k]);
}

template <typename scalar_t>
__device__ __forceinline__ void store(scalar_t* __restrict__ p, uint32_t i, const float (&f)[kLanes<scalar_t>]) {
  scalar_t v[kLanes<scalar_t>];
#pragma unroll
  for (int k = 0; k < kLanes<scalar_t>; ++k) v[k] = static_cast<scalar_t>(f[k]);
  uint4 u;
  memcpy(&u, &v, sizeof u);
  reinterpret_cast<uint4*>(p)[i] = u;
}

// The block's sums over threadIdx.y of a[] and b[], for every threadIdx.x: on return, the threads
// with threadIdx.y == 0 hold them in a and b (the others' values are partial). A tree over
// blockDim.y (any size up to 256; not a power of two when tx does not divide 256): each step adds
// the upper half onto the lower, the odd one out waiting a step. Called by every thread.
template <int V>
__device__ __forceinline__ void block_sum_rows(float (&a)[V], float (&b)[V]) {
  __shared__ float sa[V][kBlockThreads], sb[V][kBlockThreads];
  const uint32_t t = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
  for (int k = 0; k < V; ++k) {
    sa[k][t] = a[k];
    sb[k][t] = b[k];
  }
  __syncthreads();
  uint32_t stride = 1;
  while (stride < blockDim.y) stride <<= 1;
  for (stride >>= 1; stride > 0; stride >>= 1) {
    if (threadIdx.y < stride && threadIdx.y + stride < blockDim.y) {
      const uint32_t o = t + stride * blockDim.x;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        sa[k][t] += sa[k][o];
        sb[k][t] += sb[k][o];
      }
    }
    __syncthreads();
  }
  if (threadIdx.y == 0) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      a[k] = sa[k][threadIdx.x];
      b[k] = sb[k][threadIdx.x];
    }
  }
}

// Write a thread's per-channel block totals as partials [channel][chunk] (threadIdx.y == 0 only).
template <int V>
__device__ __forceinline__ void write_partials(uint32_t cg, uint32_t chunk, uint32_t chunks, const float (&a)[V],
                                               const float (&b)[V], float* __restrict__ pa, float* __restrict__ pb) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const uint32_t c = cg * V + k;  // c * chunks + chunk < C * rows = numel < 2^31
    pa[c * chunks + chunk] = a[k];
    pb[c * chunks + chunk] = b[k];
  }
}

// A channel's totals of its partials, in float64, by the calling warp (every lane gets them).
__device__ __forceinline__ void warp_sum_partials(const float* __restrict__ pa, const float* __restrict__ pb,
                                                  uint32_t c, uint32_t chunks, double& a, double& b) {
  const uint32_t lane = threadIdx.x % 32;
  const float *qa = pa + static_cast<uint64_t>(c) * chunks, *qb = pb + static_cast<uint64_t>(c) * chunks;
  a = 0;
  b = 0;
#pragma unroll 4
  for (uint32_t k = lane; k < chunks; k += 32) {
    a += qa[k];
    b += qb[k];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
}

// ---- forward ---------------------------------------------------------------------------------

// (1) Block (tile, chunk): the shifted sums of each of its channels over rows [chunk *
// rows_per_chunk, +rows_per_chunk), as partials (channel, chunk). Four rows in flight a thread.
template <typename scalar_t>
__global__ void __launch_bounds__(kBlockThreads)
    stats_partial_vec(const scalar_t* __restrict__ x, uint32_t cv, uint32_t rows, uint32_t rows_per_chunk,
                      float* __restrict__ p_s1, float* __restrict__ p_s2) {
  constexpr int V = kLanes<scalar_t>;
  const uint32_t cg = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
  const uint32_t begin = chunk * rows_per_chunk;
  const uint32_t end = rows - begin < rows_per_chunk ? rows : begin + rows_per_chunk;  // (begin < rows)
  float s1[V], s2[V];
#pragma unroll
  for (int k = 0; k < V; ++k) s1[k] = s2[k] = 0.f;
  if (cg < cv) {
    float shift[V];
    load(x, cg, shift);  // row 0: the finalize reads the same values
    const uint32_t step = blockDim.y;
    uint32_t r = begin + threadIdx.y;
    for (; r + 3 * step < end; r += 4 * step) {
      float v[4][V];
#pragma unroll
      for (int u = 0; u < 4; ++u) load(x, (r + u * step) * cv + cg, v[u]);
#pragma unroll
      for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const float d = v[u][k] - shift[k];
          s1[k] += d;
          s2[k] = fmaf(d, d, s2[k]);
        }
    }
    for (; r < end; r += step) {
      float v[V];
      load(x, r * cv + cg, v);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = v[k] - shift[k];
        s1[k] += d;
        s2[k] = fmaf(d, d, s2[k]);
      }
    }
  }
  block_sum_rows<V>(s1, s2);  // every thread, the inactive ones with zeros
  if (threadIdx.y == 0 && cg < cv) write_partials<V>(cg, chunk, chunks, s1, s2, p_s1, p_s2);
}

// (2) One warp per channel: the chunks' sums, then mean, inverse std and the running statistics
// (moved as stats_final does: momentum, unbiased variance, in the buffers' op-math type).
template <typename scalar_t, typename stat_t>
__global__ void stats_final_vec(const scalar_t* __restrict__ x, const float* __restrict__ p_s1,
                                const float* __restrict__ p_s2, uint32_t channels, uint32_t chunks, double count,
                                double momentum, double eps, float* __restrict__ mean, float* __restrict__ invstd,
                                stat_t* __restrict__ running_mean, stat_t* __restrict__ running_var) {
  using upd_t = at::opmath_type<stat_t>;
  const uint32_t c = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (c >= channels) return;  // whole warps: c is the warp's
  double s1, s2;
  warp_sum_partials(p_s1, p_s2, c, chunks, s1, s2);
  if (threadIdx.x % 32 != 0) return;
  const double d = s1 / count;                // mean - K
  const double m2 = fmax(s2 - s1 * d, 0.0);   // sum of squared deviations from the mean
  const double mu = static_cast<double>(static_cast<float>(x[c])) + d;
  mean[c] = static_cast<float>(mu);
  invstd[c] = static_cast<float>(1.0 / sqrt(m2 / count + eps));
  const upd_t m = static_cast<upd_t>(momentum);
  running_mean[c] = static_cast<stat_t>((1 - m) * static_cast<upd_t>(running_mean[c]) + m * static_cast<upd_t>(mu));
  running_var[c] =
      static_cast<stat_t>((1 - m) * static_cast<upd_t>(running_var[c]) + m * static_cast<upd_t>(m2 / (count - 1)));
}

// (3) out = relu((x - mean) * scale + bias [+ residual]) for one vector; r the residual's (kAdd).
template <typename scalar_t, bool kAdd, int V = kLanes<scalar_t>>
__device__ __forceinline__ void normalize_one(float (&v)[V], const float (&r)[V], const float (&m)[V],
                                              const float (&s)[V], const float (&b)[V]) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    float y = (v[k] - m[k]) * s[k] + b[k];
    if (kAdd) y += r[k];
    v[k] = relu(y);
  }
}

// (3) Block (tile, rows): each thread one vector column, its constants in registers, rows strided
// across the grid, two rows in flight.
template <typename scalar_t, bool kAdd>
__global__ void __launch_bounds__(kBlockThreads)
    normalize_relu_vec(const scalar_t* __restrict__ x, const scalar_t* __restrict__ residual, uint32_t cv,
                       uint32_t rows, const float* __restrict__ mean, const float* __restrict__ scale,
                       const float* __restrict__ bias, scalar_t* __restrict__ out) {
  constexpr int V = kLanes<scalar_t>;
  const uint32_t cg = blockIdx.x * blockDim.x + threadIdx.x;
  if (cg >= cv) return;
  float m[V], s[V], b[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    m[k] = mean[cg * V + k];
    s[k] = scale[cg * V + k];
    b[k] = bias[cg * V + k];
  }
  const uint32_t step = gridDim.y * blockDim.y;  // < 2^24: r + 2 * step cannot wrap below
  uint32_t r = blockIdx.y * blockDim.y + threadIdx.y;
  for (; r + step < rows; r += 2 * step) {
    const uint32_t i0 = r * cv + cg, i1 = (r + step) * cv + cg;
    float v0[V], v1[V], r0[V], r1[V];
    load(x, i0, v0);
    load(x, i1, v1);
    if (kAdd) {
      load(residual, i0, r0);
      load(residual, i1, r1);
    }
    normalize_one<scalar_t, kAdd>(v0, r0, m, s, b);
    normalize_one<scalar_t, kAdd>(v1, r1, m, s, b);
    store(out, i0, v0);
    store(out, i1, v1);
  }
  if (r < rows) {
    const uint32_t i = r * cv + cg;
    float v[V], q[V];
    load(x, i, v);
    if (kAdd) load(residual, i, q);
    normalize_one<scalar_t, kAdd>(v, q, m, s, b);
    store(out, i, v);
  }
}

// ---- backward --------------------------------------------------------------------------------

// One vector of the reduction: g = dy where out > 0 (a select: an inf or NaN dy where out is 0
// gives 0), a += g, b += g * (x - mean) (invstd is applied to the total); in evaluation
// (kEvalDx) also dx = g * invstd * weight and, when asked, g itself.
// One row's vectors of the backward's three inputs: the output's gradient, the input, the output.
template <typename scalar_t, int V = kLanes<scalar_t>>
struct GradRow {
  float dy[V], x[V], out[V];
  __device__ __forceinline__ void load_at(const scalar_t* __restrict__ dy_p, const scalar_t* __restrict__ x_p,
                                          const scalar_t* __restrict__ out_p, uint32_t i) {
    load(dy_p, i, dy);
    load(x_p, i, x);
    load(out_p, i, out);
  }
};

template <typename scalar_t, bool kEvalDx, int V = kLanes<scalar_t>>
__device__ __forceinline__ void grad_sums_one(const float (&dy)[V], const float (&x)[V], const float (&out)[V],
                                              const float (&m)[V], const float (&sc)[V], float (&a)[V], float (&b)[V],
                                              uint32_t i, scalar_t* __restrict__ dx, scalar_t* __restrict__ g_out) {
  float g[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    g[k] = out[k] > 0.f ? dy[k] : 0.f;
    a[k] += g[k];
    b[k] = fmaf(g[k], x[k] - m[k], b[k]);
  }
  if (kEvalDx) {
    if (g_out != nullptr) store(g_out, i, g);
    float d[V];
#pragma unroll
    for (int k = 0; k < V; ++k) d[k] = g[k] * sc[k];
    store(dx, i, d);
  }
}

// (1) Block (tile, chunk): partial sums of g and g * (x - mean) of each of its channels over the
// chunk's rows, two rows in flight. kEvalDx: evaluation, where dx needs no totals: this pass also
// writes dx (and g into g_out when given) and is the only pass over the activations.
template <typename scalar_t, bool kEvalDx>
__global__ void __launch_bounds__(kBlockThreads)
    grad_partial_vec(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ x,
                     const scalar_t* __restrict__ out, uint32_t cv, uint32_t rows, uint32_t rows_per_chunk,
                     const float* __restrict__ mean, const float* __restrict__ invstd,
                     const float* __restrict__ weight, float* __restrict__ p_dy, float* __restrict__ p_dy_xmu,
                     scalar_t* __restrict__ dx, scalar_t* __restrict__ g_out) {
  constexpr int V = kLanes<scalar_t>;
  const uint32_t cg = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
  const uint32_t begin = chunk * rows_per_chunk;
  const uint32_t end = rows - begin < rows_per_chunk ? rows : begin + rows_per_chunk;
  float a[V], b[V];
#pragma unroll
  for (int k = 0; k < V; ++k) a[k] = b[k] = 0.f;
  if (cg < cv) {
    float m[V], sc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      m[k] = mean[cg * V + k];
      sc[k] = kEvalDx ? invstd[cg * V + k] * weight[cg * V + k] : 0.f;
    }
    const uint32_t step = blockDim.y;
    uint32_t r = begin + threadIdx.y;
    for (; r + step < end; r += 2 * step) {
      const uint32_t i0 = r * cv + cg, i1 = (r + step) * cv + cg;
      GradRow<scalar_t> r0, r1;
      r0.load_at(dy, x, out, i0);
      r1.load_at(dy, x, out, i1);
      grad_sums_one<scalar_t, kEvalDx>(r0.dy, r0.x, r0.out, m, sc, a, b, i0, dx, g_out);
      grad_sums_one<scalar_t, kEvalDx>(r1.dy, r1.x, r1.out, m, sc, a, b, i1, dx, g_out);
    }
    if (r < end) {
      const uint32_t i = r * cv + cg;
      GradRow<scalar_t> row;
      row.load_at(dy, x, out, i);
      grad_sums_one<scalar_t, kEvalDx>(row.dy, row.x, row.out, m, sc, a, b, i, dx, g_out);
    }
  }
  block_sum_rows<V>(a, b);
  if (threadIdx.y == 0 && cg < cv) write_partials<V>(cg, chunk, chunks, a, b, p_dy, p_dy_xmu);
}

// (2) One warp per channel: sum_dy and sum_dy_xhat = invstd * sum(g * (x - mean)).
__global__ void grad_final_vec(const float* __restrict__ p_dy, const float* __restrict__ p_dy_xmu,
                               uint32_t channels, uint32_t chunks, const float* __restrict__ invstd,
                               float* __restrict__ sum_dy, float* __restrict__ sum_dy_xhat) {
  const uint32_t c = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (c >= channels) return;
  double a, b;
  warp_sum_partials(p_dy, p_dy_xmu, c, chunks, a, b);
  if (threadIdx.x % 32 != 0) return;
  sum_dy[c] = static_cast<float>(a);
  sum_dy_xhat[c] = static_cast<float>(b * static_cast<double>(invstd[c]));
}

// (3) Training: dx = invstd * weight * (g - mean_dy - x̂ * mean_dy_xhat), and g into g_out when
// given (bn_add_relu: the residual's gradient); two rows in flight.
template <typename scalar_t, int V = kLanes<scalar_t>>
__device__ __forceinline__ void grad_input_one(const float (&dy)[V], const float (&x)[V], const float (&out)[V],
                                               const float (&m)[V], const float (&k2)[V], const float (&mdy)[V],
                                               const float (&sc)[V], uint32_t i, scalar_t* __restrict__ dx,
                                               scalar_t* __restrict__ g_out) {
  float g[V], d[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    g[k] = out[k] > 0.f ? dy[k] : 0.f;
    d[k] = (g[k] - mdy[k] - (x[k] - m[k]) * k2[k]) * sc[k];
  }
  if (g_out != nullptr) store(g_out, i, g);
  store(dx, i, d);
}

template <typename scalar_t>
__global__ void __launch_bounds__(kBlockThreads)
    grad_input_vec(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ x,
                   const scalar_t* __restrict__ out, uint32_t cv, uint32_t rows, GradConstants<float> kc,
                   scalar_t* __restrict__ dx, scalar_t* __restrict__ g_out) {
  constexpr int V = kLanes<scalar_t>;
  const uint32_t cg = blockIdx.x * blockDim.x + threadIdx.x;
  if (cg >= cv) return;
  // Per channel: mean, k2 = invstd * mean_dy_xhat, mean_dy, scale = invstd * weight.
  float m[V], k2[V], mdy[V], sc[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const uint32_t c = cg * V + k;
    const float is = kc.invstd[c];
    m[k] = kc.mean[c];
    k2[k] = is * (kc.sum_dy_xhat[c] * kc.inv_count);
    mdy[k] = kc.sum_dy[c] * kc.inv_count;
    sc[k] = is * kc.weight[c];
  }
  const uint32_t step = gridDim.y * blockDim.y;
  uint32_t r = blockIdx.y * blockDim.y + threadIdx.y;
  for (; r + step < rows; r += 2 * step) {
    const uint32_t i0 = r * cv + cg, i1 = (r + step) * cv + cg;
    GradRow<scalar_t> r0, r1;
    r0.load_at(dy, x, out, i0);
    r1.load_at(dy, x, out, i1);
    grad_input_one<scalar_t>(r0.dy, r0.x, r0.out, m, k2, mdy, sc, i0, dx, g_out);
    grad_input_one<scalar_t>(r1.dy, r1.x, r1.out, m, k2, mdy, sc, i1, dx, g_out);
  }
  if (r < rows) {
    const uint32_t i = r * cv + cg;
    GradRow<scalar_t> row;
    row.load_at(dy, x, out, i);
    grad_input_one<scalar_t>(row.dy, row.x, row.out, m, k2, mdy, sc, i, dx, g_out);
  }
}

}  // namespace dlrun::kernels::bn_cuda::vec
