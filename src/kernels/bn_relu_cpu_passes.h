// The loops of dlrun's CPU BatchNorm+ReLU kernels (bn_relu_cpu.cpp): how a dense 4-D tensor's
// values lie (Geometry), the per-channel sums of the statistics and the gradient, the elementwise
// passes that write the output and the input's gradient, and the two drivers that run them over
// NCHW planes or channels_last rows on ATen's threads. Included by bn_relu_cpu.cpp alone, which
// is compiled with -fopenmp-simd (the `#pragma omp simd` reductions) and without the PCH; the
// order of every sum is fixed by the shape alone (see bn_relu_cpu.cpp).
#pragma once

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

namespace dlrun::kernels::cpu_passes {


constexpr int64_t kRun = 4096;         // values summed in the accumulation type before a double total
constexpr int64_t kChunkRows = 256;    // channels_last: rows per partial sum
constexpr int64_t kTileValues = 256;   // channels_last: the least length of a vector loop
constexpr int64_t kGrainValues = 32768;  // below this, an elementwise pass stays on one thread

// How a dense 4-D tensor's values lie: NCHW, planes (n, c) of hw contiguous values; channels_last,
// rows (n, h, w) of c contiguous values.
struct Geometry {
  int64_t n, c, hw;
  bool nhwc;
  int64_t count() const { return n * hw; }  // values per channel; also the rows of channels_last
  /// channels_last: the block of the *_rows loops, whole rows of at least kTileValues values.
  int64_t tile() const { return c * std::max<int64_t>(1, (kTileValues + c - 1) / c); }
  at::MemoryFormat format() const { return nhwc ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous; }
};

inline std::optional<Geometry> geometry_of(const at::Tensor& x) {
  Geometry g{x.size(0), x.size(1), x.size(2) * x.size(3), false};
  // With H*W = 1 both formats lie the same way; channels_last's rows are then the fast path.
  if (x.is_contiguous()) {
    g.nhwc = g.hw == 1;
    return g;
  }
  g.nhwc = true;
  if (x.is_contiguous(at::MemoryFormat::ChannelsLast)) return g;
  return std::nullopt;
}

inline bool handled(const at::Tensor& x) {
  const auto t = x.scalar_type();
  return x.device().is_cpu() && x.dim() == 4 && x.numel() > 0 &&
         (t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16) && geometry_of(x).has_value();
}

template <typename acc_t>
acc_t relu(acc_t v) {
  return v < acc_t(0) ? acc_t(0) : v;  // NaN stays NaN (as torch.relu), so a diverged run shows
}

// ReLU's backward: dy where the output is positive, else 0 (both read first: a select, not a
// branch — a branch on random signs mispredicts half the time, and made the backward 10x slower
// before the loops below were vectorised).
template <typename scalar_t, typename acc_t = at::opmath_type<scalar_t>>
inline acc_t mask(scalar_t out, scalar_t dy) {
  const acc_t d = static_cast<acc_t>(dy);
  return static_cast<acc_t>(out) > acc_t(0) ? d : acc_t(0);
}

// ---- per-channel sums -----------------------------------------------------------------------
//
// Each pass gives, per channel, two totals of per-value terms; NCHW runs are contiguous values of
// one channel, channels_last rows hold every channel once. The run loops are reductions that
// `omp simd` lets the compiler vectorise (this file is compiled with -fopenmp-simd, which
// honours the pragma and needs no OpenMP runtime); the row loops vectorise across channels.

// Forward: t1 += sum(x - k), t2 += sum((x - k)^2) over one NCHW run.
template <typename scalar_t, typename acc_t>
void stats_run(const scalar_t* __restrict__ x, int64_t len, acc_t k, double& t1, double& t2) {
  for (int64_t b = 0; b < len; b += kRun) {
    const int64_t e = std::min(len, b + kRun);
    acc_t a = 0, q = 0;
#pragma omp simd reduction(+ : a, q)
    for (int64_t j = b; j < e; ++j) {
      const acc_t d = static_cast<acc_t>(x[j]) - k;
      a += d;
      q += d * d;
    }
    t1 += a;
    t2 += q;
  }
}

// channels_last loops (the *_rows functions) take `len` values starting at a row and walk them
// in blocks of `t` values (a whole number of rows: Geometry::tile), with the per-channel arrays
// tiled to t values (position i holds channel i % C). Narrow layers then still run long vector
// loops instead of a short loop and its overhead per row; the accumulators are tiled too and
// folded into channels by the caller.

// Forward, channels_last: a[i] += x - k[i], q[i] += (x - k[i])^2.
template <typename scalar_t, typename acc_t>
void stats_rows(const scalar_t* __restrict__ x, int64_t len, int64_t t, const acc_t* __restrict__ k,
                acc_t* __restrict__ a, acc_t* __restrict__ q) {
  for (int64_t o = 0; o < len; o += t) {
    const int64_t n = std::min(t, len - o);
    const scalar_t* __restrict__ xo = x + o;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const acc_t d = static_cast<acc_t>(xo[i]) - k[i];
      a[i] += d;
      q[i] += d * d;
    }
  }
}

