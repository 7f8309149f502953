// The CPU image pipeline: plain loops over one float (C, H, W) image, run in the loader's
// worker threads (no torch ops, so no per-op overhead and no intra-op thread pool).
// Resampling is separable with a triangle filter widened on downscaling (antialiased, like
// PIL's bilinear); rotate/translate sample bilinearly with zeros outside, the same rule as
// grid_sample(padding_mode=zeros, align_corners=false) on the device path.
#include <algorithm>
#include <cmath>

#include "base/numbers.h"
#include "data/image_ops.h"
#include "data/sample_rng.h"
#include "data/transforms.h"

namespace dlrun::data {

namespace {


/// Weights of a 1-D resampling: output i reads src[first[i] + k] * w[i][k].
struct Taps {
  std::vector<int64_t> first;
  std::vector<std::vector<float>> w;
};

Taps make_taps(int64_t src_n, double b0, double bl, int64_t out_n) {
  Taps t;
  const double scale = bl / static_cast<double>(out_n);
  const double support = std::max(scale, 1.0);
  for (int64_t i = 0; i < out_n; ++i) {
    double center = b0 + (static_cast<double>(i) + 0.5) * scale;  // continuous source coordinate
    int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(std::floor(center - support)));
    int64_t hi = std::min<int64_t>(src_n - 1, static_cast<int64_t>(std::ceil(center + support)));
    std::vector<float> w;
    double total = 0;
    for (int64_t j = lo; j <= hi; ++j) {
      double v = std::max(0.0, 1.0 - std::abs((static_cast<double>(j) + 0.5 - center) / support));
      w.push_back(static_cast<float>(v));
      total += v;
    }
    if (total <= 0) {  // degenerate: nearest pixel
      lo = std::clamp<int64_t>(static_cast<int64_t>(center), 0, src_n - 1);
      w.assign(1, 1.0f);
      total = 1;
    }
    for (float& v : w) v = static_cast<float>(v / total);
    // Weights of exactly 0 at either end (the triangle's feet) add nothing: dropped, which halves
    // the taps near unit scale and leaves every sum bit for bit as it was.
    size_t a = 0, e = w.size();
    while (e - a > 1 && w[a] == 0.0f) ++a;
    while (e - a > 1 && w[e - 1] == 0.0f) --e;
    w = std::vector<float>(w.begin() + static_cast<std::ptrdiff_t>(a), w.begin() + static_cast<std::ptrdiff_t>(e));
    lo += static_cast<int64_t>(a);
    t.first.push_back(lo);
    t.w.push_back(std::move(w));
  }
  return t;
}

/// Buffers reused by every image a loader thread transforms: allocating a few MiB per image
/// made the kernel map and zero fresh pages each time (over 40 % of a loader thread's perf
/// samples were in the kernel, mostly page faults, on generated 320x320 JPEGs).
struct Scratch {
  std::vector<float> line, b, r, tmp;
  U8Image u8;
  static float* take(std::vector<float>& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};

/// The uint8 (C, h, w) image's box -> dst float (C, oh, ow), scaled to [0, 1] on the way: only
/// the rows and columns the filter taps reach are converted and filtered horizontally.
/// Where pixel (ch, y, x) of a uint8 image is: src[ch * plane + y * row + x * pixel].
struct Layout {
  int64_t plane, row, pixel;
  static Layout of(int64_t c, int64_t h, int64_t w, bool interleaved) {
    return interleaved ? Layout{1, w * c, c} : Layout{h * w, w, 1};
  }
};

void resample(const uint8_t* src, const Layout& at, int64_t c, int64_t h, int64_t w, const SampleParams& sp, int64_t oh,
              int64_t ow, float* dst, Scratch& s) {
  Taps tx = make_taps(w, sp.box_x, sp.box_w, ow);
  Taps ty = make_taps(h, sp.box_y, sp.box_h, oh);
  int64_t y0 = h, y1 = 0, x0 = w, x1 = 0;  // the rows [y0, y1) and columns [x0, x1) read
  for (int64_t y = 0; y < oh; ++y) {
    y0 = std::min(y0, ty.first[y]);
    y1 = std::max(y1, ty.first[y] + static_cast<int64_t>(ty.w[y].size()));
  }
  for (int64_t x = 0; x < ow; ++x) {
    x0 = std::min(x0, tx.first[x]);
    x1 = std::max(x1, tx.first[x] + static_cast<int64_t>(tx.w[x].size()));
  }
  const int64_t rows = y1 - y0, cols = x1 - x0;
  float* line = Scratch::take(s.line, static_cast<size_t>(cols));
  float* tmp = Scratch::take(s.tmp, static_cast<size_t>(c * rows * ow));  // (C, rows, ow)
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = y0; y < y1; ++y) {
      const uint8_t* row = src + ch * at.plane + y * at.row + x0 * at.pixel;
      for (int64_t x = 0; x < cols; ++x)
        line[x] = static_cast<float>(row[x * at.pixel]) / 255.0f;  // the device path's rounding
      float* out = tmp + (ch * rows + y - y0) * ow;
      for (int64_t x = 0; x < ow; ++x) {
        const float* p = line + (tx.first[x] - x0);
        float acc = 0;
        for (size_t k = 0; k < tx.w[x].size(); ++k) acc += p[k] * tx.w[x][k];
        out[x] = acc;
      }
    }
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 0; y < oh; ++y) {
      float* out = dst + (ch * oh + y) * ow;
      std::fill(out, out + ow, 0.0f);
      for (size_t k = 0; k < ty.w[y].size(); ++k) {
        const float* p = tmp + (ch * rows + ty.first[y] - y0 + static_cast<int64_t>(k)) * ow;
        const float wk = ty.w[y][k];
        for (int64_t x = 0; x < ow; ++x) out[x] += p[x] * wk;
      }
    }
}

