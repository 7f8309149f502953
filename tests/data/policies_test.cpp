// The automatic augmentation policies in the pipeline: where they run (on the 8-bit image after
// the flip, before the normalization), what each draws, and the settings refused. Their operations,
// tables and draw frequencies against torchvision's: tests/data/policy_ops.py.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include "data/image_ops.h"
#include "data/policies.h"
#include "data/transforms.h"
#include "support/errors.h"

using namespace dlrun;
using dlrun::testing::require_error;

namespace {

data::DatasetInfo rgb(int64_t h, int64_t w) {
  data::DatasetInfo info;
  info.channels = 3;
  info.height = h;
  info.width = w;
  info.mean = {0.0, 0.0, 0.0};
  info.std = {1.0, 1.0, 1.0};
  return info;
}

}  // namespace

TEST_CASE("a policy's operations run on the 8-bit image after the flip, before the normalization", "[data]") {
  DataOptions o;
  o.name = "synthetic";
  o.augment = {"flip", "trivial_augment"};
  o.mean = {0.5, 0.5, 0.5};
  o.std = {0.25, 0.25, 0.25};
  const auto info = rgb(12, 16);
  const auto p = data::make_pipeline(o, info, true);
  REQUIRE(p.policy.kind == data::PolicyKind::kTrivialAugment);
  torch::Tensor img = torch::randint(0, 256, {3, 12, 16}, torch::kUInt8);
  data::SampleParams sp;
  sp.box_h = 12;
  sp.box_w = 16;
  sp.flip = true;
  sp.ops = {{data::ImageOp::kPosterize, 3.0}, {data::ImageOp::kShearX, 0.4}};
  torch::Tensor out = torch::empty({3, 12, 16});
  data::apply_transforms(img.data_ptr<uint8_t>(), 12, 16, p, sp, out.data_ptr<float>());

  data::U8Image u8;  // what the policy should have seen: the flipped image
  u8.c = 3, u8.h = 12, u8.w = 16;
  torch::Tensor flipped = img.flip({2}).contiguous();
  u8.px.assign(flipped.data_ptr<uint8_t>(), flipped.data_ptr<uint8_t>() + flipped.numel());
  for (const auto& d : sp.ops) data::apply_op(d.op, d.magnitude, u8);
  torch::Tensor want = torch::from_blob(u8.px.data(), {3, 12, 16}, torch::kUInt8).to(torch::kFloat).div(255.0f);
  want = (want - 0.5f) / 0.25f;
  CHECK(torch::equal(out, want));

  // Without operations the image stays float: the result does not go through 8 bits.
  sp.ops.clear();
  data::apply_transforms(img.data_ptr<uint8_t>(), 12, 16, p, sp, out.data_ptr<float>());
  CHECK(torch::equal(out, (img.flip({2}).to(torch::kFloat).div(255.0f) - 0.5f) / 0.25f));
}

TEST_CASE("each policy draws as its torchvision class, from the sample's own stream", "[data]") {
  DataOptions o;
  o.name = "synthetic";
  const auto info = rgb(32, 32);
  struct Case {
    const char* name;
    size_t min_ops, max_ops;
  };
  for (const Case c : {Case{"trivial_augment", 1, 1}, Case{"rand_augment", 3, 3}, Case{"auto_augment", 0, 2}}) {
    INFO(c.name);
    o.augment = {c.name};
    o.rand_augment_ops = 3;
    const auto p = data::make_pipeline(o, info, true);
    int64_t with_ops = 0;
    for (int64_t i = 0; i < 200; ++i) {
      const auto a = data::draw_params(p, 5, 1, i, 32, 32), b = data::draw_params(p, 5, 1, i, 32, 32);
      REQUIRE(a.ops.size() == b.ops.size());
      for (size_t k = 0; k < a.ops.size(); ++k) {
        CHECK(a.ops[k].op == b.ops[k].op);
        CHECK(a.ops[k].magnitude == b.ops[k].magnitude);
        CHECK(a.ops[k].op != (c.name == std::string("auto_augment") ? data::ImageOp::kIdentity : data::ImageOp::kInvert));
      }
      CHECK(a.ops.size() >= c.min_ops);
      CHECK(a.ops.size() <= c.max_ops);
      with_ops += !a.ops.empty();
    }
    CHECK(with_ops > 100);
    // The evaluation pipeline has no policy.
    CHECK(data::make_pipeline(o, info, false).policy.kind == data::PolicyKind::kNone);
    CHECK(data::draw_params(data::make_pipeline(o, info, false), 5, 1, 0, 32, 32).ops.empty());
  }
  // rand_augment at bin 30 of 31: every drawn magnitude is a table's last value, either sign.
  o.augment = {"rand_augment"};
  o.rand_augment_magnitude = 30;
  const auto p = data::make_pipeline(o, info, true);
  for (int64_t i = 0; i < 50; ++i)
    for (const auto& d : data::draw_params(p, 0, 0, i, 32, 32).ops) {
      const auto s = data::op_space(data::PolicyKind::kRandAugment, d.op, 31, 32, 32);
      CHECK(std::abs(d.magnitude) == (s.table.empty() ? 0.0 : std::abs(s.table.back())));
    }
}

TEST_CASE("policy settings that cannot run are refused, naming the key", "[data]") {
  DataOptions o;
  o.name = "synthetic";
  o.augment = {"trivial_augment", "auto_augment"};
  require_error([&] { data::make_pipeline(o, rgb(8, 8), true); }, {"data.augment", "one automatic augmentation policy"});
  o.augment = {"rand_augment"};
  o.rand_augment_magnitude = 31;
  require_error([&] { data::make_pipeline(o, rgb(8, 8), true); }, {"data.rand_augment_magnitude", "0 to 30"});
  o.rand_augment_magnitude = 9;
  auto four = rgb(8, 8);
  four.channels = 4;
  four.mean = four.std = {1.0, 1.0, 1.0, 1.0};
  require_error([&] { data::make_pipeline(o, four, true); }, {"1 or 3 channels", "4"});
  o.augment = {"trivial_augment", "mixup"};
  require_error([&] { data::make_pipeline(o, rgb(8, 8), true); }, {"mixup"});
}
