// Model registry: shapes, seeded init, torchvision-compatible names/counts, errors, NHWC.
//
// The exact torchvision key list and logits are checked from Python
// (tests/models/torchvision_compat.py); these tests cover what C++ alone can assert.
#include <ATen/CPUGeneratorImpl.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include "models/model.h"

namespace models = dlrun::models;

namespace {

dlrun::ModelOptions opts_for(const std::string& name, int64_t in_channels = 3, int64_t classes = 10,
                             dlrun::ResnetStem stem = dlrun::ResnetStem::kImagenet) {
  dlrun::ModelOptions o;
  o.name = name;
  o.in_channels = in_channels;
  o.num_classes = classes;
  o.stem = stem;
  return o;
}

// Small forwards are fastest on one thread, and OpenMP barriers stall badly when the test
// machine is oversubscribed (ctest -j, other builds); every test that runs a model calls this.
void one_thread() { torch::set_num_threads(1); }

bool same_weights(const torch::nn::Module& a, const torch::nn::Module& b) {
  auto sa = models::state_dict(a);
  auto sb = models::state_dict(b);
  if (sa.size() != sb.size()) return false;
  for (size_t i = 0; i < sa.size(); ++i)
    if (sa[i].first != sb[i].first || !torch::equal(sa[i].second, sb[i].second)) return false;
  return true;
}

std::vector<std::string> keys(const torch::nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& kv : models::state_dict(m)) out.push_back(kv.first);
  return out;
}

// Models over this many parameters (regnet_y_128gf) take ~15 s each to build here: the tests
// below leave them to tests/models/torchvision_zoo.py, which builds each, checks every key and
// shape against torchvision's and the count `dlrun models` gives, and compares the logits.
constexpr int64_t kGiant = 200'000'000;

}  // namespace

TEST_CASE("every model maps (N, C, H, W) to (N, num_classes)", "[models]") {
  one_thread();
  torch::NoGradGuard no_grad;
  for (const auto& z : models::zoo()) {
    const std::string& name = z.name;
    const bool resnet = z.family == "resnet";
    // The deeper and wider ResNets once (their blocks are resnet50's, checked in every way; and
    // tests/models/torchvision_zoo.py runs each against torchvision).
    const bool once = z.parameters > 30'000'000;
    if (z.parameters > kGiant) continue;
    for (const auto stem : {dlrun::ResnetStem::kImagenet, dlrun::ResnetStem::kCifar}) {
      if ((!resnet || once) && stem == dlrun::ResnetStem::kCifar) continue;
      for (int64_t channels : {1, 3}) {
        if (once && channels == 1) continue;
        // Only mlp depends on the image size; the others are built once for both sizes.
        std::shared_ptr<models::Model> model;
        for (int64_t hw : {28, 32}) {
          if (hw < z.min_image_size) continue;
          auto o = opts_for(name, channels, 7, stem);
          if (z.fixed_image_size) {  // a ViT, built for two of its patches a side (vit_b_16: 32)
            if (hw != 28) continue;
            hw = 2 * std::stoll(name.substr(name.rfind('_') + 1));
            o.image_size = hw;
          }
          INFO(name << " stem=" << dlrun::name_of(stem) << " " << hw << "x" << hw << " channels=" << channels);
          if (!model || name == "mlp" || z.fixed_image_size) model = models::build(o, 0, hw);
          model->eval();
          auto y = model->forward(torch::randn({2, channels, hw, hw}));
          REQUIRE(y.sizes() == torch::IntArrayRef({2, 7}));
          REQUIRE(torch::isfinite(y).all().item<bool>());
        }
      }
    }
  }
}

TEST_CASE("mlp takes its input size from build() and rejects other sizes", "[models]") {
  one_thread();
  auto model = models::build(opts_for("mlp", 3), 0, 32, 24);
  REQUIRE(model->forward(torch::randn({4, 3, 32, 24})).sizes() == torch::IntArrayRef({4, 10}));
  try {
    model->forward(torch::randn({4, 3, 28, 28}));
    FAIL("expected an error");
  } catch (const dlrun::Error& e) {
    REQUIRE(e.code() == dlrun::ExitCode::kBadInput);
    REQUIRE_THAT(e.message(), Catch::Contains("2304"));
  }
}

