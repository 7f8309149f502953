// Optimizer state as named tensors: exporting it and loading it into a fresh optimizer must
// continue training exactly (what resume relies on), for every optimizer; rmsprop against
// LibTorch's own torch::optim::RMSprop (torch.optim.RMSprop's algorithm) step by step (rmsprop_tf,
// lamb and lars against timm's in tools/reference/parity.py); a skipped step and the device-rate
// form of the multi-tensor ones; the parameter groups (no decay, layer decay).
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "models/model.h"
#include "support/options.h"
#include "train/step/optim.h"
#include "train/step/param_groups.h"

using namespace dlrun;

namespace {

ModelOptions mlp() { return test::small_mlp(); }

void train_steps(models::Model& model, torch::optim::Optimizer& opt, int n, int64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (int i = 0; i < n; ++i) {
    auto x = torch::randn({4, 1, 28, 28}, gen);
    auto y = torch::randint(0, 3, {4}, gen);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model.forward(x), y).backward();
    opt.step();
  }
}

bool same_params(models::Model& a, models::Model& b) {
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    if (!torch::equal(pa[i], pb[i])) return false;
  return true;
}

}  // namespace

constexpr dlrun::OptimName kAllOptimizers[] = {dlrun::OptimName::kSgd,        dlrun::OptimName::kAdamw,
                                                dlrun::OptimName::kRmsprop,    dlrun::OptimName::kRmspropTf,
                                                dlrun::OptimName::kLamb,       dlrun::OptimName::kLars};

TEST_CASE("optimizer state round-trips exactly", "[train][optim]") {
  for (const auto name : kAllOptimizers) {
    for (bool split : {false, true}) {
      INFO(dlrun::name_of(name) << " no_decay_norm_bias=" << split << " layer_decay=" << (split ? 0.7 : 0));
      OptimOptions o;
      o.name = name;
      o.lr = 0.01;
      o.nesterov = name == dlrun::OptimName::kSgd || name == dlrun::OptimName::kLars;
      o.no_decay_norm_bias = split;
      o.layer_decay = split ? 0.7 : 0.0;
      o.centered = split;  // rmsprop: its grad_avg state too
      auto a = models::build(mlp(), 1);
      auto opt_a = train::build_optimizer(o, *a);
      train_steps(*a, *opt_a, 3, 7);

      // A second model/optimizer restored from a's state.
      auto b = models::build(mlp(), 2);
      auto opt_b = train::build_optimizer(o, *b);
      {
        torch::NoGradGuard g;
        auto pa = a->parameters(), pb = b->parameters();
        for (size_t i = 0; i < pa.size(); ++i) pb[i].copy_(pa[i]);
      }
      auto state = train::optimizer_state(o, *opt_a, *a);
      REQUIRE(!state.empty());
      train::load_optimizer_state(o, *opt_b, *b, state);

      train_steps(*a, *opt_a, 2, 99);
      train_steps(*b, *opt_b, 2, 99);
      CHECK(same_params(*a, *b));
    }
  }
}

TEST_CASE("optimizer state from another model is refused", "[train][optim]") {
  OptimOptions o;
  auto a = models::build(mlp(), 1);
  auto opt_a = train::build_optimizer(o, *a);
  train_steps(*a, *opt_a, 1, 7);
  auto state = train::optimizer_state(o, *opt_a, *a);
  ModelOptions other = mlp();
  other.hidden = {8};
  auto b = models::build(other, 1);
  auto opt_b = train::build_optimizer(o, *b);
  CHECK_THROWS_AS(train::load_optimizer_state(o, *opt_b, *b, state), Error);
}

TEST_CASE("set_lr changes every group", "[train][optim]") {
  OptimOptions o;
  o.no_decay_norm_bias = true;
  auto a = models::build(mlp(), 1);
  auto opt = train::build_optimizer(o, *a);
  REQUIRE(opt->param_groups().size() == 2);
  train::set_lr(*opt, 0.123);
  for (auto& g : opt->param_groups()) CHECK(g.options().get_lr() == Approx(0.123));
  CHECK(static_cast<torch::optim::SGDOptions&>(opt->param_groups()[1].options()).weight_decay() == 0.0);
}

