// Models with use_fused_conv_bn_relu: every conv-BN-ReLU goes through dlrun::conv_bn_relu
// (counted at the dispatcher), and the outputs, gradients and BatchNorm statistics are the
// unfused model's within float64 rounding — in training and eval, NCHW and channels_last, with
// activation checkpointing. On the CPU the operator is the ATen reference; the CUDA kernels
// are compared with it in tests/kernels/bn_relu_gpu_test.cpp.
#include <ATen/record_function.h>
#include <catch2/catch.hpp>

#include <atomic>

#include "models/model.h"
#include "models/recompute.h"

using namespace dlrun;

namespace {

// How many times an operator was dispatched while this lives.
class OpCounter {
 public:
  explicit OpCounter(std::string name) : name_(std::move(name)) {
    handle_ = at::addThreadLocalCallback(at::RecordFunctionCallback(
        [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
          if (current_ && current_->name_ == fn.name()) ++current_->count_;
          return nullptr;
        }));
    current_ = this;
  }
  ~OpCounter() {
    at::removeCallback(handle_);
    current_ = nullptr;
  }
  int count() const { return count_; }

 private:
  std::string name_;
  std::atomic<int> count_{0};
  at::CallbackHandle handle_;
  static inline OpCounter* current_ = nullptr;
};

struct Pass {
  torch::Tensor out;
  std::vector<torch::Tensor> grads, buffers;
  int fused_calls = 0;
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
    OpCounter counter("dlrun::conv_bn_relu");
    p.out = model->forward(x);
    p.fused_calls = counter.count();
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

}  // namespace

TEST_CASE("fused conv-BN-ReLU: the unfused model's outputs, gradients and statistics", "[models][kernels]") {
  ModelOptions convnet;
  convnet.name = "convnet";
  convnet.width = 8;
  struct Case {
    ModelOptions opts;
    int64_t side;
    int triples;
  };
  for (auto [opts, side, triples] : {Case{resnet("resnet18"), 12, 1 + 8}, Case{resnet("resnet50"), 16, 1 + 16 * 2},
                                      Case{convnet, 12, 4}}) {
    for (const bool channels_last : {false, true}) {
      opts.channels_last = channels_last;
      for (const bool training : {true, false}) {
        INFO(opts.name << (channels_last ? " NHWC" : " NCHW") << (training ? " train" : " eval"));
        const auto plain = run(opts, side, false, training);
        const auto fused = run(opts, side, true, training);
        CHECK(plain.fused_calls == 0);
        CHECK(fused.fused_calls == triples);
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
