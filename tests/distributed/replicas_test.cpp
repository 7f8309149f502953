// A world of one answers every question about the other ranks locally (src/distributed/replicas.h):
// the loop asks the same questions with or without a process group. The group itself is tested
// with 2 gloo ranks in tests/distributed/group_test.cpp and e2e:dist.
#include <catch2/catch.hpp>

#include "checkpoint/rng.h"
#include "config/loader.h"
#include "distributed/replicas.h"
#include "models/model.h"

using namespace dlrun;

TEST_CASE("a world of one answers locally", "[train][replicas]") {
  const Config cfg = config::load_text("model: {name: mlp, hidden: [4]}\ndata: {name: synthetic}\n", "one.yaml");
  dist::Replicas one(nullptr, cfg, torch::kCPU);
  CHECK_FALSE(one.distributed());
  CHECK(one.rank() == 0);
  CHECK(one.size() == 1);
  CHECK(one.leader());
  CHECK(one.any(true));
  CHECK_FALSE(one.any(false));
  auto t = torch::tensor({1.5, 2.5}, torch::kFloat64);
  one.all_reduce(t);
  CHECK(torch::equal(t, torch::tensor({1.5, 2.5}, torch::kFloat64)));
  const auto all = one.all_gather(t);
  REQUIRE(all.size() == 1);
  CHECK(torch::equal(all[0], t));
  // No checkpoint to share, no model to replicate: nothing changes.
  std::optional<ckpt::Loaded> none;
  one.share_checkpoint(none);
  CHECK_FALSE(none.has_value());
  auto model = models::build(cfg.model, 1, 28);
  const auto before = models::state_dict(*model);
  one.sync_batchnorm(*model);
  one.sync_buffers(*model);
  const dist::StepReplication step = one.replicate(*model);  // the step stays local
  CHECK(step.grads == nullptr);
  CHECK_FALSE(step.before_step);
  const auto after = models::state_dict(*model);
  for (size_t i = 0; i < before.size(); ++i) CHECK(torch::equal(before[i].second, after[i].second));
}

// Several ranks draw from (run.seed, rank, step) at each step, so any rank can write every rank's
// generators (the state part "rng" after a lost peer; docs/design.md).
TEST_CASE("a step's generators are a function of the seed, the rank and the step", "[train][replicas][rng]") {
  CHECK(ckpt::step_seed(7, 1, 5) == ckpt::step_seed(7, 1, 5));
  CHECK(ckpt::step_seed(7, 1, 5) != ckpt::step_seed(7, 2, 5));
  CHECK(ckpt::step_seed(7, 1, 5) != ckpt::step_seed(7, 1, 6));
  CHECK(ckpt::step_seed(7, 1, 5) != ckpt::step_seed(8, 1, 5));
  const uint64_t seed = ckpt::step_seed(7, 1, 5);
  const ckpt::TensorDict before = ckpt::rng_states(torch::kCPU);
  const ckpt::TensorDict predicted = ckpt::seeded_rng_states(seed, torch::kCPU);
  REQUIRE(predicted.size() == before.size());
  CHECK(torch::equal(ckpt::rng_states(torch::kCPU)[0].second, before[0].second));  // predicting touched nothing ...
  CHECK_FALSE(torch::equal(predicted[0].second, before[0].second));
  ckpt::seed_all(seed);  // ... and seeding gives the predicted states
  CHECK(torch::equal(ckpt::rng_states(torch::kCPU)[0].second, predicted[0].second));
  const auto draw = torch::rand({4});
  ckpt::set_rng_states(predicted, torch::kCPU);
  CHECK(torch::equal(torch::rand({4}), draw));
}