TEST_CASE("optimizer state loads in each parameter's memory format (channels_last)", "[train][optim]") {
  // A checkpoint stores the state contiguous; with model.channels_last the 4-D parameters are
  // NHWC, and CUDA's fused optimizers refuse state whose strides differ from the parameter's.
  ModelOptions m;
  m.name = "convnet";
  m.width = 4;
  m.channels_last = true;
  for (const auto name : {dlrun::OptimName::kSgd, dlrun::OptimName::kAdamw}) {
    INFO(dlrun::name_of(name));
    OptimOptions o;
    o.name = name;
    o.lr = 0.01;
    auto a = models::build(m, 1);
    auto opt_a = train::build_optimizer(o, *a);
    train_steps(*a, *opt_a, 2, 7);
    auto state = train::optimizer_state(o, *opt_a, *a);
    for (auto& [k, t] : state) t = t.contiguous();  // as read back from a checkpoint
    auto b = models::build(m, 2);
    {
      torch::NoGradGuard no_grad;
      auto pa = a->parameters(), pb = b->parameters();
      for (size_t i = 0; i < pa.size(); ++i) pb[i].copy_(pa[i]);
    }
    auto opt_b = train::build_optimizer(o, *b);
    train::load_optimizer_state(o, *opt_b, *b, state);
    int four_d = 0;
    for (const auto& p : b->parameters()) {
      const auto& s = opt_b->state().at(p.unsafeGetTensorImpl());
      const auto t = name == dlrun::OptimName::kSgd
                         ? static_cast<torch::optim::SGDParamState&>(*s).momentum_buffer()
                         : static_cast<torch::optim::AdamWParamState&>(*s).exp_avg_sq();
      CHECK(t.strides() == p.strides());
      four_d += p.dim() == 4 && p.is_contiguous(torch::MemoryFormat::ChannelsLast) && !p.is_contiguous();
    }
    CHECK(four_d > 0);  // the case is real: some parameters are NHWC
    train_steps(*a, *opt_a, 2, 99);
    train_steps(*b, *opt_b, 2, 99);
    CHECK(same_params(*a, *b));
  }
}

TEST_CASE("a state loaded into an optimizer that has stepped takes the loaded step counts", "[train][optim]") {
  // The fused AdamW keeps each step count on the device, keyed by the parameter and owned by its
  // state object; a load replaces the states, and a new one may be allocated where a freed one
  // was. The count must come from the load, not from the counter of the state it replaced.
  OptimOptions o;
  o.name = dlrun::OptimName::kAdamw;
  o.lr = 0.01;
  auto make = [] {
    torch::manual_seed(5);
    return torch::nn::Linear(torch::nn::LinearOptions(4, 3).bias(false));
  };
  auto a = make(), b = make();
  auto opt = train::build_optimizer(o, *a), opt_b = train::build_optimizer(o, *b);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto step = [&](torch::nn::Linear& m, torch::optim::Optimizer& op) {
    const auto x = torch::randn({8, 4}, gen);
    op.zero_grad();
    m->forward(x).square().sum().backward();
    op.step();
  };
  for (int i = 0; i < 3; ++i) step(a, *opt);
  CHECK(train::device_step_counts(*opt) == 1);
  auto state = train::optimizer_state(o, *opt, *a);
  REQUIRE(state.size() == 3);  // exp_avg, exp_avg_sq, step
  for (auto& [name, t] : state)
    if (name == "weight.step") {
      CHECK(t.item<int64_t>() == 3);
      t = torch::tensor(int64_t{10});
    }
  {
    torch::NoGradGuard g;
    b->weight.copy_(a->weight);
  }
  train::load_optimizer_state(o, *opt, *a, state);    // into the optimizer that has stepped
  train::load_optimizer_state(o, *opt_b, *b, state);  // into a fresh one: the reference
  // The counter of the replaced state is gone: whether or not the allocator happened to put the
  // new state at the old one's address, nothing can take the old count for the loaded one's.
  CHECK(train::device_step_counts(*opt) == 0);
  for (const auto& [name, t] : train::optimizer_state(o, *opt, *a))
    if (name == "weight.step") CHECK(t.item<int64_t>() == 10);
  gen = at::make_generator<at::CPUGeneratorImpl>(9);
  step(a, *opt);
  gen = at::make_generator<at::CPUGeneratorImpl>(9);
  step(b, *opt_b);
  CHECK(torch::equal(a->weight, b->weight));  // bias correction with step 11 on both
  for (const auto& [name, t] : train::optimizer_state(o, *opt, *a))
    if (name == "weight.step") CHECK(t.item<int64_t>() == 11);
}

