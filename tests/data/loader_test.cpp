// The loader's contract (loader.h): batches independent of the worker count, ranks and
// accumulation steps that partition the global batch, resume at a cursor, eval splitting,
// and the device-resident path agreeing with the CPU path. Also the transforms' shapes and
// determinism, and that the synthetic set is learnable.
#include <set>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/transforms.h"
#include "data/data_files.h"
#include "support/errors.h"
#include "support/scratch_dir.h"

using namespace dlrun;
using namespace dlrun::testing::data;
using dlrun::testing::ScratchDir;
using dlrun::testing::require_error;

namespace {

DataOptions synth_opts() {
  DataOptions o;
  o.name = "synthetic";
  o.synthetic_shape = {2, 8, 8};
  o.synthetic_train_size = 100;
  o.synthetic_eval_size = 70;
  o.batch_size = 16;
  o.eval_batch_size = 32;
  o.augment = {"flip", "crop", "rotate", "translate", "erase"};
  o.crop_padding = 2;
  o.prefetch = 2;
  return o;
}

/// Every micro-batch of one epoch.
std::vector<data::Batch> run_epoch(std::shared_ptr<data::Dataset> ds, const DataOptions& o, data::LoaderSpec spec,
                                   int64_t epoch = 0, int64_t cursor = 0) {
  data::Loader loader(ds, o, spec);
  loader.start_epoch(epoch, cursor);
  std::vector<data::Batch> out;
  while (auto b = loader.next()) out.push_back(*b);
  return out;
}

void require_same(const std::vector<data::Batch>& a, const std::vector<data::Batch>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("batch " << i);
    CHECK(a[i].step_in_epoch == b[i].step_in_epoch);
    CHECK(a[i].micro == b[i].micro);
    CHECK(torch::equal(a[i].y, b[i].y));
    CHECK(torch::equal(a[i].x, b[i].x));
  }
}

}  // namespace

TEST_CASE("batches are identical with 0, 1 and 3 workers", "[data]") {
  DataOptions o = synth_opts();
  auto ds = data::open(o, data::Split::kTrain, 7);
  data::LoaderSpec spec;
  spec.seed = 7;
  o.workers = 0;
  auto inline_batches = run_epoch(ds, o, spec, 2);
  REQUIRE(inline_batches.size() == 6);  // 100 / 16, last partial dropped
  CHECK(inline_batches[0].x.sizes() == torch::IntArrayRef({16, 2, 8, 8}));
  CHECK(inline_batches[0].x.scalar_type() == torch::kFloat);
  for (int w : {1, 3}) {
    o.workers = w;
    o.prefetch = w == 3 ? 1 : 4;
    require_same(inline_batches, run_epoch(ds, o, spec, 2));
  }
  // Another epoch is another order and other augmentations.
  o.workers = 0;
  auto next_epoch = run_epoch(ds, o, spec, 3);
  CHECK_FALSE(torch::equal(inline_batches[0].y, next_epoch[0].y));
}

TEST_CASE("ranks and accumulation steps partition the global batch", "[data]") {
  DataOptions o = synth_opts();
  o.workers = 2;
  auto ds = data::open(o, data::Split::kTrain, 3);
  data::LoaderSpec one;
  one.seed = 3;
  auto whole = run_epoch(ds, o, one, 1);
  for (int64_t accum : {1, 2}) {
    std::vector<std::vector<data::Batch>> ranks;
    for (int r = 0; r < 2; ++r) {
      data::LoaderSpec spec = one;
      spec.rank = r;
      spec.world_size = 2;
      spec.grad_accum = accum;
      ranks.push_back(run_epoch(ds, o, spec, 1));
      REQUIRE(ranks.back().size() == whole.size() * accum);
    }
    for (size_t s = 0; s < whole.size(); ++s) {
      // Micro-batch m of rank r covers positions (m * W + r) * b of the step.
      std::vector<torch::Tensor> xs, ys;
      for (int64_t m = 0; m < accum; ++m)
        for (int r = 0; r < 2; ++r) {
          const data::Batch& b = ranks[r][s * accum + m];
          CHECK(b.step_in_epoch == static_cast<int64_t>(s));
          CHECK(b.micro == m);
          CHECK(b.x.size(0) == 16 / (2 * accum));
          xs.push_back(b.x);
          ys.push_back(b.y);
        }
      CHECK(torch::equal(torch::cat(xs), whole[s].x));
      CHECK(torch::equal(torch::cat(ys), whole[s].y));
    }
  }
}

