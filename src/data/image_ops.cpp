// The policies' image operations (see image_ops.h). Each function names the torchvision.transforms.v2
// kernel it follows; where ATen computes in float32, so does this, operation for operation:
// `x.mul(r).add_(y, alpha=a)` is fma(a, y, x * r) (ATen's vectorised add with alpha is a fused
// multiply-add), and a float32 result goes back to uint8 by truncation, as Tensor.to(uint8) does.
#include "data/image_ops.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "base/numbers.h"

namespace dlrun::data {
namespace {

constexpr std::array<const char*, kImageOps> kNames = {
    "Identity",   "ShearX", "ShearY",    "TranslateX", "TranslateY",   "Rotate",   "Brightness", "Color",
    "Contrast",   "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert", "Hue"};

// float32 -> uint8 after clamp_(0, 255): Tensor.to(torch.uint8) truncates.
inline uint8_t to_u8(float v) { return static_cast<uint8_t>(std::min(std::max(v, 0.0f), 255.0f)); }

// _blend(image1, image2, ratio) for one value: image1.mul(ratio).add_(image2, alpha=1 - ratio).
inline uint8_t blend(float x, float y, float ratio, float one_minus) { return to_u8(std::fma(one_minus, y, x * ratio)); }

// _rgb_to_grayscale_image(..., preserve_dtype=False) then floor_(): r.mul(0.2989).add_(g,
// alpha=0.587).add_(b, alpha=0.114).
inline float gray(uint8_t r, uint8_t g, uint8_t b) {
  float l = static_cast<float>(r) * 0.2989f;
  l = std::fma(0.587f, static_cast<float>(g), l);
  l = std::fma(0.114f, static_cast<float>(b), l);
  return std::floor(l);
}

void brightness(U8Image& img, double factor) {  // adjust_brightness_image
  const float f = static_cast<float>(factor);
  for (auto& v : img.px) v = to_u8(static_cast<float>(v) * f);
}

void saturation(U8Image& img, double factor) {  // adjust_saturation_image
  if (img.c == 1) return;
  const int64_t n = img.h * img.w;
  const float r = static_cast<float>(factor), a = static_cast<float>(1.0 - factor);
  uint8_t* p = img.px.data();
  for (int64_t i = 0; i < n; ++i) {
    const float g = gray(p[i], p[n + i], p[2 * n + i]);
    for (int64_t ch = 0; ch < 3; ++ch) p[ch * n + i] = blend(static_cast<float>(p[ch * n + i]), g, r, a);
  }
}

// adjust_hue_image: to float32 (x / 255), _rgb_to_hsv, the hue shifted and taken modulo 1,
// _hsv_to_rgb, back to uint8 (x * 255.999, truncated) -- each step ATen's float32 operation.
void hue(U8Image& img, double shift) {
  if (img.c == 1) return;  // as PIL: no hue to turn
  const int64_t n = img.h * img.w;
  const float scale = static_cast<float>(1.0 / 255.0), back = static_cast<float>(255.0 + 1.0 - 1e-3);
  const float sixth = static_cast<float>(1.0 / 6.0), dh = static_cast<float>(shift);
  static constexpr int kSelect[3][6] = {{0, 2, 1, 1, 3, 0}, {3, 0, 0, 2, 1, 1}, {1, 1, 3, 0, 0, 2}};
  auto remainder1 = [](float a) {  // torch.remainder(a, 1.0)
    float m = std::fmod(a, 1.0f);
    if (m != 0 && m < 0) m += 1.0f;
    return m;
  };
  uint8_t* px = img.px.data();
  for (int64_t i = 0; i < n; ++i) {
    const float r = static_cast<float>(px[i]) * scale, g = static_cast<float>(px[n + i]) * scale,
                b = static_cast<float>(px[2 * n + i]) * scale;
    // _rgb_to_hsv
    const float maxc = std::max(std::max(r, g), b), minc = std::min(std::min(r, g), b);
    const bool eqc = maxc == minc;
    const float range = maxc - minc;
    const float s = range / (eqc ? 1.0f : maxc);
    const float div = eqc ? 1.0f : range;
    const float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
    const bool neq_r = maxc != r, eq_g = maxc == g;
    const float hg = ((rc + 2.0f) - bc) * static_cast<float>(eq_g && neq_r);
    const float hr = (bc - gc) * static_cast<float>(!neq_r);
    const float hb = ((gc + 4.0f) - rc) * static_cast<float>(neq_r && !eq_g);
    float h = (hr + hg) + hb;
    h = std::fmod(h * sixth + 1.0f, 1.0f);
    h = remainder1(h + dh);
    // _hsv_to_rgb (v is maxc)
    const float h6 = h * 6.0f, fl = std::floor(h6), f = h6 - fl;
    int sector = static_cast<int>(fl) % 6;
    if (sector < 0) sector += 6;
    const float sxf = s * f, one_minus_s = 1.0f - s;
    const float q = std::clamp((1.0f - sxf) * maxc, 0.0f, 1.0f);
    const float t = std::clamp((sxf + one_minus_s) * maxc, 0.0f, 1.0f);
    const float p = std::clamp(one_minus_s * maxc, 0.0f, 1.0f);
    const float vpqt[4] = {maxc, p, q, t};
    for (int ch = 0; ch < 3; ++ch)
      px[ch * n + i] = static_cast<uint8_t>(vpqt[kSelect[ch][sector]] * back);
  }
}

void contrast(U8Image& img, double factor) {  // adjust_contrast_image
  const int64_t n = img.h * img.w;
  const uint8_t* p = img.px.data();
  // The mean of the (floored) grayscale image: a sum of integers, exact in float32 up to 2^24
  // (256 x 256 pixels of 255), then divided in float32 as torch.mean does.
  int64_t sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += img.c == 3 ? static_cast<int64_t>(gray(p[i], p[n + i], p[2 * n + i])) : p[i];
  const float mean = static_cast<float>(sum) / static_cast<float>(n);
  const float r = static_cast<float>(factor), a = static_cast<float>(1.0 - factor);
  for (auto& v : img.px) v = blend(static_cast<float>(v), mean, r, a);
}

void sharpness(U8Image& img, double factor) {  // adjust_sharpness_image
  const int64_t h = img.h, w = img.w;
  if (h <= 2 || w <= 2) return;
  const float a = static_cast<float>(1.0 - factor);
  thread_local std::vector<uint8_t> src;
  src = img.px;
  for (int64_t ch = 0; ch < img.c; ++ch) {
    const uint8_t* s = src.data() + ch * h * w;
    uint8_t* d = img.px.data() + ch * h * w;
    for (int64_t y = 1; y < h - 1; ++y)
      for (int64_t x = 1; x < w - 1; ++x) {
        // The 3x3 kernel of 1s around a 5, over 13, rounded: an exact k / 13 never lies on a
        // half, so the sum's order cannot change the rounding.
        int64_t k = 4 * s[y * w + x];
        for (int64_t dy = -1; dy <= 1; ++dy)
          for (int64_t dx = -1; dx <= 1; ++dx) k += s[(y + dy) * w + x + dx];
        const float blurred = static_cast<float>(std::nearbyint(static_cast<double>(k) / 13.0));
        const float v = static_cast<float>(s[y * w + x]);
        d[y * w + x] = to_u8(std::fma(a, blurred - v, v));  // view.add_(blurred.sub_(view), alpha=1 - factor)
      }
  }
}

void posterize(U8Image& img, int bits) {  // posterize_image
  if (bits >= 8) return;
  const uint8_t mask = static_cast<uint8_t>(((1 << bits) - 1) << (8 - bits));
  for (auto& v : img.px) v &= mask;
}

void solarize(U8Image& img, double threshold) {  // solarize_image: compared in float32
  const float t = static_cast<float>(threshold);
  for (auto& v : img.px)
    if (static_cast<float>(v) >= t) v = static_cast<uint8_t>(255 - v);
}

void autocontrast(U8Image& img) {  // autocontrast_image
  const int64_t n = img.h * img.w;
  for (int64_t ch = 0; ch < img.c; ++ch) {
    uint8_t* p = img.px.data() + ch * n;
    const auto [lo_it, hi_it] = std::minmax_element(p, p + n);
    float lo = *lo_it, hi = *hi_it;
    float inv_scale = (hi - lo) * static_cast<float>(1.0 / 255.0);
    if (hi == lo) {
      lo = 0.0f;
      inv_scale = 1.0f;
    }
    for (int64_t i = 0; i < n; ++i) p[i] = to_u8((static_cast<float>(p[i]) - lo) / inv_scale);
  }
}

void equalize(U8Image& img) {  // equalize_image: PIL's lookup table
  const int64_t n = img.h * img.w;
  for (int64_t ch = 0; ch < img.c; ++ch) {
    uint8_t* p = img.px.data() + ch * n;
    std::array<int64_t, 256> hist{};
    for (int64_t i = 0; i < n; ++i) ++hist[p[i]];
    int64_t last = 255;  // the last value present: the first where the cumulative count is n
    while (hist[static_cast<size_t>(last)] == 0) --last;
    const int64_t step = (n - hist[static_cast<size_t>(last)]) / 255;
    if (step == 0) continue;
    std::array<uint8_t, 256> lut{};
    int64_t cum = 0;
    for (int k = 1; k < 256; ++k) {
      cum += hist[static_cast<size_t>(k - 1)];
      lut[static_cast<size_t>(k)] = static_cast<uint8_t>(std::clamp<int64_t>((cum + step / 2) / step, 0, 255));
    }
    for (int64_t i = 0; i < n; ++i) p[i] = lut[p[i]];
  }
}

// Python's float modulo (the sign of the divisor).
double py_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0) {
    if ((b < 0) != (m < 0)) m += b;
  } else {
    m = std::copysign(0.0, b);
  }
  return m;
}

