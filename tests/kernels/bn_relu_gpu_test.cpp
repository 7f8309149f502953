// The CUDA kernels of dlrun::bn_relu and dlrun::bn_add_relu against the same ops on the CPU
// (whose kernels tests/kernels/bn_relu_test.cpp holds to the ATen reference): random and odd
// shapes, both memory formats, fp32 / fp16 / bf16 with stated tolerances, running statistics,
// forward and backward (the residual's gradient included; both backwards from the CPU's forward).
// Also a tensor larger than one sweep of the grid, and the folded evaluation's cuDNN call. Outputs land in memory poisoned with NaN beforehand, so an
// element the kernels never write shows up. Label `gpu`: without a CUDA device each case
// prints "SKIP: no CUDA device".
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <cstdio>

#include "support/gpu.h"

#include "kernels/ops.h"

using namespace dlrun;
using dlrun::testing::no_cuda;

namespace {

// Fill the caching allocator's free blocks with NaN: allocate, poison and free a large block
// (the op's outputs are then likely carved from it).
void poison_cuda_memory(int64_t bytes) {
  auto t = torch::empty({bytes / 4}, torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA));
  t.fill_(std::numeric_limits<float>::quiet_NaN());
  torch::cuda::synchronize();
}

}  // namespace

TEST_CASE("bn_relu and bn_add_relu on CUDA equal the CPU: shapes, formats, dtypes, statistics, gradients",
          "[gpu][kernels][sanitize]") {
  if (no_cuda()) return;
  // channels_last takes the vectorised kernels where C is a multiple of 8 (fp16, bf16) or 4
  // (float32), the scalar ones otherwise: 3, 33, 5 (both scalar), 12 (float32 vectorised, fp16 /
  // bf16 scalar), 16, 24, 64, 72, 256 and 520 (vectorised: blocks of 2 to 32 vector columns, 520
  // fp16 in three uneven tiles of 22; row counts that leave a tail in every chunk and pass).
  const std::vector<std::vector<int64_t>> shapes = {{1, 3, 5, 7},   {2, 16, 1, 1},    {7, 33, 9, 13}, {32, 64, 14, 14},
                                                    {3, 5, 65, 129}, {3, 24, 7, 5},    {2, 12, 11, 3}, {16, 72, 17, 17},
                                                    {4, 256, 9, 9},  {2, 520, 5, 7}};
  auto gen = at::make_generator<at::CPUGeneratorImpl>(21);
  for (const auto dtype : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
    const double tol = dtype == torch::kFloat32 ? 1e-4 : dtype == torch::kFloat16 ? 5e-3 : 3e-2;
    for (const auto format : {torch::MemoryFormat::Contiguous, torch::MemoryFormat::ChannelsLast}) {
      for (const auto& shape : shapes) {
        for (const bool training : {true, false}) {
          for (const bool add : {false, true}) {
            INFO(dtype << " " << (format == torch::MemoryFormat::ChannelsLast ? "NHWC" : "NCHW") << " shape "
                       << torch::IntArrayRef(shape) << " training " << training << " residual " << add);
            const int64_t c = shape[1];
            const auto x_cpu = (torch::randn(shape, gen) * 3 + 0.5).to(dtype).contiguous(format);
            const auto up_cpu = torch::randn(shape, gen).to(dtype);
            const auto w_cpu = torch::rand({c}, gen) + 0.5, b_cpu = torch::randn({c}, gen) * 0.3;
            const auto rm0 = torch::randn({c}, gen), rv0 = torch::rand({c}, gen) + 0.5;
            const auto res_cpu = (torch::randn(shape, gen) * 0.5).to(dtype).contiguous(format);

            // Forward on each device; backward on each device from the *CPU's* forward (its output,
            // whose sign is the mask, and its statistics), so that a pre-activation within rounding
            // of zero, positive on one device and not on the other, cannot make the gradients
            // differ for a reason that is no bug.
            struct Fwd {
              torch::Tensor y, mean, invstd, rm, rv;
            };
            auto forward = [&](const torch::Device& d) {
              torch::NoGradGuard no_grad;
              // Copies on every device: rm0.to(kCPU) would be rm0 itself, and the CPU's update of the
              // running statistics would then be the CUDA run's starting point.
              auto rm = rm0.to(d, /*non_blocking=*/false, /*copy=*/true), rv = rv0.to(d, false, true);
              if (d.is_cuda()) poison_cuda_memory(x_cpu.numel() * 16 + (1 << 20));
              auto r = add ? kernels::bn_add_relu(x_cpu.to(d), res_cpu.to(d), w_cpu.to(d), b_cpu.to(d), rm, rv,
                                                  training, 0.1, 1e-5)
                           : kernels::bn_relu(x_cpu.to(d), w_cpu.to(d), b_cpu.to(d), rm, rv, training, 0.1, 1e-5);
              return Fwd{std::get<0>(r), std::get<1>(r), std::get<2>(r), rm, rv};
            };
            const Fwd fc = forward(torch::kCPU);
            const Fwd fg = forward(torch::Device(torch::kCUDA, 0));
            auto backward = [&](const torch::Device& d) {
              torch::NoGradGuard no_grad;
              if (d.is_cuda()) poison_cuda_memory(x_cpu.numel() * 16 + (1 << 20));
              const auto args = std::make_tuple(up_cpu.to(d), x_cpu.to(d), fc.y.to(d), w_cpu.to(d), fc.mean.to(d),
                                                fc.invstd.to(d));
              std::vector<torch::Tensor> g;
              if (add) {
                auto [dx, dres, dw, db] = std::apply([&](auto&&... t) { return kernels::bn_add_relu_backward(t..., training); }, args);
                g = {dx, dw, db, dres};
              } else {
                auto [dx, dw, db] = std::apply([&](auto&&... t) { return kernels::bn_relu_backward(t..., training); }, args);
                g = {dx, dw, db, torch::zeros({1}, torch::TensorOptions().device(d))};
              }
              return g;
            };
            const auto gc = backward(torch::kCPU);
            const auto gg = backward(torch::Device(torch::kCUDA, 0));
            auto f32 = [](const torch::Tensor& t) { return t.cpu().to(torch::kFloat32); };
            const std::vector<torch::Tensor> ref = {f32(fc.y), f32(gc[0]), f32(gc[1]), f32(gc[2]), f32(fc.rm),
                                                    f32(fc.rv), f32(gc[3]), f32(fc.mean), f32(fc.invstd)};
            const std::vector<torch::Tensor> got = {f32(fg.y), f32(gg[0]), f32(gg[1]), f32(gg[2]), f32(fg.rm),
                                                    f32(fg.rv), f32(gg[3]), f32(fg.mean), f32(fg.invstd)};
            const char* names[] = {"output", "grad input", "grad weight", "grad bias", "running_mean", "running_var",
                                   "grad residual", "save_mean", "save_invstd"};
            for (size_t i = 0; i < ref.size(); ++i) {
              INFO(names[i]);
              CHECK_FALSE(got[i].isnan().any().item<bool>());
              const double scale = i == 2 || i == 3 ? std::max(1.0, ref[i].abs().max().item<double>()) : 1.0;
              CHECK(torch::allclose(got[i], ref[i], tol, tol * scale));
            }
            CHECK(fg.y.is_contiguous(format));  // the output keeps the input's memory format
            CHECK(gg[0].is_contiguous(format));
          }
        }
      }
    }
  }
}

