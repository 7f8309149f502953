// Models with use_fused_conv_bn_relu: every conv-BN-ReLU goes through dlrun::conv_bn_relu and
// every ResNet block's conv-BN-add-ReLU tail through dlrun::conv_bn_add_relu (counted at the
// dispatcher), and the outputs, gradients and BatchNorm statistics are the
// unfused model's within float64 rounding — in training and eval, NCHW and channels_last, with
// activation checkpointing; under CPU bf16 autocast as close to the float32 pass as the unfused
// model is (and bit for bit the same with activation checkpointing). On the CPU the operators run dlrun's CPU kernels (compared with the
// ATen reference in tests/kernels/bn_relu_test.cpp); the CUDA kernels are compared with them in
// tests/kernels/bn_relu_gpu_test.cpp.
#include <ATen/record_function.h>
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "models/batchnorm.h"
#include "models/model.h"
#include "models/recompute.h"
#include "train/step/amp.h"

using namespace dlrun;

namespace {

// How many times each of some operators was dispatched while this lives (one at a time).
class OpCounter {
 public:
  explicit OpCounter(std::vector<std::string> names) : names_(std::move(names)), counts_(names_.size()) {
    handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(
        [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
          if (current_ != nullptr)
            for (size_t i = 0; i < current_->names_.size(); ++i)
              if (current_->names_[i] == fn.name()) ++current_->counts_[i];
          return nullptr;
        }));
    current_ = this;
  }
  explicit OpCounter(const char* name) : OpCounter(std::vector<std::string>{name}) {}
  ~OpCounter() {
    at::removeCallback(handle_);
    current_ = nullptr;
  }
  int count(size_t i = 0) const { return counts_[i]; }

 private:
  std::vector<std::string> names_;
  std::vector<int> counts_;
  at::CallbackHandle handle_;
  static inline OpCounter* current_ = nullptr;
};

struct Pass {
  torch::Tensor out;
  std::vector<torch::Tensor> grads, buffers;
  int fused_calls = 0;
  int tail_calls = 0;  ///< dlrun::conv_bn_add_relu
};

// float64 models: float32 gradients of deep ReLU+BN nets on tiny batches move by percents for
// rounding-level differences (docs/distributed.md), which would hide a real error in noise.
Pass run(ModelOptions o, int64_t side, bool fused, bool training) {
  o.dtype = ModelDtype::kFloat64;
  auto model = models::build(o, 4, side);
  model->use_fused_conv_bn_relu(fused);
  training ? model->train() : model->eval();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
  const auto x = torch::randn({4, o.in_channels, side, side}, gen).to(torch::kFloat64);
  const auto up = torch::randn({4, o.num_classes}, gen).to(torch::kFloat64);
  Pass p;
  {
    OpCounter counter({"dlrun::conv_bn_relu", "dlrun::conv_bn_add_relu"});
    p.out = model->forward(x);
    p.fused_calls = counter.count(0);
    p.tail_calls = counter.count(1);
  }
  if (training) {
    (p.out * up).sum().backward();
    for (const auto& t : model->parameters()) p.grads.push_back(t.grad());
  }
  for (const auto& b : model->buffers()) p.buffers.push_back(b.clone());
  return p;
}

void require_close(const Pass& a, const Pass& b) {
  CHECK(torch::allclose(a.out, b.out, 1e-9, 1e-10));
  REQUIRE(a.grads.size() == b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    INFO("gradient " << i);
    CHECK(torch::allclose(a.grads[i], b.grads[i], 1e-7, 1e-9));
  }
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    INFO("buffer " << i);
    CHECK(torch::allclose(a.buffers[i].to(torch::kFloat64), b.buffers[i].to(torch::kFloat64), 1e-9, 1e-10));
  }
}

ModelOptions resnet(const char* name) {
  ModelOptions o;
  o.name = name;
  o.in_channels = 3;
  o.num_classes = 7;
  o.stem = ResnetStem::kCifar;
  return o;
}

struct ModelCase {
  ModelOptions opts;
  int64_t side;
  int triples;  ///< its conv-BN-ReLU triples
  int tails;    ///< its blocks' conv-BN-add-ReLU ends
};

