// Image files through the pipeline (transforms.h transform_encoded), and the region decode's
// quality against the full decode (measure_roi_decode, `dlrun bench data --psnr`).
#include <algorithm>
#include <cmath>
#include <limits>

#include "base/clock.h"
#include "base/error.h"
#include "data/image_decode.h"
#include "data/transforms.h"

namespace dlrun::data {

void transform_encoded(const std::vector<uint8_t>& bytes, const std::string& name, const Pipeline& p, uint64_t seed,
                       int64_t epoch, int64_t index, bool roi, float* out) {
  int64_t h = 0, w = 0;
  image_size_bytes(bytes, name, &h, &w);
  SampleParams sp = draw_params(p, seed, epoch, index, h, w);
  const int c = static_cast<int>(p.channels);
  DecodedImage img;
  if (roi) {
    DecodedRegion r = decode_region(bytes, name, c, {sp.box_y, sp.box_x, sp.box_h, sp.box_w, p.out_h, p.out_w});
    sp.box_y = sp.box_y * r.scale_y - static_cast<double>(r.y0);  // the box in the region's pixels
    sp.box_h *= r.scale_y;
    sp.box_x = sp.box_x * r.scale_x - static_cast<double>(r.x0);
    sp.box_w *= r.scale_x;
    img = std::move(r.image);
  } else {
    img = decode_image_bytes(bytes, name, c);
  }
  thread_local std::vector<uint8_t> planar;  // (C, H, W), reused by every image of this thread
  const int64_t ih = img.height, iw = img.width, pl = ih * iw;
  planar.resize(static_cast<size_t>(c * pl));
  const uint8_t* src = img.pixels.data();
  if (c == 1) {
    std::copy(src, src + pl, planar.data());
  } else {
    for (int64_t q = 0; q < pl; ++q)
      for (int ch = 0; ch < c; ++ch) planar[static_cast<size_t>(ch * pl + q)] = src[q * c + ch];
  }
  apply_transforms(planar.data(), ih, iw, p, sp, out);
}

RoiQuality measure_roi_decode(const Dataset& ds, const DataOptions& opts, uint64_t seed, int64_t samples) {
  DLRUN_CHECK_INPUT(ds.encoded(), "data.name={}: the region decode applies to image files only", opts.name);
  Pipeline p = make_pipeline(opts, ds.info(), /*train=*/true);
  p.normalize = false;  // compare pixels in [0, 1]
  const size_t n = static_cast<size_t>(p.channels * p.out_h * p.out_w);
  std::vector<float> a(n), b(n);
  RoiQuality q;
  q.worst_psnr_db = std::numeric_limits<double>::infinity();
  double sum = 0;
  const int64_t count = std::min(samples, ds.size());
  for (int64_t i = 0; i < count; ++i) {
    const EncodedSample es = ds.get_encoded(i);
    double t0 = mono_now();
    transform_encoded(es.bytes, es.name, p, seed, 0, i, true, a.data());
    double t1 = mono_now();
    transform_encoded(es.bytes, es.name, p, seed, 0, i, false, b.data());
    q.roi_s += t1 - t0;
    q.full_s += mono_now() - t1;
    double se = 0;
    for (size_t k = 0; k < n; ++k) se += static_cast<double>(a[k] - b[k]) * (a[k] - b[k]);
    const double mse = se / static_cast<double>(n);
    const double psnr = mse <= 0 ? 99.0 : 10 * std::log10(1.0 / mse);  // identical outputs: reported as 99 dB
    sum += psnr;
    q.worst_psnr_db = std::min(q.worst_psnr_db, psnr);
  }
  q.samples = count;
  q.mean_psnr_db = count > 0 ? sum / static_cast<double>(count) : 0;
  return q;
}

}  // namespace dlrun::data
