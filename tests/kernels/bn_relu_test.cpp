// dlrun::bn_relu and dlrun::conv_bn_relu through the dispatcher, on the CPU (the reference):
// the plain PyTorch sequence's outputs, gradients and running statistics; finite differences
// in double; NCHW and channels_last; bf16 inputs with float32 statistics; input errors.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include "kernels/ops.h"

using namespace dlrun;

namespace {

struct Bn {
  torch::Tensor weight, bias, running_mean, running_var;
  explicit Bn(int64_t c, torch::ScalarType dtype = torch::kFloat32) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    const auto o = torch::TensorOptions().dtype(dtype);
    weight = (torch::rand({c}, gen) + 0.5).to(dtype).requires_grad_(true);
    bias = (torch::randn({c}, gen) * 0.2).to(dtype).requires_grad_(true);
    running_mean = torch::randn({c}, gen).to(dtype);
    running_var = (torch::rand({c}, gen) + 0.5).to(dtype);
  }
};

// BatchNorm2d's functional form, then ReLU: what the op replaces.
torch::Tensor plain(const torch::Tensor& x, const Bn& bn, torch::Tensor rm, torch::Tensor rv, bool training) {
  return torch::relu(torch::batch_norm(x, bn.weight, bn.bias, rm, rv, training, 0.1, 1e-5, false));
}

}  // namespace

TEST_CASE("bn_relu: outputs, gradients and running statistics of BatchNorm2d + ReLU", "[kernels]") {
  for (const bool training : {true, false}) {
    for (const auto format : {torch::MemoryFormat::Contiguous, torch::MemoryFormat::ChannelsLast}) {
      INFO("training " << training << ", channels_last " << (format == torch::MemoryFormat::ChannelsLast));
      auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
      const auto x0 = (torch::randn({4, 5, 7, 3}, gen) * 2 + 0.3).contiguous(format);
      const auto up = torch::randn({4, 5, 7, 3}, gen);
      Bn bn(5);

      auto xa = x0.clone().requires_grad_(true);
      auto rma = bn.running_mean.clone(), rva = bn.running_var.clone();
      auto ya = plain(xa, bn, rma, rva, training);
      auto [gxa, gwa, gba] = [&] {
        auto g = torch::autograd::grad({(ya * up).sum()}, {xa, bn.weight, bn.bias});
        return std::tuple{g[0], g[1], g[2]};
      }();

      auto xb = x0.clone().requires_grad_(true);
      auto rmb = bn.running_mean.clone(), rvb = bn.running_var.clone();
      auto [yb, mean, invstd] = kernels::bn_relu(xb, bn.weight, bn.bias, rmb, rvb, training, 0.1, 1e-5);
      auto g = torch::autograd::grad({(yb * up).sum()}, {xb, bn.weight, bn.bias});

      CHECK(yb.is_contiguous(format));
      CHECK(torch::allclose(ya, yb, 1e-5, 1e-5));
      CHECK(torch::allclose(gxa, g[0], 1e-4, 1e-5));
      CHECK(torch::allclose(gwa, g[1], 1e-4, 1e-4));
      CHECK(torch::allclose(gba, g[2], 1e-4, 1e-4));
      CHECK(torch::allclose(rma, rmb, 1e-6, 1e-6));  // unchanged in eval, moved by the same rule in training
      CHECK(torch::allclose(rva, rvb, 1e-6, 1e-6));
      if (training) CHECK_FALSE(torch::equal(rmb, bn.running_mean));
      CHECK(mean.scalar_type() == torch::kFloat32);
      CHECK(invstd.sizes() == torch::IntArrayRef{5});
    }
  }
}

