// Activation checkpointing: a checkpointed segment runs again in backward, and the gradients,
// the loss and the BatchNorm statistics equal the plain model's bit for bit on the CPU — with
// dropout (the forward's RNG state is replayed), under bf16 autocast, with accumulation.
#include <catch2/catch.hpp>

#include "models/model.h"
#include "models/recompute.h"
#include "support/options.h"
#include "train/step/amp.h"
#include "train/step/optim.h"
#include "train/step/step.h"

using namespace dlrun;

namespace {

struct Outcome {
  torch::Tensor loss;
  std::vector<torch::Tensor> grads;    ///< every parameter's, in order
  std::vector<torch::Tensor> buffers;  ///< BatchNorm running statistics and counters
  int64_t recomputed = 0;
};

ModelOptions with(ModelOptions o, ActivationCheckpointing ac) {
  o.activation_checkpointing = ac;
  return o;
}

// One forward+backward of a freshly built model on a fixed batch, from a fixed global seed
// (dropout draws from it).
Outcome forward_backward(const ModelOptions& opts, int64_t side, bool bf16 = false) {
  auto model = models::build(opts, 5, side);
  model->train();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto x = torch::randn({6, opts.in_channels, side, side}, gen);
  const auto y = torch::randint(0, opts.num_classes, {6}, gen);
  torch::manual_seed(123);
  const int64_t before = models::recomputations();
  Outcome o;
  {
    train::AutocastScope ac(bf16, torch::kBFloat16, c10::DeviceType::CPU);
    o.loss = torch::nn::functional::cross_entropy(model->forward(x).to(torch::kFloat32), y);
  }
  o.loss.backward();
  o.recomputed = models::recomputations() - before;
  for (const auto& p : model->parameters()) o.grads.push_back(p.grad().clone());
  for (const auto& b : model->buffers()) o.buffers.push_back(b.clone());
  return o;
}

void require_same(const Outcome& a, const Outcome& b) {
  REQUIRE(torch::equal(a.loss, b.loss));
  REQUIRE(a.grads.size() == b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(torch::equal(a.grads[i], b.grads[i]));
  }
  REQUIRE(a.buffers.size() == b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    INFO("buffer " << i);
    REQUIRE(torch::equal(a.buffers[i], b.buffers[i]));
  }
}

ModelOptions resnet18_small() {
  ModelOptions o;
  o.name = "resnet18";
  o.in_channels = 3;
  o.num_classes = 5;
  o.stem = ResnetStem::kCifar;
  o.dropout = 0.3;
  return o;
}

ModelOptions convnet_small() {
  ModelOptions o;
  o.name = "convnet";
  o.width = 8;
  o.dropout = 0.3;
  return o;
}

ModelOptions mlp_with_dropout() {
  ModelOptions o = test::small_mlp();
  o.dropout = 0.4;
  return o;
}

}  // namespace

TEST_CASE("checkpoint(): the segment runs again in backward and its gradients are the plain graph's", "[models][recompute]") {
  auto lin = std::make_shared<torch::nn::LinearImpl>(6, 4);
  int calls = 0;
  const models::SegmentFn seg = [&](const torch::Tensor& t) {
    ++calls;
    return torch::dropout(lin->forward(t).tanh(), 0.5, /*train=*/true);
  };
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const auto x0 = torch::randn({5, 6}, gen);

  auto run = [&](bool checkpointed) {
    for (auto& p : lin->parameters()) p.mutable_grad() = torch::Tensor();
    auto x = x0.clone().requires_grad_(true);
    torch::manual_seed(9);
    calls = 0;
    auto y = checkpointed ? models::checkpoint(seg, x, {lin}) : seg(x);
    const int forward_calls = calls;
    // Draw from the global generator between forward and backward: the recomputation must
    // still see the forward's state (and leave this one's alone).
    const auto between = torch::rand({3});
    y.pow(2).sum().backward();
    const auto after = torch::rand({3});
    return std::tuple{x.grad().clone(), lin->weight.grad().clone(), lin->bias.grad().clone(), forward_calls, calls,
                      between, after};
  };
  const auto [gx0, gw0, gb0, f0, c0, between0, after0] = run(false);
  const auto [gx1, gw1, gb1, f1, c1, between1, after1] = run(true);
  REQUIRE(f0 == 1);
  REQUIRE(c0 == 1);
  REQUIRE(f1 == 1);
  REQUIRE(c1 == 2);  // once in forward, once more in backward
  REQUIRE(torch::equal(gx0, gx1));
  REQUIRE(torch::equal(gw0, gw1));
  REQUIRE(torch::equal(gb0, gb1));
  REQUIRE(torch::equal(between0, between1));
  REQUIRE(torch::equal(after0, after1));  // the generator is where the plain run left it

  SECTION("outside grad mode the segment just runs") {
    torch::NoGradGuard no_grad;
    calls = 0;
    const int64_t before = models::recomputations();
    auto y = models::checkpoint(seg, x0, {lin});
    REQUIRE(calls == 1);
    REQUIRE_FALSE(y.requires_grad());
    REQUIRE(models::recomputations() == before);
  }
}