std::vector<ModelCase> model_cases() {
  ModelOptions convnet;
  convnet.name = "convnet";
  convnet.width = 8;
  // ResNeXt: the grouped 3x3 convs of its blocks through the fused operators
  return {{resnet("resnet18"), 12, 1 + 8, 8},
          {resnet("resnet50"), 16, 1 + 16 * 2, 16},
          {resnet("resnext50_32x4d"), 16, 1 + 16 * 2, 16},
          // RegNetY: the stem and each block's a and b (grouped), with squeeze-excitation between
          {resnet("regnet_y_400mf"), 64, 1 + 16 * 2, 0},
          // MobileNetV3-small: its three ReLU blocks' conv-BN-ReLUs (1 + 2 + 2); hard-swish not
          {resnet("mobilenet_v3_small"), 32, 5, 0},
          {convnet, 12, 4, 0}};
}

}  // namespace

TEST_CASE("fused conv-BN-ReLU: the unfused model's outputs, gradients and statistics", "[models][kernels]") {
  for (auto [opts, side, triples, tails] : model_cases()) {
    for (const bool channels_last : {false, true}) {
      opts.channels_last = channels_last;
      for (const bool training : {true, false}) {
        INFO(opts.name << (channels_last ? " NHWC" : " NCHW") << (training ? " train" : " eval"));
        const auto plain = run(opts, side, false, training);
        const auto fused = run(opts, side, true, training);
        CHECK(plain.fused_calls + plain.tail_calls == 0);
        CHECK(fused.fused_calls == triples);
        CHECK(fused.tail_calls == tails);
        require_close(plain, fused);
      }
    }
  }
}

TEST_CASE("fused conv-BN-ReLU under activation checkpointing: the same gradients as without", "[models][kernels]") {
  auto opts = resnet("resnet18");
  const auto fused = run(opts, 12, true, true);
  opts.activation_checkpointing = ActivationCheckpointing::kBlocks;
  const int64_t before = models::recomputations();
  const auto both = run(opts, 12, true, true);
  CHECK(models::recomputations() - before == 8);
  CHECK(torch::equal(fused.out, both.out));
  for (size_t i = 0; i < fused.grads.size(); ++i) CHECK(torch::equal(fused.grads[i], both.grads[i]));
  for (size_t i = 0; i < fused.buffers.size(); ++i) CHECK(torch::equal(fused.buffers[i], both.buffers[i]));
}

namespace {

// Eval-mode outputs of a model whose BatchNorms hold non-trivial running statistics (a few
// training passes first) and affine parameters, with use_folded_batchnorm on or off.
struct EvalPass {
  torch::Tensor out;
  int folded_calls = 0;
};

EvalPass eval_pass(ModelOptions o, int64_t side, bool folded, bool grad, torch::ScalarType dtype) {
  if (dtype == torch::kFloat64) o.dtype = ModelDtype::kFloat64;
  auto model = models::build(o, 4, side);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters())
      if (p.key().find("bn") != std::string::npos || p.key().find("downsample.1") != std::string::npos ||
          p.value().dim() == 1)
        p.value().uniform_(0.5, 1.5, gen);  // BatchNorm gammas and betas away from 1 and 0
    model->train();
    for (int i = 0; i < 3; ++i) model->forward(torch::randn({8, o.in_channels, side, side}, gen).to(dtype) * 2 + 1);
  }
  model->use_folded_batchnorm(folded);
  model->eval();
  const auto x = torch::randn({4, o.in_channels, side, side}, gen).to(dtype);
  EvalPass p;
  OpCounter counter("dlrun::conv_bias_relu");
  if (grad) {
    p.out = model->forward(x);
  } else {
    torch::NoGradGuard no_grad;
    p.out = model->forward(x);
  }
  p.folded_calls = counter.count();
  return p;
}

}  // namespace