/// Rotation by angle about the image center, then a shift; bilinear, zeros outside.
void affine(const float* src, int64_t c, int64_t h, int64_t w, double angle_deg, double sy, double sx, float* dst) {
  const double a = angle_deg * kPi / 180.0, ca = std::cos(a), sa = std::sin(a);
  const double cy = (h - 1) / 2.0, cx = (w - 1) / 2.0;
  auto at = [&](const float* plane, int64_t y, int64_t x) -> float {
    return (y < 0 || y >= h || x < 0 || x >= w) ? 0.0f : plane[y * w + x];
  };
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      // Inverse map: output pixel -> source pixel (rotate back by -angle).
      double qx = x - cx - sx, qy = y - cy - sy;
      double px = ca * qx + sa * qy + cx, py = -sa * qx + ca * qy + cy;
      int64_t x0 = static_cast<int64_t>(std::floor(px)), y0 = static_cast<int64_t>(std::floor(py));
      float fx = static_cast<float>(px - x0), fy = static_cast<float>(py - y0);
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* plane = src + ch * h * w;
        float v = (1 - fy) * ((1 - fx) * at(plane, y0, x0) + fx * at(plane, y0, x0 + 1)) +
                  fy * ((1 - fx) * at(plane, y0 + 1, x0) + fx * at(plane, y0 + 1, x0 + 1));
        dst[(ch * h + y) * w + x] = v;
      }
    }
}

}  // namespace

