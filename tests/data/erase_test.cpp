// Random erasing with torchvision's and timm's parameters: the box's share and aspect within
// data.erase_scale and data.erase_ratio, and its fill (zero, a normal value per channel, one per
// value) drawn from the sample's own stream.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <cmath>

#include "data/transforms.h"

using namespace dlrun;

namespace {

data::DatasetInfo rgb(int64_t side) {
  data::DatasetInfo info;
  info.channels = 3;
  info.height = info.width = side;
  info.mean = {0.5, 0.5, 0.5};
  info.std = {0.25, 0.25, 0.25};
  return info;
}

}  // namespace

TEST_CASE("random erasing: the box within erase_scale and erase_ratio, filled as erase_value says", "[data]") {
  DataOptions o;
  o.name = "synthetic";
  o.augment = {"erase"};
  o.erase_p = 1.0;
  o.erase_scale = {0.1, 0.2};
  o.erase_ratio = {0.5, 2.0};
  const int64_t side = 64;
  const auto info = rgb(side);
  auto p = data::make_pipeline(o, info, true);
  int erased = 0;
  for (int64_t i = 0; i < 300; ++i) {
    const auto sp = data::draw_params(p, 1, 0, i, side, side);
    if (!sp.erase) continue;
    ++erased;
    const double share = static_cast<double>(sp.erase_h * sp.erase_w) / (side * side);
    // h and w are rounded from the drawn area and ratio: half a pixel either way.
    CHECK(share >= 0.1 * (1 - 1.0 / 8));
    CHECK(share <= 0.2 * (1 + 1.0 / 8));
    const double aspect = static_cast<double>(sp.erase_h) / static_cast<double>(sp.erase_w);
    CHECK(aspect >= 0.5 * (1 - 1.0 / 6));
    CHECK(aspect <= 2.0 * (1 + 1.0 / 6));
    CHECK(sp.erase_y + sp.erase_h <= side);
    CHECK(sp.erase_x + sp.erase_w <= side);
  }
  CHECK(erased == 300);  // a box of a tenth to a fifth always fits

  torch::Tensor img = torch::randint(0, 256, {3, side, side}, torch::kUInt8);
  auto sp = data::draw_params(p, 1, 0, 7, side, side);
  sp.erase_y = 8, sp.erase_x = 4, sp.erase_h = 40, sp.erase_w = 50;  // a big box, for the statistics
  using torch::indexing::Slice;
  auto box = [&](const torch::Tensor& t) { return t.index({Slice(), Slice(8, 48), Slice(4, 54)}); };
  auto run = [&](EraseValue v) {
    p.erase_value = v;
    torch::Tensor out = torch::empty({3, side, side});
    data::apply_transforms(img.data_ptr<uint8_t>(), side, side, p, sp, out.data_ptr<float>());
    return out;
  };
  const auto zero = run(EraseValue::kZero), per_channel = run(EraseValue::kPerChannel),
             per_pixel = run(EraseValue::kPerPixel);
  CHECK(box(zero).abs().max().item<float>() == 0.0f);
  // Outside the box the three agree.
  auto outside = torch::ones({3, side, side}, torch::kBool);
  outside.index_put_({Slice(), Slice(8, 48), Slice(4, 54)}, false);
  CHECK(torch::equal(zero.masked_select(outside), per_pixel.masked_select(outside)));
  CHECK(torch::equal(zero.masked_select(outside), per_channel.masked_select(outside)));
  // One value per channel, three different ones.
  for (int64_t ch = 0; ch < 3; ++ch) {
    const auto b = box(per_channel)[ch];
    CHECK(torch::equal(b, torch::full_like(b, b[0][0].item<float>())));
  }
  CHECK(box(per_channel)[0][0][0].item<float>() != box(per_channel)[1][0][0].item<float>());
  // 6000 standard normal values.
  const auto v = box(per_pixel);
  CHECK(std::abs(v.mean().item<double>()) < 5.0 / std::sqrt(6000.0));
  CHECK(v.std().item<double>() == Approx(1.0).epsilon(0.05));
  // The same sample erases the same way again (a resumed run).
  CHECK(torch::equal(per_pixel, run(EraseValue::kPerPixel)));
}
