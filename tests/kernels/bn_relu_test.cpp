// dlrun::bn_relu, bn_add_relu and conv_bn_relu through the dispatcher, on the CPU (dlrun's CPU
// kernels): the plain PyTorch sequence's outputs, gradients and running statistics; finite
// differences in double; the ATen reference on odd shapes, both formats, float32 / float64 /
// bf16; the same bits for any thread count; statistics far from zero; input errors.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include "kernels/ops.h"
#include "kernels/reference.h"

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
  CHECK_THROWS_WITH(kernels::bn_relu(torch::ones({2, 3, 3, 3}, torch::kLong), bn.weight, bn.bias, rm, rv, true, 0.1,
                                     1e-5),
                    Catch::Contains("expected a floating input, got Long"));
  CHECK_THROWS_WITH(kernels::bn_relu(torch::randn({2, 3, 3, 3}), bn.weight.view({3, 1}), bn.bias, rm, rv, true, 0.1,
                                     1e-5),
                    Catch::Contains("expected weight of shape (3)") && Catch::Contains("got [3, 1]"));
  auto meta_rv = torch::ones({3}, torch::TensorOptions().device(torch::kMeta));
  CHECK_THROWS_WITH(kernels::bn_relu(torch::randn({2, 3, 3, 3}), bn.weight, bn.bias, rm, meta_rv, true, 0.1, 1e-5),
                    Catch::Contains("running_var is on meta, input on cpu"));
  CHECK_THROWS_WITH(kernels::bn_add_relu(torch::randn({2, 3, 3, 3}), torch::randn({2, 3, 3, 2}), bn.weight, bn.bias,
                                         rm, rv, true, 0.1, 1e-5),
                    Catch::Contains("dlrun::bn_add_relu: expected residual of the input's shape [2, 3, 3, 3], got "
                                    "[2, 3, 3, 2]"));
  // The running statistics were not touched by any refused call.
  CHECK(torch::equal(rm, bn.running_mean));
  CHECK(torch::equal(rv, bn.running_var));
}

TEST_CASE("conv_bias_relu: bad inputs are refused saying what was received", "[kernels]") {
  const auto x = torch::randn({2, 3, 5, 5}), w = torch::randn({4, 3, 3, 3}), b = torch::randn({4});
  const std::vector<int64_t> one = {1, 1}, zero = {0, 0};
  CHECK(kernels::conv_bias_relu(x, w, b, one, zero, one, 1).sizes() == c10::IntArrayRef{2, 4, 3, 3});
  CHECK_THROWS_WITH(kernels::conv_bias_relu(x, w, torch::randn({3}), one, zero, one, 1),
                    Catch::Contains("bias must be (4), got [3]"));
  CHECK_THROWS_WITH(kernels::conv_bias_relu(x[0], w, b, one, zero, one, 1),
                    Catch::Contains("input must be (N, C, H, W), got [3, 5, 5]"));
  CHECK_THROWS_WITH(kernels::conv_bias_relu(x, w[0], b, one, zero, one, 1),
                    Catch::Contains("weight must be (out, in/groups, kh, kw), got [3, 3, 3]"));
  CHECK_THROWS_WITH(kernels::conv_bias_relu(x.to(torch::kInt), w, b, one, zero, one, 1),
                    Catch::Contains("input must be floating point, got Int"));
}