TEST_CASE("bn_relu: analytic gradients match finite differences in double", "[kernels]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto o = torch::TensorOptions().dtype(torch::kFloat64);
  for (const bool training : {true, false}) {
    INFO("training " << training);
    auto x = torch::randn({3, 2, 2, 3}, gen).to(torch::kFloat64).requires_grad_(true);
    auto w = (torch::rand({2}, gen) + 0.5).to(torch::kFloat64).requires_grad_(true);
    auto b = (torch::randn({2}, gen) * 0.1).to(torch::kFloat64).requires_grad_(true);
    const auto rm0 = torch::randn({2}, gen).to(torch::kFloat64) * 0.1;
    const auto rv0 = torch::ones({2}, o);
    const auto up = torch::randn({3, 2, 2, 3}, gen).to(torch::kFloat64);
    auto f = [&](const torch::Tensor& xx, const torch::Tensor& ww, const torch::Tensor& bb) {
      auto rm = rm0.clone(), rv = rv0.clone();
      return (std::get<0>(kernels::bn_relu(xx, ww, bb, rm, rv, training, 0.1, 1e-5)) * up).sum();
    };
    const auto grads = torch::autograd::grad({f(x, w, b)}, {x, w, b});
    const double h = 1e-6;
    int checked = 0;
    for (int which = 0; which < 3; ++which) {
      auto base = (which == 0 ? x : which == 1 ? w : b).detach();
      auto flat = base.flatten();
      for (int64_t i = 0; i < flat.numel(); ++i) {
        auto plus = flat.clone(), minus = flat.clone();
        plus[i] += h;
        minus[i] -= h;
        auto at = [&](const torch::Tensor& v) {
          const auto t = v.view(base.sizes());
          torch::NoGradGuard no_grad;
          return f(which == 0 ? t : x.detach(), which == 1 ? t : w.detach(), which == 2 ? t : b.detach()).item<double>();
        };
        const double numeric = (at(plus) - at(minus)) / (2 * h);
        const double analytic = grads[which].flatten()[i].item<double>();
        INFO("input " << which << " element " << i);
        CHECK(analytic == Approx(numeric).margin(1e-7).epsilon(1e-6));
        ++checked;
      }
    }
    CHECK(checked == 36 + 2 + 2);
  }
}

TEST_CASE("conv_bn_relu: conv2d + BatchNorm2d + ReLU, float32 and bf16, both memory formats", "[kernels]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const auto format : {torch::MemoryFormat::Contiguous, torch::MemoryFormat::ChannelsLast}) {
      INFO(dtype << ", channels_last " << (format == torch::MemoryFormat::ChannelsLast));
      const auto x0 = torch::randn({2, 3, 9, 9}, gen).to(dtype).contiguous(format);
      auto cw = (torch::randn({6, 3, 3, 3}, gen) * 0.3).to(dtype).contiguous(format).requires_grad_(true);
      Bn bn(6);
      auto rma = bn.running_mean.clone(), rva = bn.running_var.clone();
      auto xa = x0.clone().requires_grad_(true);
      auto ya = plain(torch::conv2d(xa, cw, {}, 2, 1).to(torch::kFloat32), bn, rma, rva, true).to(dtype);
      auto ga = torch::autograd::grad({ya.to(torch::kFloat32).sum()}, {xa, cw, bn.weight});

      auto rmb = bn.running_mean.clone(), rvb = bn.running_var.clone();
      auto xb = x0.clone().requires_grad_(true);
      auto yb = kernels::conv_bn_relu(xb, cw, bn.weight, bn.bias, rmb, rvb, true, 0.1, 1e-5, {2, 2}, {1, 1}, {1, 1}, 1);
      auto gb = torch::autograd::grad({yb.to(torch::kFloat32).sum()}, {xb, cw, bn.weight});
      const double tol = dtype == torch::kFloat32 ? 1e-4 : 3e-2;
      CHECK(yb.scalar_type() == dtype);
      CHECK(yb.sizes() == torch::IntArrayRef{2, 6, 5, 5});
      CHECK(torch::allclose(ya.to(torch::kFloat32), yb.to(torch::kFloat32), tol, tol));
      for (size_t i = 0; i < ga.size(); ++i) {
        INFO("gradient " << i);
        CHECK(torch::allclose(ga[i].to(torch::kFloat32), gb[i].to(torch::kFloat32), tol, tol * 10));
      }
      CHECK(torch::allclose(rma, rmb, 1e-5, 1e-5));
      CHECK(torch::allclose(rva, rvb, 1e-5, 1e-5));
    }
  }
}

TEST_CASE("bn_relu: bad inputs are refused saying what was received", "[kernels]") {
  Bn bn(3);
  auto rm = bn.running_mean.clone(), rv = bn.running_var.clone();
  CHECK_THROWS_WITH(kernels::bn_relu(torch::randn({2, 4, 3, 3}), bn.weight, bn.bias, rm, rv, true, 0.1, 1e-5),
                    Catch::Contains("expected weight of shape (4)") && Catch::Contains("[2, 4, 3, 3]"));
  CHECK_THROWS_WITH(kernels::bn_relu(torch::randn({2, 3, 3}), bn.weight, bn.bias, rm, rv, true, 0.1, 1e-5),
                    Catch::Contains("expected input of shape (N, C, H, W)"));
  CHECK_THROWS_WITH(kernels::bn_relu(torch::randn({1, 3, 1, 1}), bn.weight, bn.bias, rm, rv, true, 0.1, 1e-5),
                    Catch::Contains("more than one value per channel"));
}