// Backward: with g = dy where out > 0 (else 0), t1 += sum(g), t2 += sum(g * (x - mean)) over one
// NCHW run; g is also written to `g_out` when given (bn_add_relu: the residual's gradient).
template <typename scalar_t, typename acc_t>
void grad_sums_run(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ out, const scalar_t* __restrict__ x,
                   int64_t len, acc_t mean, scalar_t* __restrict__ g_out, double& t1, double& t2) {
  for (int64_t b = 0; b < len; b += kRun) {
    const int64_t e = std::min(len, b + kRun);
    acc_t a = 0, q = 0;
    if (g_out != nullptr) {
#pragma omp simd reduction(+ : a, q)
      for (int64_t j = b; j < e; ++j) {
        const acc_t g = mask(out[j], dy[j]);
        g_out[j] = static_cast<scalar_t>(g);
        a += g;
        q += g * (static_cast<acc_t>(x[j]) - mean);
      }
    } else {
#pragma omp simd reduction(+ : a, q)
      for (int64_t j = b; j < e; ++j) {
        const acc_t g = mask(out[j], dy[j]);
        a += g;
        q += g * (static_cast<acc_t>(x[j]) - mean);
      }
    }
    t1 += a;
    t2 += q;
  }
}

// Backward, channels_last: the same sums into a[i], q[i] (tiled), g written when asked.
template <typename scalar_t, typename acc_t>
void grad_sums_rows(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ out,
                    const scalar_t* __restrict__ x, int64_t len, int64_t t, const acc_t* __restrict__ mean,
                    scalar_t* __restrict__ g_out, acc_t* __restrict__ a, acc_t* __restrict__ q) {
  for (int64_t o = 0; o < len; o += t) {
    const int64_t n = std::min(t, len - o);
    if (g_out != nullptr) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const acc_t g = mask(out[o + i], dy[o + i]);
        g_out[o + i] = static_cast<scalar_t>(g);
        a[i] += g;
        q[i] += g * (static_cast<acc_t>(x[o + i]) - mean[i]);
      }
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const acc_t g = mask(out[o + i], dy[o + i]);
        a[i] += g;
        q[i] += g * (static_cast<acc_t>(x[o + i]) - mean[i]);
      }
    }
  }
}

// ---- elementwise passes ---------------------------------------------------------------------

// out = relu((x - mean) * scale + shift [+ r]); per channel constants (NCHW: one channel).
template <typename scalar_t, typename acc_t>
void normalize_run(const scalar_t* __restrict__ x, const scalar_t* __restrict__ r, int64_t len, acc_t mean,
                   acc_t scale, acc_t shift, scalar_t* __restrict__ out) {
  if (r != nullptr) {
#pragma omp simd
    for (int64_t j = 0; j < len; ++j)
      out[j] = static_cast<scalar_t>(
          relu((static_cast<acc_t>(x[j]) - mean) * scale + shift + static_cast<acc_t>(r[j])));
  } else {
#pragma omp simd
    for (int64_t j = 0; j < len; ++j)
      out[j] = static_cast<scalar_t>(relu((static_cast<acc_t>(x[j]) - mean) * scale + shift));
  }
}

template <typename scalar_t, typename acc_t>
void normalize_rows(const scalar_t* __restrict__ x, const scalar_t* __restrict__ r, int64_t len, int64_t t,
                    const acc_t* __restrict__ mean, const acc_t* __restrict__ scale, const acc_t* __restrict__ shift,
                    scalar_t* __restrict__ out) {
  for (int64_t o = 0; o < len; o += t) {
    const int64_t n = std::min(t, len - o);
    if (r != nullptr) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i)
        out[o + i] = static_cast<scalar_t>(
            relu((static_cast<acc_t>(x[o + i]) - mean[i]) * scale[i] + shift[i] + static_cast<acc_t>(r[o + i])));
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i)
        out[o + i] = static_cast<scalar_t>(relu((static_cast<acc_t>(x[o + i]) - mean[i]) * scale[i] + shift[i]));
    }
  }
}

// dx = k1 * g + k2 * (x - mean) + k3, g read from `g_in` when given, else dy where out > 0.
template <typename scalar_t, typename acc_t>
void grad_input_run(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ out,
                    const scalar_t* __restrict__ g_in, const scalar_t* __restrict__ x, int64_t len, acc_t mean,
                    acc_t k1, acc_t k2, acc_t k3, scalar_t* __restrict__ dx) {
  if (g_in != nullptr) {
#pragma omp simd
    for (int64_t j = 0; j < len; ++j)
      dx[j] = static_cast<scalar_t>(k1 * static_cast<acc_t>(g_in[j]) + k2 * (static_cast<acc_t>(x[j]) - mean) + k3);
  } else {
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) {
      const acc_t g = mask(out[j], dy[j]);
      dx[j] = static_cast<scalar_t>(k1 * g + k2 * (static_cast<acc_t>(x[j]) - mean) + k3);
    }
  }
}