TEST_CASE("bn_add_relu: outputs, gradients and running statistics of BatchNorm2d + add + ReLU", "[kernels]") {
  for (const bool training : {true, false}) {
    for (const auto format : {torch::MemoryFormat::Contiguous, torch::MemoryFormat::ChannelsLast}) {
      INFO("training " << training << ", channels_last " << (format == torch::MemoryFormat::ChannelsLast));
      auto gen = at::make_generator<at::CPUGeneratorImpl>(13);
      const auto x0 = (torch::randn({4, 5, 7, 3}, gen) * 2 + 0.3).contiguous(format);
      const auto r0 = torch::randn({4, 5, 7, 3}, gen).contiguous(format);
      const auto up = torch::randn({4, 5, 7, 3}, gen);
      Bn bn(5);

      auto xa = x0.clone().requires_grad_(true), ra = r0.clone().requires_grad_(true);
      auto rma = bn.running_mean.clone(), rva = bn.running_var.clone();
      auto ya = torch::relu(torch::batch_norm(xa, bn.weight, bn.bias, rma, rva, training, 0.1, 1e-5, false) + ra);
      auto ga = torch::autograd::grad({(ya * up).sum()}, {xa, ra, bn.weight, bn.bias});

      auto xb = x0.clone().requires_grad_(true), rb = r0.clone().requires_grad_(true);
      auto rmb = bn.running_mean.clone(), rvb = bn.running_var.clone();
      auto yb = std::get<0>(kernels::bn_add_relu(xb, rb, bn.weight, bn.bias, rmb, rvb, training, 0.1, 1e-5));
      auto gb = torch::autograd::grad({(yb * up).sum()}, {xb, rb, bn.weight, bn.bias});

      CHECK(yb.is_contiguous(format));
      CHECK(torch::allclose(ya, yb, 1e-5, 1e-5));
      const char* names[] = {"input", "residual", "weight", "bias"};
      for (size_t i = 0; i < 4; ++i) {
        INFO("gradient of " << names[i]);
        CHECK(torch::allclose(ga[i], gb[i], 1e-4, 1e-4));
      }
      CHECK(torch::allclose(rma, rmb, 1e-6, 1e-6));
      CHECK(torch::allclose(rva, rvb, 1e-6, 1e-6));
    }
  }
}

TEST_CASE("bn_add_relu: analytic gradients match finite differences in double", "[kernels]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(15);
  for (const bool training : {true, false}) {
    INFO("training " << training);
    const auto d = torch::kFloat64;
    std::vector<torch::Tensor> in = {torch::randn({3, 2, 2, 3}, gen).to(d), torch::randn({3, 2, 2, 3}, gen).to(d),
                                     (torch::rand({2}, gen) + 0.5).to(d), (torch::randn({2}, gen) * 0.1).to(d)};
    const auto up = torch::randn({3, 2, 2, 3}, gen).to(d);
    const auto rm0 = torch::randn({2}, gen).to(d) * 0.1, rv0 = torch::ones({2}, torch::TensorOptions().dtype(d));
    auto f = [&](const std::vector<torch::Tensor>& v) {
      auto rm = rm0.clone(), rv = rv0.clone();
      return (std::get<0>(kernels::bn_add_relu(v[0], v[1], v[2], v[3], rm, rv, training, 0.1, 1e-5)) * up).sum();
    };
    std::vector<torch::Tensor> leaves;
    for (const auto& t : in) leaves.push_back(t.clone().requires_grad_(true));
    const auto grads = torch::autograd::grad({f(leaves)}, leaves);
    const double h = 1e-6;
    for (size_t which = 0; which < in.size(); ++which) {
      auto flat = in[which].flatten();
      for (int64_t i = 0; i < flat.numel(); ++i) {
        auto at = [&](double delta) {
          auto v = in;
          auto moved = flat.clone();
          moved[i] += delta;
          v[which] = moved.view(in[which].sizes());
          torch::NoGradGuard no_grad;
          return f(v).item<double>();
        };
        INFO("input " << which << " element " << i);
        const double numeric = (at(h) - at(-h)) / (2 * h);
        CHECK(grads[which].flatten()[i].item<double>() == Approx(numeric).margin(1e-7).epsilon(1e-6));
      }
    }
  }
}