TEST_CASE("bn_relu on CUDA: more elements than one grid covers, both formats", "[gpu][kernels][large]") {
  if (no_cuda()) return;
  // 2 x 64 x 1100 x 1000 = 140.8 M values: more than the NCHW elementwise grid's 65535 * 8
  // blocks of 256 threads (134.2 M) take in one sweep, so the grid-stride loops must wrap.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(41);
  const std::vector<int64_t> shape = {2, 64, 1100, 1000};
  const auto x_cpu = (torch::randn(shape, gen) + 1).to(torch::kBFloat16);
  const auto w = torch::rand({64}, gen) + 0.5, b = torch::randn({64}, gen) * 0.2;
  for (const auto format : {torch::MemoryFormat::Contiguous, torch::MemoryFormat::ChannelsLast}) {
    INFO((format == torch::MemoryFormat::ChannelsLast ? "NHWC" : "NCHW"));
    const auto x = x_cpu.contiguous(format);
    auto rm = torch::zeros({64}), rv = torch::ones({64});
    auto [want, mean_want, invstd_want] = kernels::bn_relu(x, w, b, rm, rv, true, 0.1, 1e-5);
    const torch::Device d(torch::kCUDA, 0);
    auto rmg = torch::zeros({64}, d), rvg = torch::ones({64}, d);
    poison_cuda_memory(x.numel() * 8);
    torch::NoGradGuard no_grad;
    auto [got, mean_got, invstd_got] = kernels::bn_relu(x.to(d), w.to(d), b.to(d), rmg, rvg, true, 0.1, 1e-5);
    CHECK_FALSE(got.isnan().any().item<bool>());
    CHECK(torch::allclose(mean_got.cpu(), mean_want, 1e-4, 1e-4));
    CHECK(torch::allclose(invstd_got.cpu(), invstd_want, 1e-4, 1e-4));
    // Within two bf16 steps (2^-7 relative each): the two devices compute the statistics in
    // different orders, so a value near a rounding boundary may round to the neighbour.
    CHECK(torch::allclose(got.cpu().to(torch::kFloat32), want.to(torch::kFloat32), 2e-2, 2e-2));
  }
}

