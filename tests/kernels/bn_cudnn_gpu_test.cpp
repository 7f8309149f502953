// cuDNN's fused BatchNorm-activation (kernels/bn_cudnn.h) against the ATen reference on CUDA:
// fp16 and bf16 channels_last, with and without the residual, output, running and saved
// statistics, every gradient; and conv_bn_relu routed to it in training (and not in eval) while
// the CUDA path is cuDNN's. Label `gpu`: without a CUDA device each case prints
// "SKIP: no CUDA device". Where this cuDNN refuses bf16, the case says so and checks fp16 only.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <cstdio>

#include "support/gpu.h"

#include "kernels/bn_cudnn.h"
#include "kernels/bn_path.h"
#include "kernels/ops.h"
#include "kernels/reference.h"

using namespace dlrun;
using dlrun::testing::no_cuda;

namespace {

double worst(const at::Tensor& got, const at::Tensor& want, double tol) {
  const auto g = got.to(at::kCPU, at::kDouble), w = want.to(at::kCPU, at::kDouble);
  return ((g - w).abs() / (tol + tol * w.abs())).max().item<double>();
}

}  // namespace

TEST_CASE("cuDNN's fused BatchNorm-activation equals the reference on CUDA", "[gpu][kernels]") {
  if (no_cuda()) return;
  const auto cuda = torch::kCUDA;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(40);
  for (const auto dtype : {torch::kFloat16, torch::kBFloat16}) {
    const double tol = dtype == torch::kFloat16 ? 5e-3 : 3e-2;
    for (const std::vector<int64_t> shape : {std::vector<int64_t>{8, 64, 14, 14}, std::vector<int64_t>{3, 12, 7, 5}}) {
      const auto cl = at::MemoryFormat::ChannelsLast;
      const auto x = (at::randn(shape, gen) * 2 + 0.3).to(cuda, dtype).contiguous(cl);
      const auto res = at::randn(shape, gen).to(cuda, dtype).contiguous(cl);
      const auto dy = at::randn(shape, gen).to(cuda, dtype).contiguous(cl);
      const int64_t c = shape[1];
      const auto w = (at::rand({c}, gen) + 0.5).to(cuda), b = (at::randn({c}, gen) * 0.2).to(cuda);
      for (const bool add : {false, true}) {
        auto rm = at::zeros({c}, w.options()), rv = at::ones({c}, w.options());
        auto rm_r = rm.clone(), rv_r = rv.clone();
        const std::optional<at::Tensor> z = add ? std::optional<at::Tensor>(res) : std::nullopt;
        std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> got;
        try {
          got = kernels::bn_act_cudnn(x, z, w, b, rm, rv, 0.1, 1e-5);
        } catch (const std::exception& e) {
          if (dtype == torch::kBFloat16) {
            std::printf("cuDNN refuses bf16 here: %s\n", std::string(e.what()).substr(0, 200).c_str());
            break;
          }
          throw;
        }
        auto& [out, mean, invstd, reserve] = got;
        const auto ref = kernels::reference::bn_add_relu(x, add ? res : at::Tensor(), w, b, rm_r, rv_r, true, 0.1, 1e-5);
        INFO("dtype " << dtype << " shape " << c << " add " << add);
        CHECK(out.is_contiguous(cl));
        CHECK(worst(out, std::get<0>(ref), tol) <= 1);
        CHECK(worst(rm, rm_r, tol) <= 1);
        CHECK(worst(rv, rv_r, tol) <= 1);
        CHECK(worst(mean, std::get<1>(ref), tol) <= 1);
        CHECK(worst(invstd, std::get<2>(ref), tol) <= 1);
        const auto want = kernels::reference::bn_add_relu_backward(dy, x, out, w, std::get<1>(ref), std::get<2>(ref), true);
        auto [dx, dz, dw, db] = kernels::bn_act_cudnn_backward(dy, x, out, w, b, mean, invstd, reserve, add, 1e-5);
        const double sw = std::max(1.0, std::get<2>(want).abs().max().item<double>());
        const double sb = std::max(1.0, std::get<3>(want).abs().max().item<double>());
        CHECK(worst(dx, std::get<0>(want), tol) <= 1);
        CHECK(worst(dw, std::get<2>(want), tol * sw) <= 1);
        CHECK(worst(db, std::get<3>(want), tol * sb) <= 1);
        if (add) CHECK(worst(dz, std::get<1>(want), tol) <= 1);
      }
    }
  }
}

TEST_CASE("conv_bn_relu goes to cuDNN's fused operators in training while the CUDA path is cuDNN's", "[gpu][kernels]") {
  if (no_cuda()) return;
  const auto before = kernels::cuda_bn_path();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(41);
  const auto cl = at::MemoryFormat::ChannelsLast;
  const auto y = at::randn({4, 32, 8, 8}, gen).to(torch::kCUDA, torch::kFloat16).contiguous(cl);
  const auto w = torch::ones({32}, torch::TensorOptions().device(torch::kCUDA)), b = torch::zeros_like(w);
  const auto rm = torch::zeros_like(w), rv = torch::ones_like(w);
  kernels::set_cuda_bn_path(kernels::BnPath::kCudnn);
  CHECK(kernels::takes_cudnn_bn(y, w, b, rm, rv, true, 1e-5));
  CHECK_FALSE(kernels::takes_cudnn_bn(y, w, b, rm, rv, /*training=*/false, 1e-5));
  CHECK_FALSE(kernels::takes_cudnn_bn(y.contiguous(), w, b, rm, rv, true, 1e-5));
  CHECK_FALSE(kernels::takes_cudnn_bn(y.narrow(0, 0, 1).narrow(2, 0, 1).narrow(3, 0, 1).contiguous(at::MemoryFormat::ChannelsLast),
                                      w, b, rm, rv, true, 1e-5));  // one value per channel: no unbiased variance
  kernels::set_cuda_bn_path(kernels::BnPath::kDlrun);
  CHECK_FALSE(kernels::takes_cudnn_bn(y, w, b, rm, rv, true, 1e-5));
  // Through autograd: the gradients of the routed op equal those of dlrun's kernels.
  auto grads = [&](kernels::BnPath p) {
    kernels::set_cuda_bn_path(p);
    auto x = y.clone().requires_grad_(true);
    auto wt = w.clone().requires_grad_(true), bs = torch::zeros_like(w).requires_grad_(true);
    auto m = torch::zeros_like(w), v = torch::ones_like(w);
    const auto out = kernels::takes_cudnn_bn(x, wt, bs, m, v, true, 1e-5)
                         ? kernels::bn_act_cudnn_autograd(x, at::Tensor(), wt, bs, m, v, 0.1, 1e-5)
                         : std::get<0>(kernels::bn_relu(x, wt, bs, m, v, true, 0.1, 1e-5));
    out.to(torch::kFloat).square().sum().backward();
    return std::vector<at::Tensor>{out, x.grad(), wt.grad(), bs.grad()};
  };
  const auto via_cudnn = grads(kernels::BnPath::kCudnn), via_dlrun = grads(kernels::BnPath::kDlrun);
  for (size_t i = 0; i < via_cudnn.size(); ++i)
    CHECK(worst(via_cudnn[i], via_dlrun[i], 1e-2 * std::max(1.0, via_dlrun[i].abs().max().item<double>())) <= 1);
  kernels::set_cuda_bn_path(before);
}