namespace {

// One call of the operator (bn_relu, or bn_add_relu when `residual` is given) and its backward
// through the dispatcher (the CPU kernels), or through the ATen reference. The backward starts
// from `backward_from`'s forward (output, mean, invstd) when given, so that two implementations'
// gradients are compared on the same mask and statistics.
struct Result {
  std::vector<torch::Tensor> t;  // out, mean, invstd, running_mean, running_var, dx, [dres,] dweight, dbias
};

Result call(const torch::Tensor& x, const torch::Tensor& residual, const Bn& bn, const torch::Tensor& dy, bool training,
            bool use_reference, const Result* backward_from = nullptr) {
  auto rm = bn.running_mean.clone(), rv = bn.running_var.clone();
  const auto w = bn.weight.detach(), b = bn.bias.detach();
  Result r;
  torch::NoGradGuard no_grad;
  if (use_reference) {
    auto [out, mean, invstd] = kernels::reference::bn_add_relu(x, residual, w, b, rm, rv, training, 0.1, 1e-5);
    auto [dx, g, dw, db] = kernels::reference::bn_add_relu_backward(dy, x, out, w, mean, invstd, training);
    r.t = {out, mean, invstd, rm, rv, dx, dw, db};
    if (residual.defined()) r.t.push_back(g);
    return r;
  }
  auto [out, mean, invstd] = residual.defined()
                                 ? kernels::bn_add_relu(x, residual, w, b, rm, rv, training, 0.1, 1e-5)
                                 : kernels::bn_relu(x, w, b, rm, rv, training, 0.1, 1e-5);
  const auto& f = backward_from != nullptr ? backward_from->t : std::vector<torch::Tensor>{out, mean, invstd};
  if (residual.defined()) {
    auto [dx, g, dw, db] = kernels::bn_add_relu_backward(dy, x, f[0], w, f[1], f[2], training);
    r.t = {out, mean, invstd, rm, rv, dx, dw, db, g};
  } else {
    auto [dx, dw, db] = kernels::bn_relu_backward(dy, x, f[0], w, f[1], f[2], training);
    r.t = {out, mean, invstd, rm, rv, dx, dw, db};
  }
  return r;
}

const char* kResultNames[] = {"output", "mean", "invstd", "running_mean", "running_var",
                              "grad input", "grad weight", "grad bias", "grad residual"};

}  // namespace

