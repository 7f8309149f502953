// Device resolution (see device.h).
#include "train/step/device.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <stdlib.h>

#ifdef DLRUN_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <atomic>

#include "base/error.h"
#include "base/log.h"
#include "config/validate.h"
#include "kernels/device_query.h"

namespace dlrun::train {

torch::Device resolve_device(const RunOptions& run) {
  const std::string& d = run.device;
  if (d == "cpu") return torch::kCPU;
  const bool cuda = torch::cuda::is_available();
  if (d == "auto") return cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  DLRUN_CHECK_INPUT(cuda, "run.device={} but CUDA is not available here (see `dlrun info`)", d);
  const torch::Device dev(d);
  const auto count = static_cast<int64_t>(torch::cuda::device_count());
  DLRUN_CHECK_INPUT(!dev.has_index() || dev.index() < count, "run.device={} but only {} CUDA device(s) are visible", d,
                    count);
  return dev.has_index() ? dev : torch::Device(torch::kCUDA, 0);
}

CudaSettings cuda_settings(const Config& cfg) {
  CudaSettings s;
  s.cudnn_benchmark = cfg.train.cudnn_benchmark && !cfg.run.deterministic;
  s.tf32 = cfg.train.tf32;
  return s;
}

kernels::ArchVerdict fused_kernels_here(const torch::Device& device) {
  if (!device.is_cuda()) return {true, "dlrun's CPU kernels", ""};
  const int index = device.has_index() ? device.index() : 0;
  for (const auto& d : cuda::devices()) {
    if (d.index != index) continue;
    auto v = kernels::fused_kernels_run_on(d.major, d.minor, cuda::compiled_archs());
    if (!v.runs) return v;
    const auto image = cuda::kernel_image(index);
    if (!image.ok)
      return {false, "", fmt::format("the CUDA runtime finds no image of dlrun's kernels for {} (compute {}.{}): {}",
                                     d.name, d.major, d.minor, image.error)};
    v.image = fmt::format("{}: {}", v.image, image.arch);
    return v;
  }
  return {false, "", fmt::format("cuda:{} is not visible to the CUDA runtime", index)};
}

kernels::BnChoice batchnorm_path(const Config& cfg, const torch::Device& device) {
  kernels::BnPolicy policy = kernels::BnPolicy::kAuto;
  switch (cfg.model.fused_conv_bn_relu) {
    case FusedKernels::kOn: policy = kernels::BnPolicy::kDlrun; break;
    case FusedKernels::kOff: policy = kernels::BnPolicy::kModules; break;
    case FusedKernels::kCudnn: policy = kernels::BnPolicy::kCudnn; break;
    case FusedKernels::kAuto: break;
  }
  // The dtype the BatchNorm sees: autocast's under amp (the convolution before it runs there).
  at::ScalarType dtype = cfg.model.dtype == ModelDtype::kFloat64 ? at::kDouble : at::kFloat;
  if (cfg.amp.enabled) dtype = cfg.amp.dtype == AmpDtype::kBf16 ? at::kBFloat16 : at::kHalf;
  int major = 0;
  if (device.is_cuda())
    for (const auto& d : cuda::devices())
      if (d.index == (device.has_index() ? device.index() : 0)) major = d.major;
  return kernels::choose_bn_path(policy, device.is_cuda(), major, dtype, cfg.model.channels_last);
}

bool use_fused_kernels(const Config& cfg, const torch::Device& device) {
  const bool wanted = batchnorm_path(cfg, device).path != kernels::BnPath::kModules;
  return wanted && device.is_cuda() ? use_fused_kernels(cfg, device, fused_kernels_here(device)) : wanted;
}

bool use_fused_kernels(const Config& cfg, const torch::Device& device, const kernels::ArchVerdict& here) {
  if (batchnorm_path(cfg, device).path == kernels::BnPath::kModules) return false;
  if (here.runs) return true;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    log0::warn("model.fused_conv_bn_relu={}: the fused kernels cannot run on {}: {}; the modules (conv, BatchNorm, "
               "ReLU) run instead",
               name_of(cfg.model.fused_conv_bn_relu), device.str(), here.why);
  return false;
}

nlohmann::json fast_paths(const Config& cfg) {
  const CudaSettings s = cuda_settings(cfg);
  return {{"cudnn_benchmark", s.cudnn_benchmark},
          {"tf32", s.tf32},
          {"channels_last", cfg.model.channels_last},
          {"amp", cfg.amp.enabled ? name_of(cfg.amp.dtype) : "off"},
          {"cuda_graphs", cfg.train.cuda_graphs},
          {"fused_conv_bn_relu", name_of(cfg.model.fused_conv_bn_relu)},
          {"activation_checkpointing", name_of(cfg.model.activation_checkpointing)}};
}

std::string describe_fast_paths(const Config& cfg, const torch::Device& device) {
  const auto j = fast_paths(cfg);
  auto on = [&](const char* k) { return j[k].get<bool>() ? "on" : "off"; };
  std::string s = fmt::format("fast paths on {}: ", device.str());
  if (device.is_cuda())
    s += fmt::format("cudnn_benchmark {}, tf32 {}, cuda_graphs {}, ", on("cudnn_benchmark"), on("tf32"),
                     on("cuda_graphs"));
  const auto bn = batchnorm_path(cfg, device);
  s += fmt::format("conv-BN-ReLU path {} ({}), amp {}, channels_last {}, activation_checkpointing {}",
                   use_fused_kernels(cfg, device) ? kernels::name_of(bn.path) : "modules", bn.why,
                   j["amp"].get<std::string>(), on("channels_last"), j["activation_checkpointing"].get<std::string>());
  return s;
}

Placement place(const Config& cfg, const dist::World& world) {
  const RunOptions& run = cfg.run;
  Placement p;
  p.device = resolve_device(run);
  config::check_device_fit(cfg, p.device.is_cuda(), p.device.str());
  p.rank = world.rank;
  p.world_size = world.size;
  p.local_rank = world.local_rank;
  if (p.device.is_cuda() && world.distributed()) {
    if (run.device == "cuda" || run.device == "auto") {
      const auto count = static_cast<int>(torch::cuda::device_count());
      DLRUN_CHECK_INPUT(world.local_rank < count,
                        "local rank {} needs cuda:{}, but only {} CUDA device(s) are visible (run one process per GPU: "
                        "--nproc-per-node {})",
                        world.local_rank, world.local_rank, count, count);
      p.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank));
    } else if (world.local_size > 1) {
      log0::warn("run.device={} puts all {} local ranks on one GPU; use run.device: cuda for cuda:LOCAL_RANK",
                 run.device, world.local_size);
    }
  }
  // The current CUDA device is the run's, in one process too: what synchronises "the device"
  // (CUDA graph capture, cudaDeviceSynchronize, a stream without an index) would otherwise wait
  // on GPU 0, and make a context there, for a run on cuda:N.
  if (p.device.is_cuda()) c10::impl::getDeviceGuardImpl(c10::kCUDA)->setDevice(p.device);
  if (run.threads > 0) at::set_num_threads(static_cast<int>(run.threads));
  if (run.deterministic) {
    at::globalContext().setDeterministicAlgorithms(true, false);
    // cuBLAS is deterministic only with a fixed workspace configuration, which PyTorch demands
    // in this mode (else every matrix product on CUDA is refused): set before its first use,
    // unless the user chose one.
    if (p.device.is_cuda() && ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0) != 0)
      log0::warn("run.deterministic: could not set CUBLAS_WORKSPACE_CONFIG");
  }
  apply_cuda_settings(cuda_settings(cfg));
  torch::manual_seed(run.seed);
  return p;
}