TEST_CASE("start_epoch at a cursor yields the rest of the uninterrupted epoch", "[data]") {
  DataOptions o = synth_opts();
  o.workers = 3;
  auto ds = data::open(o, data::Split::kTrain, 11);
  data::LoaderSpec spec;
  spec.seed = 11;
  spec.grad_accum = 2;
  auto full = run_epoch(ds, o, spec, 4);
  REQUIRE(full.size() == 12);
  auto resumed = run_epoch(ds, o, spec, 4, /*cursor=*/3 * o.batch_size);
  REQUIRE(resumed.size() == 6);
  CHECK(resumed[0].step_in_epoch == 3);
  require_same(std::vector<data::Batch>(full.begin() + 6, full.end()), resumed);

  // The same data after a world-size change: 2 ranks resumed at the cursor cover the steps.
  data::LoaderSpec r0 = spec, r1 = spec;
  r0.world_size = r1.world_size = 2;
  r0.grad_accum = r1.grad_accum = 1;
  r1.rank = 1;
  auto a = run_epoch(ds, o, r0, 4, 3 * o.batch_size), b = run_epoch(ds, o, r1, 4, 3 * o.batch_size);
  REQUIRE(a.size() == 3);
  for (size_t s = 0; s < a.size(); ++s)
    CHECK(torch::equal(torch::cat({a[s].y, b[s].y}), torch::cat({full[6 + 2 * s].y, full[7 + 2 * s].y})));

  // Same loader object: a second start_epoch restarts cleanly mid-epoch.
  data::Loader loader(ds, o, spec);
  loader.start_epoch(4);
  loader.next();
  loader.start_epoch(4, 5 * o.batch_size);
  auto first = loader.next();
  REQUIRE(first);
  CHECK(torch::equal(first->x, full[10].x));
  require_error([&] { loader.start_epoch(4, 5); }, {"cursor"});
}

TEST_CASE("repeated augmentation: each sample R times, augmented apart, interleaved over ranks, resumable",
          "[data]") {
  DataOptions o = synth_opts();
  o.repeated_aug = 3;
  o.workers = 2;
  auto ds = data::open(o, data::Split::kTrain, 5);
  const torch::Tensor labels = ds->all().second;
  const std::vector<int64_t> perm = data::epoch_permutation(5, 2, 100, true);
  data::LoaderSpec one;
  one.seed = 5;
  const auto whole = run_epoch(ds, o, one, 2);
  REQUIRE(whole.size() == 6);  // the epoch keeps the set's length: 100 / 16 steps
  int64_t apart = 0, copies = 0;
  for (size_t s = 0; s < whole.size(); ++s)
    for (int64_t j = 0; j < 16; ++j) {
      const int64_t pos = static_cast<int64_t>(s) * 16 + j;
      // Position p holds the sample perm[p / 3]: its label, and its image augmented afresh.
      CHECK(whole[s].y[j].item<int64_t>() == labels[perm[static_cast<size_t>(pos / 3)]].item<int64_t>());
      if (pos % 3 != 0 && j > 0) {
        ++copies;
        apart += !torch::equal(whole[s].x[j], whole[s].x[j - 1]);
      }
    }
  CHECK(apart == copies);

  // Two ranks, two micro-batches: micro-batch g = m * 2 + r takes the positions g, g + 4, ... of
  // the step (timm's RepeatAugSampler's stride), each row the same image as at one rank.
  for (int r = 0; r < 2; ++r) {
    data::LoaderSpec spec = one;
    spec.rank = r;
    spec.world_size = 2;
    spec.grad_accum = 2;
    const auto mine = run_epoch(ds, o, spec, 2);
    REQUIRE(mine.size() == whole.size() * 2);
    for (size_t t = 0; t < mine.size(); ++t) {
      const data::Batch& b = mine[t];
      REQUIRE(b.x.size(0) == 4);
      std::set<int64_t> sources;
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t within = (b.micro * 2 + r) + j * 4;
        CHECK(torch::equal(b.x[j], whole[static_cast<size_t>(b.step_in_epoch)].x[within]));
        sources.insert((b.step_in_epoch * 16 + within) / 3);
      }
      CHECK(sources.size() == 4);  // no sample twice in one micro-batch
    }
  }

  // Resumed at a cursor: the rest of the same epoch.
  require_same(std::vector<data::Batch>(whole.begin() + 2, whole.end()), run_epoch(ds, o, one, 2, 2 * 16));
}