TEST_CASE("activation checkpointing: gradients, loss and BatchNorm statistics equal the plain model's bit for bit",
          "[models][recompute]") {
  SECTION("resnet18 blocks and stages, with dropout") {
    const auto plain = forward_backward(resnet18_small(), 16);
    const auto blocks = forward_backward(with(resnet18_small(), ActivationCheckpointing::kBlocks), 16);
    const auto stages = forward_backward(with(resnet18_small(), ActivationCheckpointing::kStages), 16);
    REQUIRE(plain.recomputed == 0);
    REQUIRE(blocks.recomputed == 8);  // 2+2+2+2 residual blocks
    REQUIRE(stages.recomputed == 4);
    require_same(plain, blocks);
    require_same(plain, stages);
  }
  SECTION("convnet blocks (each conv-BN-ReLU), with dropout") {
    const auto plain = forward_backward(convnet_small(), 12);
    const auto blocks = forward_backward(with(convnet_small(), ActivationCheckpointing::kBlocks), 12);
    REQUIRE(blocks.recomputed == 4);
    require_same(plain, blocks);
  }
  SECTION("mlp blocks (each hidden layer), with dropout inside the segments") {
    const auto plain = forward_backward(mlp_with_dropout(), 4);
    const auto blocks = forward_backward(with(mlp_with_dropout(), ActivationCheckpointing::kBlocks), 4);
    REQUIRE(blocks.recomputed == static_cast<int64_t>(mlp_with_dropout().hidden.size()));
    require_same(plain, blocks);
  }
  SECTION("the zoo's families: each block, or each stage, one segment (stochastic depth and all)") {
    struct FamilyCase {
      const char* name;
      int64_t side, blocks, stages;  ///< stages 0: the family has none
    };
    for (const auto& c : {FamilyCase{"regnet_y_400mf", 32, 16, 4}, FamilyCase{"convnext_tiny", 32, 18, 4},
                          FamilyCase{"swin_t", 32, 12, 4}, FamilyCase{"efficientnet_b0", 32, 16 + 2, 0},
                          FamilyCase{"vit_b_32", 32, 12, 0}}) {
      INFO(c.name);
      ModelOptions o;
      o.name = c.name;
      o.in_channels = 3;
      o.num_classes = 5;
      o.image_size = c.side;
      const auto plain = forward_backward(o, c.side);
      const auto blocks = forward_backward(with(o, ActivationCheckpointing::kBlocks), c.side);
      REQUIRE(blocks.recomputed == c.blocks);  // efficientnet_b0: 16 MBConvs, the stem, the last conv
      require_same(plain, blocks);
      if (c.stages == 0) continue;
      const auto stages = forward_backward(with(o, ActivationCheckpointing::kStages), c.side);
      REQUIRE(stages.recomputed == c.stages);
      require_same(plain, stages);
    }
  }
  SECTION("under bf16 autocast") {
    const auto plain = forward_backward(resnet18_small(), 16, /*bf16=*/true);
    const auto blocks = forward_backward(with(resnet18_small(), ActivationCheckpointing::kBlocks), 16, true);
    REQUIRE(blocks.recomputed == 8);
    require_same(plain, blocks);
    // and autocast really was on: the bf16 loss differs from the fp32 one
    REQUIRE_FALSE(torch::equal(plain.loss, forward_backward(resnet18_small(), 16).loss));
  }
}

TEST_CASE("activation checkpointing with gradient accumulation: the same update as without", "[models][recompute]") {
  auto train_two_steps = [](ActivationCheckpointing ac) {
    auto opts = with(convnet_small(), ac);
    auto model = models::build(opts, 2, 12);
    OptimOptions oo;
    oo.lr = 0.05;
    oo.momentum = 0.9;
    auto optim = train::build_optimizer(oo, *model);
    TrainOptions t;
    t.grad_accum = 2;
    train::StepRunner runner(t, AmpOptions{}, *model, *optim, torch::kCPU);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
    torch::manual_seed(77);
    std::vector<torch::Tensor> losses;
    for (int s = 0; s < 2; ++s) {
      std::vector<data::Batch> micro;
      for (int m = 0; m < 2; ++m) micro.push_back({torch::randn({4, 1, 12, 12}, gen), torch::randint(0, 10, {4}, gen)});
      losses.push_back(runner.run(micro, 0.05).loss);
    }
    std::vector<torch::Tensor> state;
    for (const auto& p : model->parameters()) state.push_back(p.detach().clone());
    for (const auto& b : model->buffers()) state.push_back(b.clone());
    return std::pair{losses, state};
  };
  const int64_t before = models::recomputations();
  const auto [l1, s1] = train_two_steps(ActivationCheckpointing::kBlocks);
  REQUIRE(models::recomputations() - before == 2 * 2 * 4);  // steps x micro-batches x units
  const auto [l0, s0] = train_two_steps(ActivationCheckpointing::kNone);
  for (size_t i = 0; i < l0.size(); ++i) REQUIRE(torch::equal(l0[i], l1[i]));
  for (size_t i = 0; i < s0.size(); ++i) {
    INFO("tensor " << i);
    REQUIRE(torch::equal(s0[i], s1[i]));
  }
}

TEST_CASE("evaluation does not recompute and gives the plain model's outputs", "[models][recompute]") {
  auto plain = models::build(resnet18_small(), 1, 16);
  auto ckpt = models::build(with(resnet18_small(), ActivationCheckpointing::kBlocks), 1, 16);
  plain->eval();
  ckpt->eval();
  const auto x = torch::randn({2, 3, 16, 16});
  const int64_t before = models::recomputations();
  torch::NoGradGuard no_grad;
  REQUIRE(torch::equal(plain->forward(x), ckpt->forward(x)));
  REQUIRE(models::recomputations() == before);
}
