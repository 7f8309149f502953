// Image files through the pipeline (transforms.h transform_encoded), and the region decode's
// quality against the full decode (measure_roi_decode, `dlrun bench data --psnr`).
#include <algorithm>
#include <cmath>

#include "base/clock.h"
#include "base/error.h"
#include "data/image_decode.h"
#include "data/transforms.h"

namespace dlrun::data {

void transform_encoded(const std::vector<uint8_t>& bytes, const std::string& name, const Pipeline& p, uint64_t seed,
                       int64_t epoch, int64_t index, bool roi, float* out, int* scale_num) {
  int64_t h = 0, w = 0;
  image_size_bytes(bytes, name, &h, &w);
  SampleParams sp = draw_params(p, seed, epoch, index, h, w);
  const int c = static_cast<int>(p.channels);
  thread_local DecodedRegion region;  // a pixel buffer reused by every image of this thread
  if (roi) {
    decode_region(bytes, name, c, {sp.box_y, sp.box_x, sp.box_h, sp.box_w, p.out_h, p.out_w}, &region);
    sp.box_y = sp.box_y * region.scale_y - static_cast<double>(region.y0);  // the box in the region's pixels
    sp.box_h *= region.scale_y;
    sp.box_x = sp.box_x * region.scale_x - static_cast<double>(region.x0);
    sp.box_w *= region.scale_x;
    if (scale_num) *scale_num = region.scale_num;
  } else {
    if (scale_num) *scale_num = 8;
    region = DecodedRegion{};
    region.image = decode_image_bytes(bytes, name, c);
  }
  const DecodedImage& img = region.image;
  apply_transforms(img.pixels.data(), img.height, img.width, p, sp, out, /*interleaved=*/true);
}

RoiQuality measure_roi_decode(const Dataset& ds, const DataOptions& opts, uint64_t seed, int64_t samples) {
  DLRUN_CHECK_INPUT(ds.encoded(), "data.name={}: the region decode applies to image files only", opts.name);
  Pipeline p = make_pipeline(opts, ds.info(), /*train=*/true);
  p.normalize = false;  // compare pixels in [0, 1]
  const size_t n = static_cast<size_t>(p.channels * p.out_h * p.out_w);
  std::vector<float> a(n), b(n);
  RoiQuality q;
  double sum = 0;
  int64_t differ = 0;
  const int64_t count = std::min(samples, ds.size());
  for (int64_t i = 0; i < count; ++i) {
    const EncodedSample es = ds.get_encoded(i);
    int scale = 8;
    double t0 = mono_now();
    transform_encoded(es.bytes, es.name, p, seed, 0, i, true, a.data(), &scale);
    double t1 = mono_now();
    transform_encoded(es.bytes, es.name, p, seed, 0, i, false, b.data());
    q.roi_s += t1 - t0;
    q.full_s += mono_now() - t1;
    q.scaled += scale < 8;
    double se = 0;
    for (size_t k = 0; k < n; ++k) se += static_cast<double>(a[k] - b[k]) * (a[k] - b[k]);
    if (se == 0) {
      ++q.identical;
      continue;
    }
    const double psnr = 10 * std::log10(1.0 / (se / static_cast<double>(n)));
    sum += psnr;
    q.worst_psnr_db = differ++ == 0 ? psnr : std::min(q.worst_psnr_db, psnr);
  }
  q.samples = count;
  q.mean_psnr_db = differ > 0 ? sum / static_cast<double>(differ) : 0;
  return q;
}

}  // namespace dlrun::data