TEST_CASE("without shuffle the epoch visits the set in order", "[data]") {
  DataOptions o = synth_opts();
  o.shuffle = false;
  o.workers = 0;
  auto ds = data::open(o, data::Split::kTrain, 0);
  auto batches = run_epoch(ds, o, data::LoaderSpec{});
  auto labels = ds->all().second;
  CHECK(torch::equal(batches[1].y, labels.narrow(0, 16, 16)));
}

TEST_CASE("eval loader: sequential, no augmentation, last partial batch kept, split by rank", "[data]") {
  DataOptions o = synth_opts();
  o.workers = 2;
  auto ds = data::open(o, data::Split::kEval, 5);
  data::LoaderSpec spec;
  spec.train = false;
  spec.seed = 5;
  data::Loader loader(ds, o, spec);
  CHECK(loader.steps_per_epoch() == 3);  // 70 samples, batches of 32
  auto all = run_epoch(ds, o, spec);
  REQUIRE(all.size() == 3);
  CHECK(all[2].x.size(0) == 6);
  auto labels = ds->all().second;
  CHECK(torch::equal(torch::cat({all[0].y, all[1].y, all[2].y}), labels));
  // No augmentation: sample 0 is the normalized image.
  auto img0 = ds->get(0).first.to(torch::kFloat).div(255.0f).sub(0.5f).div(0.25f);
  CHECK(torch::allclose(all[0].x[0], img0));
  // Two ranks: global batch k goes to rank k % 2.
  spec.world_size = 2;
  spec.rank = 1;
  auto r1 = run_epoch(ds, o, spec);
  REQUIRE(r1.size() == 1);
  CHECK(r1[0].step_in_epoch == 1);
  CHECK(torch::equal(r1[0].y, all[1].y));
}

TEST_CASE("device-resident batches match the CPU path", "[data]") {
  DataOptions o = synth_opts();
  auto ds = data::open(o, data::Split::kTrain, 9);
  data::LoaderSpec spec;
  spec.seed = 9;
  SECTION("flip, vflip, crop and erase exactly") {
    o.augment = {"flip", "vflip", "crop", "erase"};
    o.workers = 2;
    auto cpu = run_epoch(ds, o, spec, 1);
    o.device_resident = true;
    require_same(cpu, run_epoch(ds, o, spec, 1));
  }
  SECTION("rotate and translate up to rounding") {
    o.augment = {"rotate", "translate", "flip"};
    o.workers = 0;
    auto cpu = run_epoch(ds, o, spec, 1);
    o.device_resident = true;
    auto dev = run_epoch(ds, o, spec, 1);
    REQUIRE(cpu.size() == dev.size());
    for (size_t i = 0; i < cpu.size(); ++i) CHECK(torch::allclose(cpu[i].x, dev[i].x, 1e-4, 1e-3));
  }
  SECTION("resized_crop to image_size has the right shape") {
    o.augment = {"resized_crop"};
    o.image_size = 12;
    o.device_resident = true;
    auto dev = run_epoch(ds, o, spec, 1);
    CHECK(dev[0].x.sizes() == torch::IntArrayRef({16, 2, 12, 12}));
    CHECK(torch::isfinite(dev[0].x).all().item<bool>());
  }
}

