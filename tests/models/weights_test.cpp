// Loading outside weights (models/weights.h): what matched is reported, strict refuses the rest,
// the head stays as initialised when the class count differs, and a folded export reads back
// into the unfolded network with the same eval outputs.
#include <catch2/catch.hpp>

#include "base/error.h"
#include "models/batchnorm.h"
#include "models/model.h"
#include "models/weights.h"

using namespace dlrun;

namespace {

ModelOptions small(const char* name, int64_t classes = 7) {
  ModelOptions o;
  o.name = name;
  o.in_channels = 3;
  o.num_classes = classes;
  o.stem = ResnetStem::kCifar;
  o.width = 8;
  return o;
}

// A model whose BatchNorm statistics are not the initial ones (a few training passes).
std::shared_ptr<models::Model> trained(const ModelOptions& o, uint64_t seed) {
  auto m = models::build(o, seed, 12);
  m->train();
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 3; ++i) m->forward(torch::randn({4, 3, 12, 12}) * 2 + 0.5);
  return m;
}

torch::Tensor eval_out(models::Model& m, const torch::Tensor& x) {
  m.eval();
  torch::NoGradGuard no_grad;
  return m.forward(x);
}

}  // namespace

TEST_CASE("load_weights: an exact match loads everything and reports it", "[models][weights]") {
  auto src = trained(small("resnet18"), 1);
  auto dst = models::build(small("resnet18"), 2, 12);
  const auto r = models::load_weights(*dst, models::state_dict(*src), "w.safetensors", {});
  CHECK(r.missing.empty());
  CHECK(r.unexpected.empty());
  CHECK_FALSE(r.folded);
  CHECK(r.loaded.size() == models::state_dict(*dst).size());
  const std::string n = std::to_string(r.loaded.size());
  CHECK_THAT(r.summary(), Catch::StartsWith("loaded " + n + " of " + n + " tensors; missing: none; unexpected: none"));
  const auto x = torch::randn({2, 3, 12, 12});
  CHECK(torch::equal(eval_out(*src, x), eval_out(*dst, x)));
}

TEST_CASE("load_weights: strict refuses missing and unexpected names; not strict reports them", "[models][weights]") {
  auto src = trained(small("convnet"), 1);
  auto tensors = models::state_dict(*src);
  const std::string dropped = tensors.front().first;
  tensors.erase(tensors.begin());
  tensors.emplace_back("extra.weight", torch::zeros({3}));
  auto dst = models::build(small("convnet"), 2, 12);
  const auto before = models::state_dict(*dst).back().second.clone();
  try {
    models::load_weights(*dst, tensors, "w.pt", {});
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    CHECK_THAT(e.message(), Catch::Contains("w.pt: the weights do not match the model: missing " + dropped) &&
                                Catch::Contains("unexpected extra.weight"));
  }
  CHECK(torch::equal(models::state_dict(*dst).back().second, before));  // nothing was written
  models::LoadOptions lax;
  lax.strict = false;
  const auto r = models::load_weights(*dst, tensors, "w.pt", lax);
  CHECK(r.missing == std::vector<std::string>{dropped});
  CHECK(r.unexpected == std::vector<std::string>{"extra.weight"});
  CHECK(torch::equal(models::state_dict(*dst).back().second, models::state_dict(*src).back().second));
}

TEST_CASE("load_weights: another class count keeps the head as initialised, only when asked", "[models][weights]") {
  auto src = trained(small("resnet18", 10), 1);
  auto dst = models::build(small("resnet18", 4), 2, 12);
  const auto head_w = models::state_dict(*dst)[models::state_dict(*dst).size() - 2].second.clone();
  CHECK_THROWS_WITH(models::load_weights(*dst, models::state_dict(*src), "w.pt", {}),
                    Catch::Contains("'fc.weight' has shape 10x512, the model expects 4x512"));
  models::LoadOptions o;
  o.reinit_head_on_mismatch = true;
  const auto r = models::load_weights(*dst, models::state_dict(*src), "w.pt", o);
  CHECK(r.reinitialised == std::vector<std::string>{"fc.weight", "fc.bias"});
  CHECK(r.loaded.size() == models::state_dict(*dst).size() - 2);
  CHECK(torch::equal(models::state_dict(*dst)[models::state_dict(*dst).size() - 2].second, head_w));
  CHECK(torch::equal(models::state_dict(*dst).front().second, models::state_dict(*src).front().second));
}

TEST_CASE("load_weights: a folded export reads back into the unfolded network", "[models][weights]") {
  for (const char* name : {"resnet18", "resnet50", "convnet"}) {
    INFO(name);
    auto src = trained(small(name), 1);
    const auto x = torch::randn({2, 3, 12, 12});
    const auto want = eval_out(*src, x);
    const auto folded = models::folded_state_dict(*src, 3);
    auto dst = models::build(small(name), 2, 12);
    CHECK_THROWS_WITH(models::load_weights(*dst, folded, "f.safetensors", {}), Catch::Contains("missing"));
    models::LoadOptions o;
    o.allow_folded = true;
    const auto r = models::load_weights(*dst, folded, "f.safetensors", o);
    CHECK(r.folded);
    CHECK(r.missing.empty());
    CHECK(torch::allclose(eval_out(*dst, x), want, 1e-4, 1e-4));
  }
}
