// The CUDA kernels of dlrun::bn_relu against the reference (the same op on the CPU): random
// and odd shapes, both memory formats, fp32 / fp16 / bf16 with stated tolerances, running
// statistics, forward and backward. Outputs land in memory poisoned with NaN beforehand, so an
// element the kernels never write shows up. Label `gpu`: without a CUDA device each case
// prints "SKIP: no CUDA device".
#include <catch2/catch.hpp>

#include <torch/torch.h>

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

TEST_CASE("bn_relu on CUDA equals the reference: shapes, formats, dtypes, statistics, gradients", "[gpu][kernels]") {
  if (no_cuda()) return;
  const std::vector<std::vector<int64_t>> shapes = {{1, 3, 5, 7}, {2, 16, 1, 1}, {7, 33, 9, 13}, {32, 64, 14, 14},
                                                    {3, 5, 65, 129}};
  auto gen = at::make_generator<at::CPUGeneratorImpl>(21);
  for (const auto dtype : {torch::kFloat32, torch::kFloat16, torch::kBFloat16}) {
    const double tol = dtype == torch::kFloat32 ? 1e-4 : dtype == torch::kFloat16 ? 5e-3 : 3e-2;
    for (const auto format : {torch::MemoryFormat::Contiguous, torch::MemoryFormat::ChannelsLast}) {
      for (const auto& shape : shapes) {
        for (const bool training : {true, false}) {
          INFO(dtype << " " << (format == torch::MemoryFormat::ChannelsLast ? "NHWC" : "NCHW") << " shape "
                     << torch::IntArrayRef(shape) << " training " << training);
          const int64_t c = shape[1];
          const auto x_cpu = (torch::randn(shape, gen) * 3 + 0.5).to(dtype).contiguous(format);
          const auto up_cpu = torch::randn(shape, gen).to(dtype);
          const auto w_cpu = torch::rand({c}, gen) + 0.5, b_cpu = torch::randn({c}, gen) * 0.3;
          const auto rm0 = torch::randn({c}, gen), rv0 = torch::rand({c}, gen) + 0.5;

          auto run = [&](const torch::Device& d) {
            auto x = x_cpu.to(d).requires_grad_(true);
            auto w = w_cpu.to(d).requires_grad_(true), b = b_cpu.to(d).requires_grad_(true);
            auto rm = rm0.to(d), rv = rv0.to(d);
            if (d.is_cuda()) poison_cuda_memory(x.numel() * 16 + (1 << 20));
            auto [y, mean, invstd] = kernels::bn_relu(x, w, b, rm, rv, training, 0.1, 1e-5);
            auto g = torch::autograd::grad({(y.to(torch::kFloat32) * up_cpu.to(d).to(torch::kFloat32)).sum()},
                                           {x, w, b});
            return std::vector<torch::Tensor>{y.cpu().to(torch::kFloat32), g[0].cpu().to(torch::kFloat32),
                                              g[1].cpu(), g[2].cpu(), rm.cpu(), rv.cpu(),
                                              torch::tensor(y.is_contiguous(format))};
          };
          const auto ref = run(torch::kCPU);
          const auto got = run(torch::Device(torch::kCUDA, 0));
          const char* names[] = {"output", "grad input", "grad weight", "grad bias", "running_mean", "running_var"};
          for (size_t i = 0; i < 6; ++i) {
            INFO(names[i]);
            CHECK_FALSE(got[i].isnan().any().item<bool>());
            const double scale = i == 2 || i == 3 ? std::max(1.0, ref[i].abs().max().item<double>()) : 1.0;
            CHECK(torch::allclose(got[i], ref[i], tol, tol * scale));
          }
          CHECK(got[6].item<bool>());  // the output keeps the input's memory format
        }
      }
    }
  }
}
