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

#include "kernels/reference.h"

namespace dlrun::kernels {
namespace {

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

std::optional<Geometry> geometry_of(const at::Tensor& x) {
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

bool handled(const at::Tensor& x) {
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
                                                                    bool training) {
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
