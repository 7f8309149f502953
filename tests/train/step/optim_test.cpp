// Optimizer state as named tensors: exporting it and loading it into a fresh optimizer must
// continue training exactly (what resume relies on), for sgd, adamw and rmsprop; rmsprop against
// LibTorch's own torch::optim::RMSprop (torch.optim.RMSprop's algorithm) step by step.
#include <catch2/catch.hpp>

#include "models/model.h"
#include "support/options.h"
#include "train/step/optim.h"

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

TEST_CASE("optimizer state round-trips exactly", "[train][optim]") {
  for (const auto name : {dlrun::OptimName::kSgd, dlrun::OptimName::kAdamw, dlrun::OptimName::kRmsprop}) {
    for (bool split : {false, true}) {
      INFO(dlrun::name_of(name) << " no_decay_norm_bias=" << split);
      OptimOptions o;
      o.name = name;
      o.lr = 0.01;
      o.nesterov = name == dlrun::OptimName::kSgd;
      o.no_decay_norm_bias = split;
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