void apply_transforms(const uint8_t* src, int64_t h, int64_t w, const Pipeline& p, const SampleParams& sp, float* out,
                      bool interleaved) {
  const int64_t c = p.channels, oh = p.out_h, ow = p.out_w;
  const int64_t plane = oh * ow;
  thread_local Scratch scratch;

  // Base geometry -> b (C, oh, ow).
  float* b = Scratch::take(scratch.b, static_cast<size_t>(c * plane));
  const Layout at = Layout::of(c, h, w, interleaved);
  if (sp.identity_base(h, w, p)) {
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < plane; ++i)
        b[ch * plane + i] = static_cast<float>(src[ch * at.plane + i * at.pixel]) / 255.0f;  // the device path's rounding
  } else {
    resample(src, at, c, h, w, sp, oh, ow, b, scratch);
  }

  for (int64_t ch = 0; ch < c; ++ch) {
    float* pl = b + ch * plane;
    if (sp.flip)
      for (int64_t y = 0; y < oh; ++y) std::reverse(pl + y * ow, pl + (y + 1) * ow);
    if (sp.vflip)
      for (int64_t y = 0; y < oh / 2; ++y) std::swap_ranges(pl + y * ow, pl + (y + 1) * ow, pl + (oh - 1 - y) * ow);
  }

  if (!sp.ops.empty() || !sp.augmix.chains.empty()) {  // the policy, on the image rounded to uint8 as a cropped PIL image is
    U8Image& img = scratch.u8;
    img.c = c;
    img.h = oh;
    img.w = ow;
    img.px.resize(static_cast<size_t>(c * plane));
    uint8_t* q = img.px.data();
    for (int64_t i = 0; i < c * plane; ++i)  // round half up; plain min/max and conversions: vectorised
      q[i] = static_cast<uint8_t>(static_cast<int32_t>(std::min(std::max(b[i], 0.0f), 1.0f) * 255.0f + 0.5f));
    if (!sp.augmix.chains.empty()) apply_augmix(sp.augmix, img, p.policy.sampling);
    for (const OpDraw& d : sp.ops) apply_op(d.op, d.magnitude, img, p.policy.sampling);
    q = img.px.data();
    for (int64_t i = 0; i < c * plane; ++i) b[i] = static_cast<float>(q[i]) / 255.0f;
  }

  if (sp.angle_deg != 0 || sp.shift_x != 0 || sp.shift_y != 0) {
    float* r = Scratch::take(scratch.r, static_cast<size_t>(c * plane));
    affine(b, c, oh, ow, sp.angle_deg, sp.shift_y, sp.shift_x, r);
    b = r;
  }

  // Crop from the zero-padded image (identity when crop is off), written to out.
  const int64_t dy = p.crop ? sp.crop_y - p.crop_padding : 0, dx = p.crop ? sp.crop_x - p.crop_padding : 0;
  for (int64_t ch = 0; ch < c; ++ch) {
    const float* pl = b + ch * plane;
    float* o = out + ch * plane;
    const float mean = p.normalize ? p.mean[ch] : 0.0f, sd = p.normalize ? p.std[ch] : 1.0f;
    const float pad = (0.0f - mean) / sd;  // what a padding pixel becomes
    for (int64_t y = 0; y < oh; ++y) {
      const int64_t sy = y + dy;
      float* row = o + y * ow;
      if (sy < 0 || sy >= oh) {
        std::fill(row, row + ow, pad);
        continue;
      }
      // Columns whose source x + dx is inside: [x0, x1); the plain loop there vectorizes (the
      // same division per pixel as before, so the same bits).
      const int64_t x0 = std::clamp<int64_t>(-dx, 0, ow), x1 = std::clamp<int64_t>(ow - dx, x0, ow);
      std::fill(row, row + x0, pad);
      const float* src_row = pl + sy * ow + dx;
      for (int64_t x = x0; x < x1; ++x) row[x] = (src_row[x] - mean) / sd;
      std::fill(row + x1, row + ow, pad);
    }
  }

  if (sp.erase) {
    // Zeros, or standard normal values (torchvision's value='random', timm's modes rand and
    // pixel) from the box's own stream: the same after a resume.
    SampleRng rng(sp.erase_key);
    for (int64_t ch = 0; ch < c; ++ch) {
      const float channel_value = p.erase_value == EraseValue::kPerChannel ? static_cast<float>(rng.normal()) : 0.0f;
      for (int64_t y = sp.erase_y; y < sp.erase_y + sp.erase_h; ++y) {
        float* row = out + ch * plane + y * ow + sp.erase_x;
        if (p.erase_value == EraseValue::kPerPixel)
          for (int64_t x = 0; x < sp.erase_w; ++x) row[x] = static_cast<float>(rng.normal());
        else
          std::fill(row, row + sp.erase_w, channel_value);
      }
    }
  }
}

}  // namespace dlrun::data
