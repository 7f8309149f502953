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
// Loads are issued ahead of their use: the statistics pass kStatsInFlight rows a thread, the
// elementwise and backward passes two rows (every stream's vector of both) before any is widened.
// The backward of bn_relu reads dy and x only: its ReLU mask is recomputed from x ("backward").
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

// Load 16 bytes (vector i of p) as kLanes floats; store kLanes floats as 16 bytes. raw() and
// widen() are the load's two halves, for loops that issue several loads before the first use.
template <typename scalar_t>
__device__ __forceinline__ uint4 raw(const scalar_t* __restrict__ p, uint32_t i) {
  return __ldg(reinterpret_cast<const uint4*>(p) + i);
}

template <typename scalar_t>
__device__ __forceinline__ void widen(const uint4& u, float (&f)[kLanes<scalar_t>]) {
  scalar_t v[kLanes<scalar_t>];
  memcpy(&v, &u, sizeof u);
#pragma unroll
  for (int k = 0; k < kLanes<scalar_t>; ++k) f[k] = static_cast<float>(v[k]);
}

template <typename scalar_t>
__device__ __forceinline__ void load(const scalar_t* __restrict__ p, uint32_t i, float (&f)[kLanes<scalar_t>]) {
  widen<scalar_t>(raw(p, i), f);
}

// The pre-activation of the forward's normalize, (x - mean) * scale + bias with scale = invstd *
// weight, as one rounded multiply-add: the backward recomputes it bit for bit (its sign is the
// ReLU's mask) instead of reading the output.
__device__ __forceinline__ float pre_activation(float x, float mean, float scale, float bias) {
  return __fmaf_rn(x - mean, scale, bias);
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

// Rows a thread of the statistics pass loads before it adds any (16 bytes each): enough bytes in
// flight per thread to cover the memory latency at one wave of blocks. The loads are issued into
// raw registers first and widened after; and the kernel's launch bounds ask for 4 resident blocks
// of 256 threads, not the 8 that ptxas aims at by default: at 8 it keeps each thread to 32
// registers and sinks every load next to its use, two in flight at most, where 4 blocks leave it
// 64 registers and cuobjdump -sass shows the kStatsInFlight LDG.E.128 of a row group issued back to
// back (sm_90, nvcc 13.0; docs/kernels.md).
constexpr int kStatsInFlight = 8;
constexpr int kStatsBlocksPerSm = 4;

// The shifted sums of one vector into s1, s2.
template <int V>
__device__ __forceinline__ void add_shifted(const float (&v)[V], const float (&shift)[V], float (&s1)[V],
                                            float (&s2)[V]) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const float d = v[k] - shift[k];
    s1[k] += d;
    s2[k] = fmaf(d, d, s2[k]);
  }
}

// (1) Block (tile, chunk): the shifted sums of each of its channels over rows [chunk *
// rows_per_chunk, +rows_per_chunk), as partials (channel, chunk). kStatsInFlight rows in flight a
// thread, then the rest one by one.
template <typename scalar_t>
__global__ void __launch_bounds__(kBlockThreads, kStatsBlocksPerSm)
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
    for (; r + (kStatsInFlight - 1) * step < end; r += kStatsInFlight * step) {
      uint4 u[kStatsInFlight];
#pragma unroll
      for (int j = 0; j < kStatsInFlight; ++j) u[j] = raw(x, (r + j * step) * cv + cg);
#pragma unroll
      for (int j = 0; j < kStatsInFlight; ++j) {
        float v[V];
        widen<scalar_t>(u[j], v);
        add_shifted<V>(v, shift, s1, s2);
      }
    }
    for (; r < end; r += step) {
      float v[V];
      load(x, r * cv + cg, v);
      add_shifted<V>(v, shift, s1, s2);
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
    float y = pre_activation(v[k], m[k], s[k], b[k]);
    if (kAdd) y += r[k];
    v[k] = relu(y);
  }
}

// A thread's per-channel constants of the normalize: mean, scale = invstd * weight (multiplied
// here rather than by a kernel of its own before the launch), bias.
template <int V>
__device__ __forceinline__ void normalize_constants(uint32_t cg, const float* __restrict__ mean,
                                                    const float* __restrict__ invstd,
                                                    const float* __restrict__ weight,
                                                    const float* __restrict__ bias, float (&m)[V], float (&s)[V],
                                                    float (&b)[V]) {
#pragma unroll
  for (int k = 0; k < V; ++k) {
    m[k] = mean[cg * V + k];
    s[k] = invstd[cg * V + k] * weight[cg * V + k];
    b[k] = bias[cg * V + k];
  }
}

