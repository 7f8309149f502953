// Counter-based randomness for the data pipeline. Every random decision of the loader (the
// epoch permutation, each sample's augmentation) is a pure function of (seed, epoch, sample
// index, stream), so batches never depend on worker count, timing or resume point.
#pragma once

#include <cmath>
#include <cstdint>

namespace dlrun::data {

/// splitmix64's finalizer: a bijective 64-bit mixer.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Key of one sample's random stream: (seed, epoch, dataset index, stream id).
inline uint64_t sample_key(uint64_t seed, int64_t epoch, int64_t index, uint64_t stream) {
  uint64_t k = mix64(seed + 0x9e3779b97f4a7c15ULL);
  k = mix64(k ^ (static_cast<uint64_t>(epoch) + 0x632be59bd9b4e019ULL));
  k = mix64(k ^ (static_cast<uint64_t>(index) + 0x8cb92ba72f3d8dd7ULL));
  return mix64(k ^ (stream * 0xd6e8feb86659fd93ULL));
}

/// A small PRNG (splitmix64 stream) seeded by a key.
class SampleRng {
 public:
  explicit SampleRng(uint64_t key) : state_(key) {}
  uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix64(state_);
  }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [0, n), n > 0.
  int64_t below(int64_t n) { return static_cast<int64_t>(uniform() * static_cast<double>(n)); }
  bool bernoulli(double p) { return uniform() < p; }
  /// Standard normal (Box-Muller, one value per two uniforms).
  double normal() {
    double u = uniform();
    while (u <= 0) u = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * uniform());
  }
  /// Uniform in (0, 1).
  double uniform_open() {
    double u = uniform();
    while (u <= 0) u = uniform();
    return u;
  }
  /// Gamma(a, 1): Marsaglia and Tsang's method; a < 1 boosted by U^(1/a).
  double gamma(double a) {
    if (a < 1) return gamma(a + 1) * std::pow(uniform_open(), 1.0 / a);
    const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      const double x = normal();
      double v = 1.0 + c * x;
      if (v <= 0) continue;
      v = v * v * v;
      const double u = uniform_open();
      if (u < 1.0 - 0.0331 * x * x * x * x || std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
    }
  }

 private:
  uint64_t state_;
};

/// Stream ids: one per random decision, so enabling one transform never shifts another.
enum Stream : uint64_t {
  kStreamPermutation = 1,
  kStreamFlip,
  kStreamVFlip,
  kStreamResizedCrop,
  kStreamRotate,
  kStreamTranslate,
  kStreamCrop,
  kStreamErase,
  kStreamShardOrder,   ///< webdataset: the order of the shards in an epoch
  kStreamShardBlock,   ///< webdataset: the order of the samples within a block of shards
  kStreamPolicy,       ///< the automatic augmentation policy's operations and magnitudes
  kStreamMix,          ///< MixUp / CutMix: a micro-batch's choice, lambda and box (keyed by step)
  kStreamColorJitter,  ///< color_jitter: the order and the factors
};

}  // namespace dlrun::data