TEST_CASE("CPU kernels equal the ATen reference: shapes, formats, dtypes, with and without the residual",
          "[kernels]") {
  const std::vector<std::vector<int64_t>> shapes = {{1, 3, 5, 7}, {2, 16, 1, 1}, {7, 33, 9, 13}, {3, 5, 65, 129},
                                                    {16, 8, 28, 28}};
  auto gen = at::make_generator<at::CPUGeneratorImpl>(23);
  for (const auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kHalf}) {
    const double tol = dtype == torch::kFloat64   ? 1e-10
                       : dtype == torch::kFloat32 ? 1e-4
                       : dtype == torch::kHalf    ? 1e-2  // 11 significant bits
                                                  : 2e-2;  // bf16: 8
    for (const auto format : {torch::MemoryFormat::Contiguous, torch::MemoryFormat::ChannelsLast}) {
      for (const auto& shape : shapes) {
        for (const bool training : {true, false}) {
          for (const bool add : {false, true}) {
            INFO(dtype << (format == torch::MemoryFormat::ChannelsLast ? " NHWC" : " NCHW") << " shape "
                       << torch::IntArrayRef(shape) << " training " << training << " residual " << add);
            Bn bn(shape[1]);
            const auto x = (torch::randn(shape, gen) * 3 + 0.5).to(dtype).contiguous(format);
            const auto res = add ? torch::randn(shape, gen).to(dtype).contiguous(format) : torch::Tensor();
            const auto dy = torch::randn(shape, gen).to(dtype).contiguous(format);
            const auto want = call(x, res, bn, dy, training, true);
            const auto got = call(x, res, bn, dy, training, false, &want);
            REQUIRE(got.t.size() == want.t.size());
            CHECK(got.t[0].is_contiguous(format));
            CHECK(got.t[5].is_contiguous(format));
            for (size_t i = 0; i < got.t.size(); ++i) {
              INFO(kResultNames[i]);
              CHECK(got.t[i].scalar_type() == want.t[i].scalar_type());
              const auto a = got.t[i].to(torch::kFloat64), b = want.t[i].to(torch::kFloat64);
              CHECK_FALSE(a.isnan().any().item<bool>());
              // Sums over a channel (grad weight, grad bias) scale with its count.
              const double scale = i == 6 || i == 7 ? std::max(1.0, b.abs().max().item<double>()) : 1.0;
              // The running statistics are float32 buffers, whatever the input's dtype.
              const double t = i == 3 || i == 4 ? std::max(tol, 1e-6) : tol;
              CHECK(torch::allclose(a, b, t, t * scale));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("CPU kernels: the same bits for any thread count", "[kernels]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(29);
  const int threads = at::get_num_threads();
  for (const auto format : {torch::MemoryFormat::Contiguous, torch::MemoryFormat::ChannelsLast}) {
    Bn bn(24);
    const auto x = torch::randn({32, 24, 17, 17}, gen).contiguous(format);
    const auto res = torch::randn({32, 24, 17, 17}, gen).contiguous(format);
    const auto dy = torch::randn({32, 24, 17, 17}, gen).contiguous(format);
    at::set_num_threads(1);
    const auto one = call(x, res, bn, dy, true, false);
    at::set_num_threads(3);
    const auto three = call(x, res, bn, dy, true, false);
    at::set_num_threads(threads);
    for (size_t i = 0; i < one.t.size(); ++i) {
      INFO(kResultNames[i] << (format == torch::MemoryFormat::ChannelsLast ? " NHWC" : " NCHW"));
      CHECK(torch::equal(one.t[i], three.t[i]));
    }
  }
}

TEST_CASE("CPU kernels: batch statistics stay exact far from zero and over many values", "[kernels]") {
  // float32 values around 3000 with unit spread, 460k per channel: a plain float sum of squares
  // would lose the variance entirely.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
  for (const auto format : {torch::MemoryFormat::Contiguous, torch::MemoryFormat::ChannelsLast}) {
    const auto x = (torch::randn({9, 3, 256, 200}, gen) + 3000).contiguous(format);
    Bn bn(3);
    auto rm = bn.running_mean.clone(), rv = bn.running_var.clone();
    torch::NoGradGuard no_grad;
    auto [out, mean, invstd] = kernels::bn_relu(x, bn.weight, bn.bias, rm, rv, true, 0.1, 1e-5);
    const auto x64 = x.to(torch::kFloat64);
    const auto want_mean = x64.mean({0, 2, 3});
    const auto want_var = x64.var({0, 2, 3}, /*unbiased=*/false);
    INFO((format == torch::MemoryFormat::ChannelsLast ? "NHWC" : "NCHW"));
    CHECK(torch::allclose(mean.to(torch::kFloat64), want_mean, 0, 3e-4));  // float32 spacing at 3000: 2.4e-4
    CHECK(torch::allclose((1 / invstd.to(torch::kFloat64).square()) - 1e-5, want_var, 1e-4, 0));
  }
}

TEST_CASE("CPU kernels: inputs in neither dense format go to the reference and agree", "[kernels]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(37);
  const auto base = torch::randn({6, 4, 9, 10}, gen);
  const auto x = base.slice(3, 0, 10, 2);  // strided: neither NCHW- nor channels_last-dense
  REQUIRE_FALSE(x.is_contiguous());
  REQUIRE_FALSE(x.is_contiguous(torch::MemoryFormat::ChannelsLast));
  Bn bn(4);
  const auto dy = torch::randn(x.sizes(), gen);
  const auto got = call(x, torch::Tensor(), bn, dy, true, false);
  const auto want = call(x.contiguous(), torch::Tensor(), bn, dy, true, false);
  for (size_t i = 0; i < got.t.size(); ++i) {
    INFO(kResultNames[i]);
    CHECK(torch::allclose(got.t[i], want.t[i], 1e-5, 1e-5));
  }
}