TEST_CASE("the same seed gives bitwise-identical weights whatever ran before", "[models]") {
  for (const std::string name : {"mlp", "convnet", "resnet18"}) {
    INFO(name);
    auto a = models::build(opts_for(name, 1), 42);
    torch::manual_seed(123);
    (void)torch::rand({1000});
    auto b = models::build(opts_for(name, 1), 42);
    REQUIRE(same_weights(*a, *b));
    auto c = models::build(opts_for(name, 1), 43);
    REQUIRE_FALSE(same_weights(*a, *c));
  }
}

TEST_CASE("build() leaves the global RNG where it was", "[models]") {
  torch::manual_seed(5);
  auto expected = torch::rand({8});
  torch::manual_seed(5);
  (void)models::build(opts_for("resnet18"), 1);
  REQUIRE(torch::equal(torch::rand({8}), expected));
}

TEST_CASE("parameter counts equal torchvision's, as dlrun models lists them", "[models]") {
  REQUIRE(models::num_parameters(*models::build(opts_for("resnet18", 3, 1000), 0)) == 11689512);
  REQUIRE(models::num_parameters(*models::build(opts_for("resnet34", 3, 1000), 0)) == 21797672);
  REQUIRE(models::num_parameters(*models::build(opts_for("resnet50", 3, 1000), 0)) == 25557032);
  int torchvision_models = 0;
  for (const auto& z : models::zoo()) {
    INFO(z.name);
    REQUIRE(models::family(z.name) == z.family);
    torchvision_models += z.torchvision;
    if (z.parameters > kGiant) continue;
    const int64_t classes = z.torchvision ? 1000 : 10, channels = z.torchvision ? 3 : 1;
    REQUIRE(models::num_parameters(*models::build(opts_for(z.name, channels, classes), 0, z.image_size)) ==
            z.parameters);
  }
  REQUIRE(torchvision_models >= 54);  // 5 ResNets, 3 ResNeXts, 2 Wide ResNets, 3 MobileNets, 11 EfficientNets, 15 RegNets, 4 ConvNeXts, 5 ViTs, 6 Swins
  // mlp 784-512-256-10 and convnet w=32 on 1 channel (fc 64*3*3 -> 10), counted by hand.
  REQUIRE(models::num_parameters(*models::build(opts_for("mlp", 1), 0)) == 535818);
  REQUIRE(models::num_parameters(*models::build(opts_for("convnet", 1), 0)) == 70954);
}

TEST_CASE("resnet state-dict keys follow torchvision's names and order", "[models]") {
  auto r18 = keys(*models::build(opts_for("resnet18"), 0));
  auto r50 = keys(*models::build(opts_for("resnet50"), 0));
  REQUIRE(r18.size() == 122);
  REQUIRE(r50.size() == 320);
  const std::vector<std::string> head = {"conv1.weight",         "bn1.weight",   "bn1.bias",
                                         "bn1.running_mean",     "bn1.running_var",
                                         "bn1.num_batches_tracked", "layer1.0.conv1.weight"};
  REQUIRE(std::vector<std::string>(r18.begin(), r18.begin() + head.size()) == head);
  REQUIRE(std::vector<std::string>(r50.begin(), r50.begin() + head.size()) == head);
  REQUIRE(r18.back() == "fc.bias");
  REQUIRE(r18[r18.size() - 2] == "fc.weight");
  auto has = [](const std::vector<std::string>& v, const std::string& k) {
    return std::find(v.begin(), v.end(), k) != v.end();
  };
  REQUIRE_FALSE(has(r18, "layer1.0.downsample.0.weight"));
  REQUIRE(has(r18, "layer2.0.downsample.1.num_batches_tracked"));
  REQUIRE(has(r50, "layer1.0.downsample.0.weight"));
  REQUIRE(has(r50, "layer4.2.bn3.running_var"));

  auto sig = models::architecture_signature(*models::build(opts_for("resnet50", 3, 1000), 0));
  REQUIRE(sig.rfind("conv1.weight:[64,3,7,7];bn1.weight:[64];", 0) == 0);
  REQUIRE_THAT(sig, Catch::Contains("layer2.0.conv2.weight:[128,128,3,3]"));  // v1.5: stride on 3x3
  REQUIRE_THAT(sig, Catch::Contains("bn1.num_batches_tracked:[]"));
  REQUIRE_THAT(sig, Catch::EndsWith("fc.weight:[1000,2048];fc.bias:[1000]"));
}