void apply_cuda_settings(const CudaSettings& s) {
  auto& ctx = at::globalContext();
  ctx.setBenchmarkCuDNN(s.cudnn_benchmark);
  // torch 2.11 keeps TF32 twice: the legacy flags (float32_matmul_precision, allow_tf32 for
  // cuDNN) and the fp32_precision map, and its legacy readers refuse to answer when the two
  // disagree ("mix of the legacy and new APIs"). Setting only the new map leaves the legacy flags
  // at their defaults (cuBLAS: highest), which cuBLAS's reader then rejects. The legacy setters
  // write both: setAllowTF32CuBLAS sets float32_matmul_precision and the CUDA matmul entry,
  // setAllowTF32CuDNN the cuDNN conv and RNN entries.
  ctx.setAllowTF32CuBLAS(s.tf32);
  ctx.setAllowTF32CuDNN(s.tf32);
}

nlohmann::json fused_kernels_report(bool enabled) {
  return {{"enabled", enabled}, {"checks", kernels::self_check_report()}};
}

nlohmann::json peak_cuda_memory_mb(const torch::Device& device) {
#ifdef DLRUN_TORCH_HAS_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.has_index() ? device.index() : 0);
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    return {{"allocated", static_cast<double>(stats.allocated_bytes[agg].peak) / (1 << 20)},
            {"reserved", static_cast<double>(stats.reserved_bytes[agg].peak) / (1 << 20)}};
  }
#endif
  (void)device;
  return nullptr;
}

}  // namespace dlrun::train