TEST_CASE("transforms: shapes, exact geometry and determinism", "[data]") {
  data::DatasetInfo info;
  info.channels = 1;
  info.height = 10;
  info.width = 20;
  info.mean = {0.0};
  info.std = {1.0};
  DataOptions o;
  o.name = "synthetic";
  torch::Tensor img = torch::arange(200, torch::kLong).remainder(256).to(torch::kUInt8).view({1, 10, 20});
  const uint8_t* src = img.data_ptr<uint8_t>();

  SECTION("eval center crop at native scale is exact") {
    o.image_size = 10;
    auto p = data::make_pipeline(o, info, /*train=*/false);
    auto sp = data::draw_params(p, 0, 0, 0, 10, 20);
    torch::Tensor out = torch::empty({1, 10, 10});
    data::apply_transforms(src, 10, 20, p, sp, out.data_ptr<float>());
    torch::Tensor expect = img.narrow(2, 5, 10).to(torch::kFloat).div(255.0f);
    CHECK(torch::allclose(out, expect, 1e-5, 1e-6));
  }
  SECTION("flip reverses rows; crop shifts with zero fill") {
    o.augment = {"flip", "crop"};
    o.crop_padding = 3;
    auto p = data::make_pipeline(o, info, true);
    torch::Tensor out = torch::empty({1, 10, 20});
    data::SampleParams sp;
    sp.box_h = 10;
    sp.box_w = 20;
    sp.flip = true;
    sp.crop_y = 3;  // no vertical shift
    sp.crop_x = 5;  // reads 2 columns to the right
    data::apply_transforms(src, 10, 20, p, sp, out.data_ptr<float>());
    torch::Tensor flipped = img.flip({2}).to(torch::kFloat).div(255.0f);
    CHECK(torch::allclose(out.narrow(2, 0, 18), flipped.narrow(2, 2, 18)));
    CHECK(out.narrow(2, 18, 2).abs().sum().item<float>() == 0.0f);
  }
  SECTION("every transform keeps the output shape; parameters depend only on (seed, epoch, index)") {
    o.augment = {"flip", "vflip", "crop", "resized_crop", "rotate", "translate", "erase"};
    o.image_size = 16;
    auto p = data::make_pipeline(o, info, true);
    auto a = data::draw_params(p, 1, 2, 3, 10, 20), b = data::draw_params(p, 1, 2, 3, 10, 20);
    CHECK(a.box_x == b.box_x);
    CHECK(a.angle_deg == b.angle_deg);
    CHECK(a.crop_x == b.crop_x);
    CHECK(a.erase_w == b.erase_w);
    int differ = 0;
    for (int64_t i = 0; i < 20; ++i)
      differ += data::draw_params(p, 1, 2, i, 10, 20).angle_deg != data::draw_params(p, 1, 3, i, 10, 20).angle_deg;
    CHECK(differ == 20);
    torch::Tensor out = torch::full({1, 16, 16}, std::nanf(""));
    data::apply_transforms(src, 10, 20, p, a, out.data_ptr<float>());
    CHECK(torch::isfinite(out).all().item<bool>());
  }
  SECTION("a resized crop reads its box: offset exactly at scale 1, the triangle filter on downscaling") {
    o.augment = {"resized_crop"};
    o.image_size = 8;
    auto p = data::make_pipeline(o, info, true);
    data::SampleParams sp;
    sp.box_x = 3;
    sp.box_y = 1;
    sp.box_w = 8;
    sp.box_h = 8;
    torch::Tensor out = torch::full({1, 8, 8}, std::nanf(""));
    data::apply_transforms(src, 10, 20, p, sp, out.data_ptr<float>());
    CHECK(torch::equal(out, img.narrow(1, 1, 8).narrow(2, 3, 8).to(torch::kFloat).div(255.0f)));
    sp.box_x = 0;
    sp.box_y = 2;
    sp.box_w = 16;  // 2x narrower, rows at scale 1
    data::apply_transforms(src, 10, 20, p, sp, out.data_ptr<float>());
    const auto px = img.to(torch::kFloat).div(255.0f);
    for (int64_t y : {0, 4, 7}) {
      // output column 3: center 7 in the source, taps at 5..8 with weights 1, 3, 3, 1 (/8)
      const float want = (px[0][y + 2][5].item<float>() + 3 * px[0][y + 2][6].item<float>() +
                          3 * px[0][y + 2][7].item<float>() + px[0][y + 2][8].item<float>()) / 8;
      CHECK(out[0][y][3].item<float>() == Approx(want).epsilon(1e-6));
    }
  }
  SECTION("evaluation sizes: eval_image_size crops, eval_resize_size sets the shorter side before it") {
    o.augment = {"resized_crop"};
    o.image_size = 8;  // training side
    o.eval_image_size = 6;
    o.eval_resize_size = 7;  // torchvision's --val-resize-size: shorter side 10 -> 7, then a 6x6 crop
    auto p = data::make_pipeline(o, info, false);
    CHECK(p.out_h == 6);
    CHECK(p.out_w == 6);
    auto sp = data::draw_params(p, 0, 0, 0, 10, 20);
    CHECK(sp.box_h == Approx(6.0 * 10 / 7));
    CHECK(sp.box_w == Approx(6.0 * 10 / 7));
    CHECK(sp.box_y == Approx((10 - 6.0 * 10 / 7) / 2));
    o.eval_resize_size = 0;  // trained with resized_crop: the usual 0.875 (e.g. 256 -> 224)
    sp = data::draw_params(data::make_pipeline(o, info, false), 0, 0, 0, 10, 20);
    CHECK(sp.box_h == Approx(10 * 0.875));
    auto train = data::make_pipeline(o, info, true);  // the training side is data.image_size's
    CHECK(train.out_h == 8);
  }
  SECTION("unknown augment names are errors") {
    o.augment = {"mixup"};
    require_error([&] { data::make_pipeline(o, info, true); }, {"mixup"});
  }
}