// _get_inverse_affine_matrix(center, angle, translate, scale=1, shear), in Python's doubles.
std::array<double, 6> inverse_affine(double cx, double cy, double angle, double tx, double ty, double shear_x,
                                     double shear_y) {
  const double deg = kPi / 180.0;  // math.radians
  const double rot = angle * deg, sx = shear_x * deg, sy = shear_y * deg;
  const double cos_sy = std::cos(sy), tan_sx = std::tan(sx), rot_minus_sy = rot - sy;
  const double cx_plus_tx = cx + tx, cy_plus_ty = cy + ty;
  const double a = std::cos(rot_minus_sy) / cos_sy;
  const double b = -(a * tan_sx + std::sin(rot));
  const double c = std::sin(rot_minus_sy) / cos_sy;
  const double d = std::cos(rot) - c * tan_sx;
  std::array<double, 6> m = {d, -b, 0.0, -c, a, 0.0};
  m[2] += cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty;
  m[5] += cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty;
  return m;
}

// torch.linspace(start, end, n) in float32 for the pixel-center grid: steps of exactly 1.
std::vector<float> centers(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>((1.0 - n) * 0.5 + static_cast<double>(i));
  return v;
}

// _affine_grid + _apply_grid_transform with grid_sample(padding_mode="zeros",
// align_corners=False) and no fill: the grid in float32; nearest: each output pixel the source
// pixel nearest to it (ties to even), 0 outside; bilinear: its four neighbours (0 outside)
// weighted as ATen's CPU sampler weights them, rounded to the nearest level.
void affine(U8Image& img, const std::array<double, 6>& m, Sampling sampling) {
  const int64_t h = img.h, w = img.w, plane = h * w;
  float r[3][2];  // theta.transpose(1, 2) / [0.5 w, 0.5 h]
  for (int k = 0; k < 3; ++k) {
    r[k][0] = static_cast<float>(m[static_cast<size_t>(k)]) / static_cast<float>(0.5 * static_cast<double>(w));
    r[k][1] = static_cast<float>(m[static_cast<size_t>(3 + k)]) / static_cast<float>(0.5 * static_cast<double>(h));
  }
  const std::vector<float> xs = centers(w), ys = centers(h);
  const float half_w = static_cast<float>(w) / 2, half_h = static_cast<float>(h) / 2;
  // The products of the grid's bmm, each rounded as it is there: x * r[0][.] per column,
  // y * r[1][.] per row; the sums keep its order, (x-product + y-product) + r[2][.].
  std::vector<float> col_x(static_cast<size_t>(w)), col_y(static_cast<size_t>(w));
  for (int64_t x = 0; x < w; ++x) {
    col_x[static_cast<size_t>(x)] = xs[static_cast<size_t>(x)] * r[0][0];
    col_y[static_cast<size_t>(x)] = xs[static_cast<size_t>(x)] * r[0][1];
  }
  thread_local std::vector<uint8_t> src;
  src = img.px;
  const uint8_t* sp = src.data();
  for (int64_t y = 0; y < h; ++y) {
    const float row_x = ys[static_cast<size_t>(y)] * r[1][0], row_y = ys[static_cast<size_t>(y)] * r[1][1];
    for (int64_t x = 0; x < w; ++x) {
      const float gx = (col_x[static_cast<size_t>(x)] + row_x) + r[2][0];
      const float gy = (col_y[static_cast<size_t>(x)] + row_y) + r[2][1];
      const float ix = (gx + 1.0f) * half_w - 0.5f, iy = (gy + 1.0f) * half_h - 0.5f;
      uint8_t* out = img.px.data() + y * w + x;
      if (sampling == Sampling::kNearest) {
        const float nx = std::nearbyint(ix), ny = std::nearbyint(iy);
        const bool inside = nx >= 0 && nx < static_cast<float>(w) && ny >= 0 && ny < static_cast<float>(h);
        const int64_t at = inside ? static_cast<int64_t>(ny) * w + static_cast<int64_t>(nx) : 0;
        for (int64_t ch = 0; ch < img.c; ++ch) out[ch * plane] = inside ? sp[ch * plane + at] : 0;
        continue;
      }
      const float x0 = std::floor(ix), y0 = std::floor(iy);
      const float we = ix - x0, wn = iy - y0, ww = 1.0f - we, ws = 1.0f - wn;
      const float nw = ws * ww, ne = ws * we, sw = wn * ww, se = wn * we;
      const auto xi = static_cast<int64_t>(x0), yi = static_cast<int64_t>(y0);
      if (xi >= 0 && xi + 1 < w && yi >= 0 && yi + 1 < h) {  // all four neighbours inside
        const uint8_t* q = sp + yi * w + xi;
        for (int64_t ch = 0; ch < img.c; ++ch, q += plane) {
          const float v = static_cast<float>(q[0]) * nw + static_cast<float>(q[1]) * ne +
                          static_cast<float>(q[w]) * sw + static_cast<float>(q[w + 1]) * se;
          out[ch * plane] = static_cast<uint8_t>(std::nearbyint(v));
        }
        continue;
      }
      auto at = [&](int64_t ch, int64_t yy, int64_t xx) -> float {
        return (xx < 0 || xx >= w || yy < 0 || yy >= h) ? 0.0f : static_cast<float>(sp[ch * plane + yy * w + xx]);
      };
      for (int64_t ch = 0; ch < img.c; ++ch) {
        const float v = at(ch, yi, xi) * nw + at(ch, yi, xi + 1) * ne + at(ch, yi + 1, xi) * sw + at(ch, yi + 1, xi + 1) * se;
        out[ch * plane] = static_cast<uint8_t>(std::nearbyint(v));
      }
    }
  }
}