TEST_CASE("rmsprop steps as torch.optim.RMSprop: 20 float64 steps within 1e-12, and a skipped step changes nothing",
          "[train][optim]") {
  struct Case {
    double momentum, weight_decay;
    bool centered;
  };
  for (const Case c : {Case{0, 0, false}, Case{0.9, 0, false}, Case{0.9, 1e-2, true}, Case{0, 1e-2, true}}) {
    INFO("momentum " << c.momentum << ", weight_decay " << c.weight_decay << ", centered " << c.centered);
    OptimOptions o;
    o.name = dlrun::OptimName::kRmsprop;
    o.lr = 0.01;
    o.alpha = 0.9;
    o.eps = 0.0316;  // torchvision's recipe
    o.momentum = c.momentum;
    o.weight_decay = c.weight_decay;
    o.centered = c.centered;
    auto mo = mlp();
    mo.dtype = dlrun::ModelDtype::kFloat64;
    auto ours = models::build(mo, 1), theirs = models::build(mo, 1);
    auto opt = train::build_optimizer(o, *ours);
    torch::optim::RMSprop reference(theirs->parameters(), torch::optim::RMSpropOptions(o.lr)
                                                              .alpha(o.alpha)
                                                              .eps(o.eps)
                                                              .weight_decay(o.weight_decay)
                                                              .momentum(o.momentum)
                                                              .centered(o.centered));
    train_steps(*ours, *opt, 20, 5);
    train_steps(*theirs, reference, 20, 5);
    auto pa = ours->parameters(), pb = theirs->parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      REQUIRE(pa[i].scalar_type() == torch::kFloat64);
      CHECK((pa[i] - pb[i]).abs().max().item<double>() <= 1e-12 * (pb[i].abs().max().item<double>() + 1e-12));
    }
    CHECK_FALSE(same_params(*ours, *models::build(mo, 1)));  // it moved
    // A step the device skips (an fp16 overflow): parameters and state as they were; then a
    // kept one, which moves them.
    const auto before = train::optimizer_state(o, *opt, *ours);
    std::vector<torch::Tensor> params;
    for (auto& p : ours->parameters()) params.push_back(p.detach().clone());
    torch::nn::functional::cross_entropy(ours->forward(torch::randn({4, 1, 28, 28})), torch::randint(0, 3, {4})).backward();
    train::optimizer_step(*opt, torch::ones({}));
    const auto after = train::optimizer_state(o, *opt, *ours);
    REQUIRE(after.size() == before.size());
    for (size_t i = 0; i < after.size(); ++i)
      if (after[i].first.find(".step") == std::string::npos) CHECK(torch::equal(after[i].second, before[i].second));
    for (size_t i = 0; i < params.size(); ++i) CHECK(torch::equal(ours->parameters()[i], params[i]));
    train::optimizer_step(*opt, torch::zeros({}));
    CHECK_FALSE(torch::equal(ours->parameters()[0], params[0]));
  }
}