TEST_CASE("bn_relu on CUDA, channels_last: unaligned views take the scalar kernels; statistics far from zero",
          "[gpu][kernels]") {
  if (no_cuda()) return;
  const torch::Device d(torch::kCUDA, 0);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(47);
  SECTION("a view one element into its storage (not 16-byte aligned) agrees with the CPU") {
    const int64_t n = 3, c = 16, h = 5, w = 7, numel = n * c * h * w;
    // Channels_last-contiguous views whose data start one fp16 element (2 bytes) into their storage.
    auto unaligned = [&](const torch::Tensor& flat) {
      return flat.narrow(0, 1, numel).view({n, h, w, c}).permute({0, 3, 1, 2});
    };
    const auto x = unaligned((torch::randn({numel + 1}, gen) * 3 + 0.5).to(torch::kFloat16).to(d));
    const auto up = unaligned(torch::randn({numel + 1}, gen).to(torch::kFloat16).to(d));
    REQUIRE(x.is_contiguous(torch::MemoryFormat::ChannelsLast));
    REQUIRE(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 != 0);
    const auto wt = torch::rand({c}, gen) + 0.5, b = torch::randn({c}, gen) * 0.3;
    torch::NoGradGuard no_grad;
    auto rm = torch::zeros({c}), rv = torch::ones({c});
    auto rmg = torch::zeros({c}, d), rvg = torch::ones({c}, d);
    auto [want, mean_want, invstd_want] = kernels::bn_relu(x.cpu(), wt, b, rm, rv, true, 0.1, 1e-5);
    auto [got, mean_got, invstd_got] = kernels::bn_relu(x, wt.to(d), b.to(d), rmg, rvg, true, 0.1, 1e-5);
    CHECK(torch::allclose(got.cpu().to(torch::kFloat32), want.to(torch::kFloat32), 5e-3, 5e-3));
    CHECK(torch::allclose(mean_got.cpu(), mean_want, 1e-4, 1e-4));
    CHECK(torch::allclose(invstd_got.cpu(), invstd_want, 1e-4, 1e-4));
    CHECK(torch::allclose(rvg.cpu(), rv, 1e-4, 1e-4));
    auto [dx_want, dw_want, db_want] =
        kernels::bn_relu_backward(up.cpu(), x.cpu(), want, wt, mean_want, invstd_want, true);
    auto [dx_got, dw_got, db_got] =
        kernels::bn_relu_backward(up, x, want.to(d), wt.to(d), mean_want.to(d), invstd_want.to(d), true);
    CHECK(torch::allclose(dx_got.cpu().to(torch::kFloat32), dx_want.to(torch::kFloat32), 5e-3, 5e-3));
    CHECK(torch::allclose(dw_got.cpu(), dw_want, 5e-3, 5e-3 * std::max(1.0, dw_want.abs().max().item<double>())));
    CHECK(torch::allclose(db_got.cpu(), db_want, 5e-3, 5e-3 * std::max(1.0, db_want.abs().max().item<double>())));
  }
  SECTION("float32, mean 1000 and std 1: the vectorised statistics equal float64's") {
    // A plain float32 sum of squares would lose the variance to cancellation here (about 1e6
    // against 1); the kernels' sums are shifted by each channel's first value.
    const std::vector<int64_t> shape = {8, 16, 64, 64};
    const auto x = (torch::randn(shape, gen) + 1000).contiguous(torch::MemoryFormat::ChannelsLast);
    auto [var, mean] = torch::var_mean(x.to(torch::kFloat64), {0, 2, 3}, /*correction=*/0, /*keepdim=*/false);
    auto rmg = torch::zeros({16}, d), rvg = torch::ones({16}, d);
    torch::NoGradGuard no_grad;
    auto [out, mean_got, invstd_got] =
        kernels::bn_relu(x.to(d), torch::ones({16}, d), torch::zeros({16}, d), rmg, rvg, true, 0.1, 1e-5);
    CHECK(torch::allclose(mean_got.cpu().to(torch::kFloat64), mean, 1e-6, 1e-6));
    CHECK(torch::allclose(invstd_got.cpu().to(torch::kFloat64), (var + 1e-5).rsqrt(), 1e-4, 1e-4));
    const double n = 8.0 * 64 * 64;
    CHECK(torch::allclose(rvg.cpu().to(torch::kFloat64), 0.9 + 0.1 * var * (n / (n - 1)), 1e-4, 1e-4));
  }
}