TEST_CASE("folded BatchNorm: the unfolded model's eval outputs, through dlrun::conv_bias_relu", "[models][kernels]") {
  for (auto [opts, side, triples, tails] : model_cases()) {
    for (const bool channels_last : {false, true}) {
      opts.channels_last = channels_last;
      INFO(opts.name << (channels_last ? " NHWC" : " NCHW"));
      const auto plain = eval_pass(opts, side, false, false, torch::kFloat64);
      const auto folded = eval_pass(opts, side, true, false, torch::kFloat64);
      CHECK(plain.folded_calls == 0);
      CHECK(folded.folded_calls == triples);
      CHECK(torch::allclose(folded.out, plain.out, 1e-9, 1e-10));
      const auto plain32 = eval_pass(opts, side, false, false, torch::kFloat32);
      const auto folded32 = eval_pass(opts, side, true, false, torch::kFloat32);
      CHECK(torch::allclose(folded32.out, plain32.out, 1e-4, 1e-4));
      // With gradients on (or in training) nothing is folded: the op has no backward.
      CHECK(eval_pass(opts, side, true, true, torch::kFloat64).folded_calls == 0);
    }
  }
}

TEST_CASE("fold_batchnorm: weight and bias of the equivalent convolution", "[models][kernels]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 5, 3).padding(1).bias(true));
  models::BatchNorm2d bn(5);
  {
    torch::NoGradGuard no_grad;
    bn->running_mean.normal_(0, 1, gen);
    bn->running_var.uniform_(0.2, 3, gen);
    bn->weight.uniform_(0.5, 2, gen);
    bn->bias.normal_(0, 1, gen);
  }
  conv->eval();
  bn->eval();
  const auto [w, b] = models::fold_batchnorm(*conv, *bn);
  const auto x = torch::randn({2, 3, 7, 7}, gen);
  torch::NoGradGuard no_grad;
  CHECK(torch::allclose(torch::conv2d(x, w, b, 1, 1), bn->forward(conv->forward(x)), 1e-5, 1e-5));
  models::BatchNorm2d batch_stats(torch::nn::BatchNorm2dOptions(5).track_running_stats(false));
  CHECK_FALSE(models::fold_batchnorm(*conv, *batch_stats).first.defined());
}

namespace {

// A float32 model's training pass under CPU bf16 autocast (convolutions in bf16, BatchNorm in
// its input's dtype with float32 parameters and statistics, as PyTorch runs it).
Pass run_bf16(ModelOptions o, int64_t side, bool fused, bool bf16 = true) {
  auto model = models::build(o, 4, side);
  model->use_fused_conv_bn_relu(fused);
  model->train();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(6);
  const auto x = torch::randn({4, o.in_channels, side, side}, gen);
  const auto up = torch::randn({4, o.num_classes}, gen);
  Pass p;
  {
    train::AutocastScope autocast(bf16, torch::kBFloat16, c10::DeviceType::CPU);
    OpCounter counter({"dlrun::conv_bn_relu", "dlrun::conv_bn_add_relu"});
    p.out = model->forward(x);
    p.fused_calls = counter.count(0);
    p.tail_calls = counter.count(1);
  }
  (p.out.to(torch::kFloat32) * up).sum().backward();
  for (const auto& t : model->parameters()) p.grads.push_back(t.grad());
  for (const auto& b : model->buffers()) p.buffers.push_back(b.clone());
  return p;
}

// |a - b| against the size of b as a whole: bf16 rounding moves single elements by percents.
double rel_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).norm().item<double>() /
         std::max(b.to(torch::kFloat64).norm().item<double>(), 1e-12);
}

}  // namespace