TEST_CASE("the multi-tensor optimizers: a skipped step changes nothing, lamb's count included; the device rate "
          "equals the host one", "[train][optim]") {
  for (const auto name : {dlrun::OptimName::kRmspropTf, dlrun::OptimName::kLamb, dlrun::OptimName::kLars}) {
    for (bool variant : {false, true}) {
      INFO(dlrun::name_of(name) << (variant ? " centered, trust_clip, always_adapt, groups" : ""));
      OptimOptions o;
      o.name = name;
      o.lr = 0.05;
      o.weight_decay = 1e-2;
      o.centered = variant;
      o.trust_clip = variant;
      o.always_adapt = variant;
      o.no_decay_norm_bias = variant;
      o.layer_decay = variant ? 0.8 : 0.0;
      auto mo = mlp();
      mo.dtype = dlrun::ModelDtype::kFloat64;
      // a: steps, a skipped step, steps; b: the same without the skipped one; c: as b with the
      // rate read from the device.
      auto a = models::build(mo, 1), b = models::build(mo, 1), c = models::build(mo, 1);
      auto opt_a = train::build_optimizer(o, *a), opt_b = train::build_optimizer(o, *b),
           opt_c = train::build_optimizer(o, *c);
      train::use_device_lr(*opt_c, torch::kCPU);
      for (auto* opt : {opt_a.get(), opt_b.get(), opt_c.get()}) train::set_lr(*opt, 0.03);
      train_steps(*a, *opt_a, 2, 5);
      train_steps(*b, *opt_b, 2, 5);
      train_steps(*c, *opt_c, 2, 5);
      const auto before = train::optimizer_state(o, *opt_a, *a);
      std::vector<torch::Tensor> params;
      for (auto& p : a->parameters()) params.push_back(p.detach().clone());
      torch::nn::functional::cross_entropy(a->forward(torch::randn({4, 1, 28, 28})), torch::randint(0, 3, {4})).backward();
      train::optimizer_step(*opt_a, torch::ones({}));
      const auto after = train::optimizer_state(o, *opt_a, *a);
      REQUIRE(after.size() == before.size());
      for (size_t i = 0; i < after.size(); ++i)  // rmsprop_tf's count, which it does not read, counts every step
        if (name != dlrun::OptimName::kRmspropTf || after[i].first.find(".step") == std::string::npos)
          CHECK(torch::equal(after[i].second, before[i].second));
      for (size_t i = 0; i < params.size(); ++i) CHECK(torch::equal(a->parameters()[i], params[i]));
      for (auto* opt : {opt_a.get(), opt_b.get(), opt_c.get()}) train::set_lr(*opt, 0.02);
      train_steps(*a, *opt_a, 2, 9);
      train_steps(*b, *opt_b, 2, 9);
      train_steps(*c, *opt_c, 2, 9);
      CHECK(same_params(*a, *b));  // lamb: the bias corrections of step 3 and 4 on both
      CHECK(same_params(*b, *c));
      CHECK_FALSE(same_params(*a, *models::build(mo, 1)));
    }
  }
}

namespace {

std::map<std::string, const train::ParamGroup*> group_by_param(const std::vector<train::ParamGroup>& groups) {
  std::map<std::string, const train::ParamGroup*> m;
  for (const auto& g : groups)
    for (const auto& n : g.names) m[n] = &g;
  return m;
}

}  // namespace