TEST_CASE("the cifar stem is a 3x3 conv1 and keeps the resolution", "[models]") {
  auto imagenet = models::build(opts_for("resnet18", 1), 0);
  auto cifar = models::build(opts_for("resnet18", 1, 10, dlrun::ResnetStem::kCifar), 0);
  REQUIRE(models::state_dict(*imagenet)[0].second.sizes() == torch::IntArrayRef({64, 1, 7, 7}));
  REQUIRE(models::state_dict(*cifar)[0].second.sizes() == torch::IntArrayRef({64, 1, 3, 3}));
  REQUIRE(keys(*imagenet) == keys(*cifar));
}

TEST_CASE("model.dropout applies to every model, torchvision's without renaming a weight", "[models]") {
  one_thread();
  for (const char* name : {"mlp", "convnet", "resnet18", "regnet_x_400mf", "convnext_tiny"}) {
    INFO(name);
    auto o = opts_for(name, 1);
    auto plain = models::build(o, 0, 32);
    o.dropout = 0.5;
    auto dropped = models::build(o, 0, 32);
    // torchvision has no dropout in these: the state dict must stay torchvision's.
    if (models::family(name) != "mlp" && models::family(name) != "convnet") CHECK(keys(*plain) == keys(*dropped));
    const auto x = torch::randn({4, 1, 32, 32});
    dropped->eval();
    plain->eval();
    CHECK(torch::allclose(dropped->forward(x), plain->forward(x)));  // identity at evaluation
    dropped->train();
    const auto a = dropped->forward(x);
    const auto b = dropped->forward(x);
    CHECK_FALSE(torch::equal(a, b));  // random masks in training
  }
}

TEST_CASE("model.stochastic_depth drops residual branches per sample in training only", "[models]") {
  one_thread();
  for (const char* name : {"efficientnet_b0", "convnext_tiny", "swin_t"}) {
    INFO(name);
    auto o = opts_for(name, 3);
    o.stochastic_depth = 0;
    auto plain = models::build(o, 0, 32);
    o.stochastic_depth = 0.9;
    auto dropping = models::build(o, 0, 32);
    CHECK(keys(*plain) == keys(*dropping));
    const auto x = torch::randn({4, 3, 32, 32});
    plain->eval();
    dropping->eval();
    CHECK(torch::equal(dropping->forward(x), plain->forward(x)));  // the same weights; identity at evaluation
    plain->train();
    dropping->train();
    CHECK(torch::equal(plain->forward(x), plain->forward(x)));  // nothing random without it
    torch::manual_seed(1);
    const auto a = dropping->forward(x);
    const auto b = dropping->forward(x);
    CHECK_FALSE(torch::equal(a, b));
    torch::manual_seed(1);
    CHECK(torch::equal(dropping->forward(x), a));  // drawn from the default generator
  }
}

