// The synthetic dataset: a learnable, fully deterministic stand-in for real data (tests,
// benchmarks, smoke runs). Each of 10 classes has a smooth template pattern drawn from the
// seed (two oriented sinusoids per channel); a sample is its class template plus
// per-pixel noise, so a model can learn it but not trivially from one pixel. Train and eval
// share the templates (same seed) and draw their samples from different streams.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/numbers.h"
#include "data/memory_dataset.h"
#include "data/sample_rng.h"

namespace dlrun::data {

namespace {

constexpr int64_t kClasses = 10;

/// Class templates (K, C, H, W) in [-1, 1].
std::vector<float> make_templates(uint64_t seed, int64_t c, int64_t h, int64_t w) {
  std::vector<float> t(static_cast<size_t>(kClasses * c * h * w));
  for (int64_t k = 0; k < kClasses; ++k) {
    for (int64_t ch = 0; ch < c; ++ch) {
      SampleRng rng(sample_key(seed, -1, k * 1000 + ch, 0x7e3));
      double a1 = rng.uniform(0, kPi), f1 = rng.uniform(1.0, 3.5), p1 = rng.uniform(0, 2 * kPi);
      double a2 = rng.uniform(0, kPi), f2 = rng.uniform(1.0, 3.5), p2 = rng.uniform(0, 2 * kPi);
      float* out = t.data() + (k * c + ch) * h * w;
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          double u = static_cast<double>(x) / std::max<int64_t>(w - 1, 1);
          double v = static_cast<double>(y) / std::max<int64_t>(h - 1, 1);
          double s1 = std::sin(2 * kPi * f1 * (u * std::cos(a1) + v * std::sin(a1)) + p1);
          double s2 = std::sin(2 * kPi * f2 * (u * std::cos(a2) + v * std::sin(a2)) + p2);
          out[y * w + x] = static_cast<float>(0.5 * (s1 + s2));
        }
    }
  }
  return t;
}

}  // namespace

std::shared_ptr<Dataset> open_synthetic(const DataOptions& opts, Split split, uint64_t seed) {
  DLRUN_CHECK_INPUT(opts.synthetic_shape.size() == 3, "data.synthetic_shape: expected [C, H, W], got {} values",
                    opts.synthetic_shape.size());
  const int64_t c = opts.synthetic_shape[0], h = opts.synthetic_shape[1], w = opts.synthetic_shape[2];
  DLRUN_CHECK_INPUT(c > 0 && h > 0 && w > 0, "data.synthetic_shape: sizes must be > 0");
  const bool train = split == Split::kTrain;
  int64_t n = train ? opts.synthetic_train_size : opts.synthetic_eval_size;
  int64_t limit = train ? opts.limit_train : opts.limit_eval;
  if (limit > 0) n = std::min(n, limit);
  DLRUN_CHECK_INPUT(n > 0, "the synthetic {} set is empty", train ? "training" : "evaluation");

  std::vector<float> templates = make_templates(seed, c, h, w);
  const int64_t pixels = c * h * w;
  torch::Tensor images = torch::empty({n, c, h, w}, torch::kUInt8);  // (N, C, H, W)
  torch::Tensor labels = torch::empty({n}, torch::kLong);            // (N)
  uint8_t* ip = images.data_ptr<uint8_t>();
  int64_t* lp = labels.data_ptr<int64_t>();
  const int64_t split_id = train ? 1 : 2;
  for (int64_t i = 0; i < n; ++i) {
    SampleRng rng(sample_key(seed, -split_id - 1, i, 0x5a));
    int64_t label = rng.below(kClasses);
    double gain = rng.uniform(50.0, 80.0);
    lp[i] = label;
    const float* t = templates.data() + label * pixels;
    uint8_t* out = ip + i * pixels;
    for (int64_t p = 0; p < pixels; ++p) {
      // Sum of uniforms: roughly Gaussian noise with std ~ 40 grey levels.
      double noise = (rng.uniform() + rng.uniform() + rng.uniform() - 1.5) * 80.0;
      double v = 128.0 + gain * t[p] + noise;
      out[p] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
    }
  }

  DatasetInfo info;
  info.num_classes = kClasses;
  info.mean.assign(static_cast<size_t>(c), 0.5);
  info.std.assign(static_cast<size_t>(c), 0.25);
  for (int k = 0; k < kClasses; ++k) info.class_names.push_back("class" + std::to_string(k));
  return std::make_shared<MemoryDataset>(images, labels, info);
}

}  // namespace dlrun::data