// torch.rot90(image, k, dims=(-2, -1)).
void rot90(U8Image& img, int k) {
  const int64_t h = img.h, w = img.w;
  const int64_t oh = k == 2 ? h : w, ow = k == 2 ? w : h;
  std::vector<uint8_t> out(img.px.size());
  for (int64_t ch = 0; ch < img.c; ++ch)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        int64_t sy, sx;
        if (k == 1) sy = j, sx = w - 1 - i;
        else if (k == 2) sy = h - 1 - i, sx = w - 1 - j;
        else sy = h - 1 - j, sx = i;
        out[static_cast<size_t>((ch * oh + i) * ow + j)] = img.px[static_cast<size_t>((ch * h + sy) * w + sx)];
      }
  img.px = std::move(out);
  img.h = oh;
  img.w = ow;
}

void rotate(U8Image& img, double angle, Sampling sampling) {  // rotate_image (no expand, no center)
  angle = py_mod(angle, 360.0);
  if (angle == 0) return;
  if (angle == 180) return rot90(img, 2);
  if (img.h == img.w && angle == 90) return rot90(img, 1);
  if (img.h == img.w && angle == 270) return rot90(img, 3);
  affine(img, inverse_affine(0.0, 0.0, -angle, 0.0, 0.0, 0.0, 0.0), sampling);
}