TEST_CASE("RegNet and ConvNeXt draw their weights as torchvision's constructors", "[models]") {
  const auto check_std = [](const torch::Tensor& t, double std) {
    REQUIRE(t.std().item<double>() == Approx(std).epsilon(0.03));
    REQUIRE(std::abs(t.mean().item<double>()) < std / 10);
  };
  auto regnet = models::state_dict(*models::build(opts_for("regnet_y_400mf", 3, 1000), 3));
  for (const auto& [name, t] : regnet) {
    INFO(name);
    if (name == "trunk_output.block4.block4-0.f.b.0.weight")  // normal, std sqrt(2 / fan_out)
      check_std(t, std::sqrt(2.0 / static_cast<double>(t.size(0) * 9)));
    if (name == "fc.weight") check_std(t, 0.01);
    if (name == "fc.bias") REQUIRE(t.abs().max().item<double>() == 0);
    if (name == "trunk_output.block4.block4-0.f.se.fc1.bias")  // the Conv2d default, U(+-1/sqrt(fan_in))
      REQUIRE(t.abs().max().item<double>() > 0);
  }
  auto convnext = models::state_dict(*models::build(opts_for("convnext_tiny", 3, 1000), 3, 32));
  for (const auto& [name, t] : convnext) {
    INFO(name);
    if (name == "features.5.0.block.3.weight" || name == "classifier.2.weight") check_std(t, 0.02);  // trunc_normal
    if (name == "features.5.0.block.3.bias" || name == "features.0.0.bias") REQUIRE(t.abs().max().item<double>() == 0);
    if (name == "features.5.0.layer_scale") REQUIRE(torch::all(t == 1e-6f).item<bool>());
    if (name == "features.5.0.block.2.weight") REQUIRE(torch::all(t == 1).item<bool>());
  }
}

TEST_CASE("model.zero_init_residual: each block's last BatchNorm gamma 0, nothing else changed", "[models]") {
  for (const char* name : {"resnet18", "resnet50"}) {
    INFO(name);
    auto o = opts_for(name, 3);
    const auto plain = models::state_dict(*models::build(o, 5));
    o.zero_init_residual = true;
    const auto zeroed = models::state_dict(*models::build(o, 5));
    REQUIRE(plain.size() == zeroed.size());
    const std::string last = std::string(name) == "resnet18" ? ".bn2.weight" : ".bn3.weight";
    int zeros = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
      INFO(plain[i].first);
      const std::string& key = plain[i].first;
      const bool block_last = key.rfind("layer", 0) == 0 && key.size() > last.size() &&
                              key.compare(key.size() - last.size(), last.size(), last) == 0;
      if (block_last) {
        CHECK(zeroed[i].second.abs().max().item<double>() == 0);
        ++zeros;
      } else {
        CHECK(torch::equal(plain[i].second, zeroed[i].second));
      }
    }
    CHECK(zeros == (std::string(name) == "resnet18" ? 8 : 16));
  }
}

TEST_CASE("resnets use torchvision's init", "[models]") {
  auto model = models::build(opts_for("resnet18", 3, 1000), 3);
  for (const auto& [name, t] : models::state_dict(*model)) {
    INFO(name);
    if (name == "layer4.1.conv2.weight") {  // kaiming_normal fan_out: std sqrt(2 / (512*9))
      REQUIRE(t.std().item<double>() == Approx(std::sqrt(2.0 / (512 * 9))).epsilon(0.02));
      REQUIRE(std::abs(t.mean().item<double>()) < 1e-3);
    } else if (name == "fc.weight") {  // Linear default: U(+-1/sqrt(512))
      REQUIRE(t.abs().max().item<double>() <= 1.0 / std::sqrt(512.0));
      REQUIRE(t.abs().max().item<double>() > 0.9 / std::sqrt(512.0));
    } else if (name.find("bn") != std::string::npos && name.find(".weight") != std::string::npos) {
      REQUIRE(torch::all(t == 1).item<bool>());
    } else if (name.find("bn") != std::string::npos && name.find(".bias") != std::string::npos) {
      REQUIRE(torch::all(t == 0).item<bool>());
    }
  }
}