TEST_CASE("epoch permutations are permutations, seeded by (seed, epoch)", "[data]") {
  auto p = data::epoch_permutation(1, 0, 1000, true);
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) REQUIRE(sorted[i] == i);
  CHECK(p == data::epoch_permutation(1, 0, 1000, true));
  CHECK(p != data::epoch_permutation(1, 1, 1000, true));
  CHECK(p != data::epoch_permutation(2, 0, 1000, true));
}

// [no-tsan]: torch math only (cdist, means), whose worker threads synchronise where TSan cannot see.
TEST_CASE("the synthetic set is deterministic and learnable", "[data][no-tsan]") {
  DataOptions o = synth_opts();
  o.synthetic_shape = {1, 12, 12};
  o.synthetic_train_size = 2000;
  o.synthetic_eval_size = 500;
  auto train = data::open(o, data::Split::kTrain, 42);
  auto eval = data::open(o, data::Split::kEval, 42);
  CHECK(torch::equal(train->all().first, data::open(o, data::Split::kTrain, 42)->all().first));
  CHECK_FALSE(torch::equal(train->all().first, data::open(o, data::Split::kTrain, 43)->all().first));
  // A nearest-class-mean classifier fit on train does well on eval.
  auto [xt, yt] = train->all();
  auto [xe, ye] = eval->all();
  torch::Tensor ft = xt.to(torch::kFloat).flatten(1), fe = xe.to(torch::kFloat).flatten(1);
  std::vector<torch::Tensor> means;
  for (int64_t k = 0; k < 10; ++k) means.push_back(ft.index({yt == k}).mean(0));
  torch::Tensor pred = torch::cdist(fe, torch::stack(means)).argmin(1);
  double acc = pred.eq(ye).to(torch::kFloat).mean().item<double>();
  INFO("accuracy " << acc);
  CHECK(acc > 0.8);
  CHECK(acc < 1.0 + 1e-9);
}

TEST_CASE("loader throughput on Fashion-MNIST (hidden benchmark)", "[.][data_bench]") {
  DataOptions o;
  o.name = "fashion_mnist";
  o.augment = {"flip", "crop"};
  auto ds = data::open(o, data::Split::kTrain, 0);
  for (int w : {0, 2}) {
    o.workers = w;
    data::LoaderSpec spec;
    auto t0 = std::chrono::steady_clock::now();
    auto n = run_epoch(ds, o, spec).size();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    WARN(w << " workers: " << n << " batches in " << s << " s (" << n * o.batch_size / s << " samples/s)");
  }
}