// F.affine(..., shear=[degrees(atan(m)), 0] or [0, ...], center=[0, 0]): about the top-left corner.
void shear(U8Image& img, double magnitude, bool along_x, Sampling sampling) {
  const double deg = std::atan(magnitude) * (180.0 / kPi);  // math.degrees
  const double cx = 0.0 - static_cast<double>(img.w) * 0.5, cy = 0.0 - static_cast<double>(img.h) * 0.5;
  affine(img, inverse_affine(cx, cy, 0.0, 0.0, 0.0, along_x ? deg : 0.0, along_x ? 0.0 : deg), sampling);
}

void translate(U8Image& img, double magnitude, bool along_x, Sampling sampling) {  // translate=[int(m), 0] / [0, int(m)]
  const double t = std::trunc(magnitude);
  affine(img, inverse_affine(0.0, 0.0, 0.0, along_x ? t : 0.0, along_x ? 0.0 : t, 0.0, 0.0), sampling);
}

}  // namespace

const char* op_name(ImageOp op) { return kNames.at(static_cast<size_t>(op)); }

std::optional<ImageOp> parse_op(const std::string& name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (name == kNames[i]) return static_cast<ImageOp>(i);
  return std::nullopt;
}

void apply_op(ImageOp op, double magnitude, U8Image& img, Sampling sampling) {
  switch (op) {
    case ImageOp::kIdentity: return;
    case ImageOp::kShearX: return shear(img, magnitude, true, sampling);
    case ImageOp::kShearY: return shear(img, magnitude, false, sampling);
    case ImageOp::kTranslateX: return translate(img, magnitude, true, sampling);
    case ImageOp::kTranslateY: return translate(img, magnitude, false, sampling);
    case ImageOp::kRotate: return rotate(img, magnitude, sampling);
    case ImageOp::kBrightness: return brightness(img, 1.0 + magnitude);
    case ImageOp::kColor: return saturation(img, 1.0 + magnitude);
    case ImageOp::kContrast: return contrast(img, 1.0 + magnitude);
    case ImageOp::kSharpness: return sharpness(img, 1.0 + magnitude);
    case ImageOp::kPosterize: return posterize(img, static_cast<int>(magnitude));
    case ImageOp::kSolarize: return solarize(img, 255.0 * magnitude);
    case ImageOp::kAutoContrast: return autocontrast(img);
    case ImageOp::kEqualize: return equalize(img);
    case ImageOp::kInvert:
      for (auto& v : img.px) v = static_cast<uint8_t>(255 - v);
      return;
    case ImageOp::kHue: return hue(img, magnitude);
  }
}

}  // namespace dlrun::data