// (3) Block (tile, rows): each thread one vector column, its constants in registers, rows strided
// across the grid, two rows' loads issued before either is used.
template <typename scalar_t, bool kAdd>
__global__ void __launch_bounds__(kBlockThreads)
    normalize_relu_vec(const scalar_t* __restrict__ x, const scalar_t* __restrict__ residual, uint32_t cv,
                       uint32_t rows, const float* __restrict__ mean, const float* __restrict__ invstd,
                       const float* __restrict__ weight, const float* __restrict__ bias, scalar_t* __restrict__ out) {
  constexpr int V = kLanes<scalar_t>;
  const uint32_t cg = blockIdx.x * blockDim.x + threadIdx.x;
  if (cg >= cv) return;
  float m[V], s[V], b[V];
  normalize_constants<V>(cg, mean, invstd, weight, bias, m, s, b);
  const uint32_t step = gridDim.y * blockDim.y;  // < 2^24: r + 2 * step cannot wrap below
  uint32_t r = blockIdx.y * blockDim.y + threadIdx.y;
  for (; r + step < rows; r += 2 * step) {
    const uint32_t i0 = r * cv + cg, i1 = (r + step) * cv + cg;
    const uint4 u0 = raw(x, i0), u1 = raw(x, i1);
    uint4 q0{}, q1{};
    if (kAdd) {
      q0 = raw(residual, i0);
      q1 = raw(residual, i1);
    }
    float v0[V], v1[V], r0[V], r1[V];
    widen<scalar_t>(u0, v0);
    widen<scalar_t>(u1, v1);
    if (kAdd) {
      widen<scalar_t>(q0, r0);
      widen<scalar_t>(q1, r1);
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
//
// Where the ReLU let the gradient through (g = dy there, 0 elsewhere: a select, so an inf or NaN dy
// where the ReLU was off gives 0): bn_relu's backward recomputes the forward's pre-activation from
// x with pre_activation() (kMaskFromX: the bias is passed; the output is not read, which saves one
// of the three activation streams of each pass), bn_add_relu's reads the output's sign (its
// pre-activation needs the residual). The two masks agree except where a positive pre-activation
// rounds to zero in the output's dtype (below 2^-25 in fp16), where kMaskFromX passes dy.

// A thread's per-channel constants of the backward: mean, scale = invstd * weight, and the bias
// (kMaskFromX).
template <int V>
struct GradChannel {
  float m[V], sc[V], b[V];
  __device__ __forceinline__ void load_at(uint32_t cg, const float* __restrict__ mean,
                                          const float* __restrict__ invstd, const float* __restrict__ weight,
                                          const float* __restrict__ bias) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      m[k] = mean[cg * V + k];
      sc[k] = invstd[cg * V + k] * weight[cg * V + k];
      b[k] = bias != nullptr ? bias[cg * V + k] : 0.f;
    }
  }
};

// One row's vectors of the backward's inputs: the output's gradient, the input, and the output
// unless kMaskFromX. Loads are issued before any is widened.
template <typename scalar_t, bool kMaskFromX, int V = kLanes<scalar_t>>
struct GradRow {
  float dy[V], x[V], out[V];
  __device__ __forceinline__ void load_at(const scalar_t* __restrict__ dy_p, const scalar_t* __restrict__ x_p,
                                          const scalar_t* __restrict__ out_p, uint32_t i) {
    const uint4 a = raw(dy_p, i), b = raw(x_p, i);
    const uint4 c = kMaskFromX ? uint4{} : raw(out_p, i);
    widen<scalar_t>(a, dy);
    widen<scalar_t>(b, x);
    if (!kMaskFromX) widen<scalar_t>(c, out);
  }
  /// g of channel lane k.
  __device__ __forceinline__ float g(int k, const GradChannel<V>& c) const {
    const bool on = kMaskFromX ? pre_activation(x[k], c.m[k], c.sc[k], c.b[k]) > 0.f : out[k] > 0.f;
    return on ? dy[k] : 0.f;
  }
};

// One vector of the reduction: a += g, b += g * (x - mean) (invstd is applied to the total); in
// evaluation (kEvalDx) also dx = g * invstd * weight and, when asked, g itself.
template <typename scalar_t, bool kEvalDx, bool kMaskFromX, int V = kLanes<scalar_t>>
__device__ __forceinline__ void grad_sums_one(const GradRow<scalar_t, kMaskFromX>& row, const GradChannel<V>& c,
                                              float (&a)[V], float (&b)[V], uint32_t i, scalar_t* __restrict__ dx,
                                              scalar_t* __restrict__ g_out) {
  float g[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    g[k] = row.g(k, c);
    a[k] += g[k];
    b[k] = fmaf(g[k], row.x[k] - c.m[k], b[k]);
  }
  if (kEvalDx) {
    if (g_out != nullptr) store(g_out, i, g);
    float d[V];
#pragma unroll
    for (int k = 0; k < V; ++k) d[k] = g[k] * c.sc[k];
    store(dx, i, d);
  }
}

// (1) Block (tile, chunk): partial sums of g and g * (x - mean) of each of its channels over the
// chunk's rows, two rows in flight. kEvalDx: evaluation, where dx needs no totals: this pass also
// writes dx (and g into g_out when given) and is the only pass over the activations.
template <typename scalar_t, bool kEvalDx, bool kMaskFromX>
__global__ void __launch_bounds__(kBlockThreads)
    grad_partial_vec(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ x,
                     const scalar_t* __restrict__ out, uint32_t cv, uint32_t rows, uint32_t rows_per_chunk,
                     const float* __restrict__ mean, const float* __restrict__ invstd,
                     const float* __restrict__ weight, const float* __restrict__ bias, float* __restrict__ p_dy,
                     float* __restrict__ p_dy_xmu, scalar_t* __restrict__ dx, scalar_t* __restrict__ g_out) {
  constexpr int V = kLanes<scalar_t>;
  const uint32_t cg = blockIdx.x * blockDim.x + threadIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
  const uint32_t begin = chunk * rows_per_chunk;
  const uint32_t end = rows - begin < rows_per_chunk ? rows : begin + rows_per_chunk;
  float a[V], b[V];
#pragma unroll
  for (int k = 0; k < V; ++k) a[k] = b[k] = 0.f;
  if (cg < cv) {
    GradChannel<V> c;
    c.load_at(cg, mean, invstd, weight, kMaskFromX ? bias : nullptr);
    const uint32_t step = blockDim.y;
    uint32_t r = begin + threadIdx.y;
    for (; r + step < end; r += 2 * step) {
      const uint32_t i0 = r * cv + cg, i1 = (r + step) * cv + cg;
      GradRow<scalar_t, kMaskFromX> r0, r1;
      r0.load_at(dy, x, out, i0);
      r1.load_at(dy, x, out, i1);
      grad_sums_one<scalar_t, kEvalDx>(r0, c, a, b, i0, dx, g_out);
      grad_sums_one<scalar_t, kEvalDx>(r1, c, a, b, i1, dx, g_out);
    }
    if (r < end) {
      const uint32_t i = r * cv + cg;
      GradRow<scalar_t, kMaskFromX> row;
      row.load_at(dy, x, out, i);
      grad_sums_one<scalar_t, kEvalDx>(row, c, a, b, i, dx, g_out);
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
template <typename scalar_t, bool kMaskFromX, int V = kLanes<scalar_t>>
__device__ __forceinline__ void grad_input_one(const GradRow<scalar_t, kMaskFromX>& row, const GradChannel<V>& c,
                                               const float (&k2)[V], const float (&mdy)[V], uint32_t i,
                                               scalar_t* __restrict__ dx, scalar_t* __restrict__ g_out) {
  float g[V], d[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    g[k] = row.g(k, c);
    d[k] = (g[k] - mdy[k] - (row.x[k] - c.m[k]) * k2[k]) * c.sc[k];
  }
  if (g_out != nullptr) store(g_out, i, g);
  store(dx, i, d);
}

template <typename scalar_t, bool kMaskFromX>
__global__ void __launch_bounds__(kBlockThreads)
    grad_input_vec(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ x,
                   const scalar_t* __restrict__ out, uint32_t cv, uint32_t rows, GradConstants<float> kc,
                   const float* __restrict__ bias, scalar_t* __restrict__ dx, scalar_t* __restrict__ g_out) {
  constexpr int V = kLanes<scalar_t>;
  const uint32_t cg = blockIdx.x * blockDim.x + threadIdx.x;
  if (cg >= cv) return;
  // Per channel: mean, scale = invstd * weight, bias, k2 = invstd * mean_dy_xhat, mean_dy.
  GradChannel<V> c;
  c.load_at(cg, kc.mean, kc.invstd, kc.weight, kMaskFromX ? bias : nullptr);
  float k2[V], mdy[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    const uint32_t ch = cg * V + k;
    k2[k] = kc.invstd[ch] * (kc.sum_dy_xhat[ch] * kc.inv_count);
    mdy[k] = kc.sum_dy[ch] * kc.inv_count;
  }
  const uint32_t step = gridDim.y * blockDim.y;
  uint32_t r = blockIdx.y * blockDim.y + threadIdx.y;
  for (; r + step < rows; r += 2 * step) {
    const uint32_t i0 = r * cv + cg, i1 = (r + step) * cv + cg;
    GradRow<scalar_t, kMaskFromX> r0, r1;
    r0.load_at(dy, x, out, i0);
    r1.load_at(dy, x, out, i1);
    grad_input_one<scalar_t>(r0, c, k2, mdy, i0, dx, g_out);
    grad_input_one<scalar_t>(r1, c, k2, mdy, i1, dx, g_out);
  }
  if (r < rows) {
    const uint32_t i = r * cv + cg;
    GradRow<scalar_t, kMaskFromX> row;
    row.load_at(dy, x, out, i);
    grad_input_one<scalar_t>(row, c, k2, mdy, i, dx, g_out);
  }
}

}  // namespace dlrun::kernels::bn_cuda::vec