TEST_CASE("state_dict returns the model's own tensors", "[models]") {
  auto model = models::build(opts_for("convnet", 1), 0);
  auto sd = models::state_dict(*model);
  REQUIRE(sd[0].first == "features.0.weight");
  REQUIRE(sd[1].first == "features.1.weight");
  REQUIRE(sd[5].first == "features.1.num_batches_tracked");
  {
    torch::NoGradGuard no_grad;
    sd[0].second.fill_(0.5);
  }
  REQUIRE(torch::all(models::state_dict(*model)[0].second == 0.5).item<bool>());
}

TEST_CASE("unknown model names are bad input listing the valid names", "[models]") {
  try {
    models::build(opts_for("resnet19"), 0);
    FAIL("expected an error");
  } catch (const dlrun::Error& e) {
    REQUIRE(e.code() == dlrun::ExitCode::kBadInput);
    REQUIRE(e.key() == "model.name");
    REQUIRE_THAT(e.message(), Catch::Contains("resnet19"));
    for (const auto& name : models::names()) REQUIRE_THAT(e.message(), Catch::Contains(name));
  }
}

TEST_CASE("channels_last models give the contiguous model's outputs", "[models]") {
  one_thread();
  for (const std::string name : {"convnet", "resnet50"}) {
    INFO(name);
    auto opts = opts_for(name, 3, 10);
    auto plain = models::build(opts, 9);
    opts.channels_last = true;
    auto nhwc = models::build(opts, 9);
    auto conv1 = models::state_dict(*nhwc)[0].second;
    REQUIRE(conv1.is_contiguous(torch::MemoryFormat::ChannelsLast));
    REQUIRE_FALSE(conv1.is_contiguous());
    auto x = torch::randn({2, 3, 32, 32});
    plain->eval();
    nhwc->eval();
    torch::NoGradGuard no_grad;
    REQUIRE(torch::allclose(nhwc->forward(x), plain->forward(x), 1e-4, 1e-4));
  }
}

TEST_CASE("one-channel images and weights get channels_last's exact strides", "[models]") {
  // [N, 1, H, W] counts as channels_last-contiguous with NCHW strides; oneDNN and cuDNN read the
  // strides, so such a tensor would make the first convolution's output NCHW.
  const auto x = torch::randn({4, 1, 5, 6});
  REQUIRE(x.contiguous(torch::MemoryFormat::ChannelsLast).strides() == x.strides());  // what contiguous() keeps
  const auto y = models::channels_last(x);
  REQUIRE(y.strides() == c10::IntArrayRef(c10::get_channels_last_strides_2d(x.sizes())));
  REQUIRE(y.suggest_memory_format() == torch::MemoryFormat::ChannelsLast);
  REQUIRE(torch::equal(y, x));
  const auto z = torch::randn({2, 3, 4, 4}).contiguous(torch::MemoryFormat::ChannelsLast);
  REQUIRE(models::channels_last(z).data_ptr() == z.data_ptr());  // already exact: no copy
  one_thread();
  for (const std::string name : {"convnet", "resnet18"}) {
    INFO(name);
    auto opts = opts_for(name, 1, 10);
    opts.channels_last = true;
    auto m = models::build(opts, 9);
    const auto conv1 = models::state_dict(*m)[0].second;
    REQUIRE(conv1.size(1) == 1);
    REQUIRE(conv1.suggest_memory_format() == torch::MemoryFormat::ChannelsLast);
    auto plain_opts = opts;
    plain_opts.channels_last = false;
    auto plain = models::build(plain_opts, 9);
    m->eval();
    plain->eval();
    torch::NoGradGuard no_grad;
    const auto in = torch::randn({2, 1, 28, 28});
    REQUIRE(torch::allclose(m->forward(in), plain->forward(in), 1e-4, 1e-4));
  }
}