TEST_CASE("conv_bias_relu on CUDA (cuDNN's fused conv-bias-activation) equals the CPU reference",
          "[gpu][kernels][sanitize]") {
  if (no_cuda()) return;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(43);
  struct Case {
    std::vector<int64_t> x, w;
    int64_t stride, pad;
  };
  const std::vector<Case> cases = {{{2, 3, 17, 19}, {8, 3, 3, 3}, 1, 1},
                                   {{4, 16, 14, 14}, {32, 16, 1, 1}, 2, 0},
                                   {{1, 64, 9, 9}, {64, 64, 3, 3}, 1, 1}};
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const double tol = dtype == torch::kFloat32 ? 1e-3 : 5e-2;  // TF32 convolutions on Hopper; bf16
    for (const auto format : {torch::MemoryFormat::Contiguous, torch::MemoryFormat::ChannelsLast}) {
      for (const auto& c : cases) {
        INFO(dtype << (format == torch::MemoryFormat::ChannelsLast ? " NHWC" : " NCHW") << " x "
                   << torch::IntArrayRef(c.x) << " w " << torch::IntArrayRef(c.w));
        const auto x = torch::randn(c.x, gen).contiguous(format);
        const auto w = (torch::randn(c.w, gen) * 0.2).contiguous(format);
        const auto b = torch::randn({c.w[0]}, gen) * 0.3;
        torch::NoGradGuard no_grad;
        const auto want = kernels::conv_bias_relu(x, w, b, {c.stride, c.stride}, {c.pad, c.pad}, {1, 1}, 1);
        const torch::Device d(torch::kCUDA, 0);
        poison_cuda_memory(want.numel() * 16 + (1 << 20));
        const auto got = kernels::conv_bias_relu(x.to(d).to(dtype), w.to(d).to(dtype), b.to(d), {c.stride, c.stride},
                                                 {c.pad, c.pad}, {1, 1}, 1);
        CHECK(got.scalar_type() == dtype);
        CHECK(got.sizes() == want.sizes());
        const auto g = got.cpu().to(torch::kFloat32);
        CHECK_FALSE(g.isnan().any().item<bool>());
        CHECK(torch::allclose(g, want, tol, tol * std::max(1.0, want.abs().max().item<double>())));
      }
    }
  }
}