template <typename scalar_t, typename acc_t>
void grad_input_rows(const scalar_t* __restrict__ dy, const scalar_t* __restrict__ out,
                     const scalar_t* __restrict__ g_in, const scalar_t* __restrict__ x, int64_t len, int64_t t,
                     const acc_t* __restrict__ mean, const acc_t* __restrict__ k1, const acc_t* __restrict__ k2,
                     const acc_t* __restrict__ k3, scalar_t* __restrict__ dx) {
  for (int64_t o = 0; o < len; o += t) {
    const int64_t n = std::min(t, len - o);
    if (g_in != nullptr) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i)
        dx[o + i] = static_cast<scalar_t>(k1[i] * static_cast<acc_t>(g_in[o + i]) +
                                          k2[i] * (static_cast<acc_t>(x[o + i]) - mean[i]) + k3[i]);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const acc_t g = mask(out[o + i], dy[o + i]);
        dx[o + i] = static_cast<scalar_t>(k1[i] * g + k2[i] * (static_cast<acc_t>(x[o + i]) - mean[i]) + k3[i]);
      }
    }
  }
}

// ---- the two drivers ------------------------------------------------------------------------

// Runs `apply_run(offset, len, c)` over every NCHW plane or `apply_rows(offset, len)` over
// channels_last rows (len values from a row boundary), split across threads: a pass that needs
// no per-channel totals first.
template <typename ApplyRun, typename ApplyRows>
void one_pass(const Geometry& g, const ApplyRun& apply_run, const ApplyRows& apply_rows) {
  if (!g.nhwc) {
    at::parallel_for(0, g.n * g.c, std::max<int64_t>(1, kGrainValues / g.hw), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) apply_run(p * g.hw, g.hw, p % g.c);
    });
  } else {
    at::parallel_for(0, g.count(), std::max<int64_t>(1, kGrainValues / g.c),
                     [&](int64_t r0, int64_t r1) { apply_rows(r0 * g.c, (r1 - r0) * g.c); });
  }
}

// Two passes with a per-channel step between them. Pass 1 gives each channel two totals (in
// double, in an order fixed by the shape: the same bits for any thread count); `finish(c, t1,
// t2)` turns them into the channel's constants; pass 2 applies them.
//   NCHW: channel by channel across threads — `sum_run(offset, len, c, t1, t2)` over the
//   channel's planes, finish, then `apply_run(offset, len, c)` over the same planes, which are
//   still in this core's caches (a pass over the whole tensor in between would evict them).
//   channels_last: pass 1 over chunks of kChunkRows rows (`sum_rows(offset, len, a, q)` adds
//   into the tiled a[i], q[i], folded into channels per chunk), the chunks' sums added in order,
//   every channel finished, then `apply_rows(offset, len)` over all rows.
//   `tile()` runs between the passes, channels_last only: every channel finished, it tiles the
//   constants that apply_rows reads.
template <typename acc_t, typename SumRun, typename SumRows, typename Finish, typename Tile, typename ApplyRun,
          typename ApplyRows>
void two_passes(const Geometry& g, const SumRun& sum_run, const SumRows& sum_rows, const Finish& finish,
                const Tile& tile, const ApplyRun& apply_run, const ApplyRows& apply_rows) {
  if (!g.nhwc) {
    at::parallel_for(0, g.c, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double t1 = 0, t2 = 0;
        for (int64_t n = 0; n < g.n; ++n) sum_run((n * g.c + c) * g.hw, g.hw, c, t1, t2);
        finish(c, t1, t2);
        for (int64_t n = 0; n < g.n; ++n) apply_run((n * g.c + c) * g.hw, g.hw, c);
      }
    });
    return;
  }
  const int64_t chunks = (g.count() + kChunkRows - 1) / kChunkRows;
  std::vector<double> part(static_cast<size_t>(chunks * 2 * g.c));
  const int64_t t = g.tile();
  at::parallel_for(0, chunks, 1, [&](int64_t k0, int64_t k1) {
    std::vector<acc_t> a(t), q(t);
    for (int64_t k = k0; k < k1; ++k) {
      std::fill(a.begin(), a.end(), acc_t(0));
      std::fill(q.begin(), q.end(), acc_t(0));
      const int64_t r0 = k * kChunkRows, nrows = std::min(kChunkRows, g.count() - r0);
      sum_rows(r0 * g.c, nrows * g.c, a.data(), q.data());
      double* p = part.data() + k * 2 * g.c;
      std::fill(p, p + 2 * g.c, 0.0);
      for (int64_t i = 0; i < t; ++i) {
        p[i % g.c] += a[i];
        p[g.c + i % g.c] += q[i];
      }
    }
  });
  std::vector<double> s1(g.c, 0.0), s2(g.c, 0.0);
  for (int64_t k = 0; k < chunks; ++k) {
    const double* p = part.data() + k * 2 * g.c;
    for (int64_t c = 0; c < g.c; ++c) {
      s1[c] += p[c];
      s2[c] += p[g.c + c];
    }
  }
  for (int64_t c = 0; c < g.c; ++c) finish(c, s1[c], s2[c]);
  tile();
  one_pass(g, apply_run, apply_rows);
}

}  // namespace dlrun::kernels::cpu_passes