TEST_CASE("model.dtype float64: the float32 model's initial values, float64 parameters and outputs", "[models]") {
  one_thread();
  for (const std::string name : {"mlp", "convnet", "resnet18"}) {
    INFO(name);
    auto opts = opts_for(name, 3, 10);
    auto single = models::build(opts, 4, 32);
    opts.dtype = dlrun::ModelDtype::kFloat64;
    auto dbl = models::build(opts, 4, 32);
    REQUIRE(dbl->dtype() == torch::kFloat64);
    const auto a = models::state_dict(*single), b = models::state_dict(*dbl);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].first);
      if (!a[i].second.is_floating_point()) continue;
      REQUIRE(b[i].second.scalar_type() == torch::kFloat64);
      REQUIRE(torch::equal(b[i].second.to(torch::kFloat32), a[i].second));
    }
    REQUIRE(models::architecture_signature(*dbl) != models::architecture_signature(*single));
    REQUIRE_THAT(models::architecture_signature(*dbl), Catch::Contains(":float64"));
    const auto x = torch::randn({2, 3, 32, 32});  // float32 images, as the loader gives them
    single->eval();
    dbl->eval();
    torch::NoGradGuard no_grad;
    const auto y = dbl->forward(x);
    REQUIRE(y.scalar_type() == torch::kFloat64);
    REQUIRE(torch::allclose(y.to(torch::kFloat32), single->forward(x), 1e-4, 1e-4));
  }
}

// Not run by ctest: `dlrun_core_tests "[bench]"` prints convnet training throughput
// (forward + backward, batch 128, 28x28x1) on 1 and 2 threads, NCHW and channels_last.
TEST_CASE("convnet forward+backward throughput, batch 128", "[.][bench]") {
  for (int threads : {1, 2}) {
    torch::set_num_threads(threads);
    for (bool channels_last : {false, true}) {
      auto opts = opts_for("convnet", 1);
      opts.channels_last = channels_last;
      auto model = models::build(opts, 0);
      auto x = torch::randn({128, 1, 28, 28});
      auto y = torch::randint(10, {128});
      auto step = [&] {
        model->zero_grad();
        torch::nn::functional::cross_entropy(model->forward(x), y).backward();
      };
      for (int i = 0; i < 3; ++i) step();
      const int iters = 20;
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) step();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      WARN("convnet threads=" << threads << " channels_last=" << channels_last << ": "
                              << (iters * 128) / s << " images/s");
    }
  }
}

// Not run by ctest: `dlrun_core_tests "[bench]"` prints how long build() takes.
TEST_CASE("build() time", "[.][bench]") {
  for (const std::string name : {"convnet", "resnet18", "resnet50"}) {
    auto t0 = std::chrono::steady_clock::now();
    auto model = models::build(opts_for(name, 3, 1000), 0);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    WARN(name << ": build " << s << " s");
  }
}

TEST_CASE("adaptive_avg_pool_by_matmul: adaptive_avg_pool2d's windows and means, forward and backward",
          "[models]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  for (const auto& [h, w, oh, ow] : std::vector<std::array<int64_t, 4>>{
           {7, 7, 3, 3}, {8, 8, 3, 3}, {5, 9, 3, 2}, {3, 3, 3, 3}, {1, 4, 1, 3}, {14, 6, 5, 4}}) {
    INFO(h << "x" << w << " -> " << oh << "x" << ow);
    const auto x = torch::randn({2, 3, h, w}, gen).to(torch::kFloat64);
    const auto a = x.clone().requires_grad_(true), b = x.clone().requires_grad_(true);
    const auto want = torch::adaptive_avg_pool2d(a, {oh, ow});
    const auto got = models::adaptive_avg_pool_by_matmul(b, oh, ow);
    REQUIRE(got.sizes() == want.sizes());
    CHECK(torch::allclose(got, want, 1e-12, 1e-12));
    const auto up = torch::randn(want.sizes(), gen).to(torch::kFloat64);
    (want * up).sum().backward();
    (got * up).sum().backward();
    CHECK(torch::allclose(b.grad(), a.grad(), 1e-12, 1e-12));
  }
  // Off CUDA, or without deterministic algorithms, the model uses ATen's own operator.
  const auto x = torch::randn({1, 2, 7, 7}, gen);
  CHECK(torch::equal(models::adaptive_avg_pool(x, 3, 3), torch::adaptive_avg_pool2d(x, {3, 3})));
}