TEST_CASE("parameter groups: no decay on biases, norms and embeddings; layer decay by the model's blocks",
          "[train][optim]") {
  OptimOptions o;
  o.weight_decay = 0.05;
  o.no_decay_norm_bias = true;
  o.layer_decay = 0.5;
  ModelOptions m;
  m.name = "resnet18";
  m.in_channels = 3;
  auto resnet = models::build(m, 1, 32);
  const auto groups = train::param_groups(o, *resnet);
  const auto by = group_by_param(groups);
  // 8 blocks: the stem is layer 0 (0.5^9), layer1.0 layer 1, layer4.1 layer 8, fc layer 9 (1).
  CHECK(by.at("conv1.weight")->layer == 0);
  CHECK(by.at("conv1.weight")->lr_scale == std::pow(0.5, 9));
  CHECK(by.at("conv1.weight")->weight_decay == 0.05);
  CHECK(by.at("bn1.weight")->weight_decay == 0.0);
  CHECK(by.at("layer1.0.conv1.weight")->layer == 1);
  CHECK(by.at("layer2.0.downsample.0.weight")->layer == 3);
  CHECK(by.at("layer4.1.bn2.bias")->layer == 8);
  CHECK(by.at("layer4.1.bn2.bias")->lr_scale == 0.5);
  CHECK(by.at("fc.weight")->layer == 9);
  CHECK(by.at("fc.weight")->lr_scale == 1.0);
  CHECK(by.at("fc.bias")->weight_decay == 0.0);
  CHECK(by.size() == resnet->parameters().size());
  CHECK(groups.front().name == "layer_0.decay");
  CHECK(groups.back().name == "layer_9.no_decay");

  // set_lr: each group at the schedule's rate times its scale.
  auto opt = train::build_optimizer(o, *resnet);
  REQUIRE(opt->param_groups().size() == groups.size());
  train::set_lr(*opt, 0.2);
  for (size_t i = 0; i < groups.size(); ++i) CHECK(opt->param_groups()[i].options().get_lr() == 0.2 * groups[i].lr_scale);

  // ConvNeXt: a downsampling layer between two stages joins the next block.
  m.name = "convnext_tiny";
  const auto cn = group_by_param(train::param_groups(o, *models::build(m, 1, 32)));
  CHECK(cn.at("features.0.0.weight")->layer == 0);   // the stem
  CHECK(cn.at("features.1.2.layer_scale")->layer == 3);
  CHECK(cn.at("features.2.1.weight")->layer == 4);  // downsampling, then features.3.0 is block 4
  CHECK(cn.at("features.3.0.block.0.weight")->layer == 4);
  CHECK(cn.at("classifier.2.weight")->layer == 19);  // 3 + 3 + 9 + 3 blocks, then the head
  CHECK(cn.at("features.1.2.layer_scale")->weight_decay == 0.0);  // (C, 1, 1), 1-D in timm: no decay there either
  CHECK(cn.at("features.1.2.block.0.weight")->weight_decay == 0.05);

  // ViT: the class token and position embedding take no decay, and are the stem.
  m.name = "vit_b_32";
  m.image_size = 64;
  const auto vit = group_by_param(train::param_groups(o, *models::build(m, 1, 64)));
  CHECK(vit.at("class_token")->weight_decay == 0.0);
  CHECK(vit.at("encoder.pos_embedding")->weight_decay == 0.0);
  CHECK(vit.at("encoder.pos_embedding")->layer == 0);
  CHECK(vit.at("conv_proj.weight")->weight_decay == 0.05);
  CHECK(vit.at("encoder.layers.encoder_layer_11.mlp.3.weight")->layer == 12);
  CHECK(vit.at("encoder.ln.weight")->layer == 12);  // the final norm joins the last block, as timm's
  CHECK(vit.at("heads.head.weight")->layer == 13);
  CHECK(vit.at("heads.head.weight")->lr_scale == 1.0);

  // Swin: the relative position bias tables take no decay.
  m.name = "swin_t";
  m.image_size = 0;
  const auto swin = group_by_param(train::param_groups(o, *models::build(m, 1, 64)));
  CHECK(swin.at("features.1.0.attn.relative_position_bias_table")->weight_decay == 0.0);
  CHECK(swin.at("features.1.0.attn.qkv.weight")->weight_decay == 0.05);

  // Without no_decay_norm_bias every parameter decays; without layer decay: one group.
  OptimOptions plain;
  plain.weight_decay = 0.05;
  const auto one = train::param_groups(plain, *resnet);
  REQUIRE(one.size() == 1);
  CHECK(one[0].name == "decay");
  CHECK(one[0].lr_scale == 1.0);

  // A layer decay needs one of dlrun's models.
  torch::nn::Linear lin(4, 2);
  CHECK_THROWS_AS(train::param_groups(o, *lin), Error);
}