TEST_CASE("fused conv-BN-ReLU under CPU bf16 autocast: as close to the float32 pass as the unfused model",
          "[models][kernels][amp]") {
  // bf16 rounding alone moves the gradients of this deep net on a tiny batch by tens of percent
  // against float32 (either way), so the fused pass is held to the unfused bf16 pass's distance
  // from the float32 truth: a wrong gradient formula or a dropped residual would be ~100 % off.
  for (auto [opts, side, triples, tails] : model_cases()) {
    if (opts.name == "resnet50") continue;  // resnet18 has both kinds of block end; convnet no tails
    // RegNetY's 16 blocks and MobileNetV3's 11 on 4 samples: bf16 moves their gradients by over
    // 100 % either way (noise)
    if (opts.name == "regnet_y_400mf" || opts.name == "mobilenet_v3_small") continue;
    for (const bool channels_last : {false, true}) {
      opts.channels_last = channels_last;
      INFO(opts.name << (channels_last ? " NHWC" : " NCHW"));
      const auto truth = run_bf16(opts, side, false, /*bf16=*/false);
      const auto plain = run_bf16(opts, side, false);
      const auto fused = run_bf16(opts, side, true);
      CHECK(plain.fused_calls + plain.tail_calls == 0);
      CHECK(fused.fused_calls == triples);  // the fused operators ran, on bf16 activations
      CHECK(fused.tail_calls == tails);
      CHECK(fused.out.scalar_type() == plain.out.scalar_type());
      CHECK(rel_error(fused.out, truth.out) <= 1.5 * rel_error(plain.out, truth.out) + 1e-2);
      REQUIRE(fused.grads.size() == plain.grads.size());
      double fused_sum = 0, plain_sum = 0;
      for (size_t i = 0; i < plain.grads.size(); ++i) {
        INFO("gradient " << i);
        CHECK(fused.grads[i].scalar_type() == torch::kFloat32);
        const double f = rel_error(fused.grads[i], truth.grads[i]), p = rel_error(plain.grads[i], truth.grads[i]);
        CHECK(f <= 1.5 * p + 2e-2);
        fused_sum += f;
        plain_sum += p;
      }
      CHECK(fused_sum <= 1.15 * plain_sum);
      for (size_t i = 0; i < plain.buffers.size(); ++i) {
        INFO("buffer " << i);
        CHECK(fused.buffers[i].scalar_type() == plain.buffers[i].scalar_type());
        CHECK(rel_error(fused.buffers[i], truth.buffers[i]) <= 1.5 * rel_error(plain.buffers[i], truth.buffers[i]) + 1e-3);
      }
    }
  }
}

TEST_CASE("fused conv-BN-ReLU under bf16 autocast and activation checkpointing: the same pass bit for bit",
          "[models][kernels][amp]") {
  for (const char* name : {"resnet18", "convnet"}) {
    INFO(name);
    ModelOptions opts = resnet(name);
    if (std::string(name) == "convnet") opts = model_cases()[2].opts;
    const auto fused = run_bf16(opts, 12, true);
    opts.activation_checkpointing = ActivationCheckpointing::kBlocks;
    const int64_t before = models::recomputations();
    const auto both = run_bf16(opts, 12, true);
    CHECK(models::recomputations() - before > 0);
    CHECK(torch::equal(fused.out, both.out));
    for (size_t i = 0; i < fused.grads.size(); ++i) CHECK(torch::equal(fused.grads[i], both.grads[i]));
    for (size_t i = 0; i < fused.buffers.size(); ++i) CHECK(torch::equal(fused.buffers[i], both.buffers[i]));
  }
}

TEST_CASE("folded_state_dict: every BatchNorm after a convolution taken into it; the model left as it was",
          "[models][kernels]") {
  for (auto [opts, side, triples, tails] : model_cases()) {
    for (const bool channels_last : {false, true}) {
      opts.channels_last = channels_last;
      INFO(opts.name << (channels_last ? " NHWC" : " NCHW"));
      auto model = models::build(opts, 4, side);
      model->train();
      const auto before = models::state_dict(*model);
      std::vector<torch::Tensor> copies;
      for (const auto& [k, t] : before) copies.push_back(t.clone());
      const auto folded = models::folded_state_dict(*model, opts.in_channels);
      // The model: still training, not folding, parameters and buffers untouched.
      CHECK(model->is_training());
      CHECK_FALSE(model->folded_batchnorm());
      for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(before[i].second, copies[i]));
      // Every BatchNorm of these models follows a convolution: none is left, each gave a bias.
      int bns = 0, biases = 0;
      for (const auto& m : model->modules()) bns += dynamic_cast<models::BatchNorm2dImpl*>(m.get()) != nullptr;
      for (const auto& [k, t] : folded) {
        INFO(k);
        CHECK(k.find("bn") == std::string::npos);
        CHECK(t.is_contiguous());
        biases += k.size() > 5 && k.compare(k.size() - 5, 5, ".bias") == 0 && t.size(0) != opts.num_classes;
      }
      CHECK(bns > 0);
      CHECK(biases == bns);
      CHECK(folded.size() == before.size() - 5 * bns + bns);  // weight, bias, 2 statistics, count -> a bias
    }
  }
}
