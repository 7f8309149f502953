// Where a run computes: the one place run.device is turned into a device, for train, eval
// and bench alike, plus the process-wide LibTorch settings that go with it.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "config/options.h"
#include "kernels/bn_path.h"
#include "kernels/self_check.h"
#include "world/world.h"

namespace dlrun::train {

/// The device run.device names. cpu; cuda and cuda:N need CUDA and an existing index (else
/// exit 2, naming the key and what is visible); auto is cuda:0 when CUDA is available, else
/// the CPU.
torch::Device resolve_device(const RunOptions& run);

/// Where this process trains: its device and its rank in a multi-process job.
struct Placement {
  torch::Device device = torch::kCPU;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  ///< rank on this host
};

/// The process-wide CUDA settings a config asks for: cuDNN autotuning (train.cudnn_benchmark,
/// off under run.deterministic, whose algorithms must not change from run to run) and
/// TensorFloat-32 for float32 convolutions and matrix products (train.tf32).
struct CudaSettings {
  bool cudnn_benchmark = true;
  bool tf32 = true;
};
CudaSettings cuda_settings(const Config& cfg);

/// Which path carries the conv-BN-ReLU triples and ResNet block ends on `device` for `cfg`
/// (model.fused_conv_bn_relu, the dtype the BatchNorm sees -- amp's or the model's -- and
/// model.channels_last): kernels::choose_bn_path, with its reason.
kernels::BnChoice batchnorm_path(const Config& cfg, const torch::Device& device);

/// Whether the models run their conv-BN-ReLU triples and ResNet block ends through dlrun's
/// fused operators on `device` (batchnorm_path is not the modules; inside them, on CUDA, dlrun's
/// kernels or cuDNN's fused ones: kernels::set_cuda_bn_path). On a GPU the
/// binary carries no code for (fused_kernels_here), never: the modules run, and the first call
/// says so in a warning. Each fused call is still gated by the self-check
/// (kernels::fused_checked).
bool use_fused_kernels(const Config& cfg, const torch::Device& device);
/// The same decision with the device's capability verdict given (tests feed any GPU's).
bool use_fused_kernels(const Config& cfg, const torch::Device& device, const kernels::ArchVerdict& here);

/// Whether dlrun's fused kernels can run on `device` at all: always on the CPU; on a CUDA device
/// when the binary carries code for its compute capability (kernels::fused_kernels_run_on on
/// cuda::compiled_archs()) and the CUDA runtime finds an image for it (cuda::kernel_image).
/// `image` says which code runs, `why` why none does.
kernels::ArchVerdict fused_kernels_here(const torch::Device& device);

/// The CUDA settings of cuda_settings() applied to LibTorch's global context: cuDNN autotuning,
/// and TF32 through the legacy setters (allow_tf32 for cuBLAS and cuDNN), which keep the
/// fp32_precision API of torch >= 2.9 consistent with them, so that either API reads them back
/// without torch's "mix of the legacy and new APIs" error.
void apply_cuda_settings(const CudaSettings& s);

/// What a run with `cfg` turns on, for the start of the log and `dlrun info CONFIG`:
/// cudnn_benchmark, tf32, channels_last, amp ("off", "bf16", "fp16"), cuda_graphs, fused_conv_bn_relu
/// ("auto", "true", "false") and activation_checkpointing, as the config resolves them (the CUDA
/// ones only matter on CUDA).
nlohmann::json fast_paths(const Config& cfg);

/// fast_paths() in one line for the log: "fast paths on cuda:0: cudnn_benchmark on, tf32 on,
/// ..."; on the CPU only what applies there (amp, activation checkpointing, channels_last).
std::string describe_fast_paths(const Config& cfg, const torch::Device& device);

/// resolve_device(), then LibTorch's process-wide settings: intra-op threads (run.threads),
/// deterministic algorithms (run.deterministic), the global seed, and cuda_settings().
/// In a multi-process job, run.device cuda or auto means cuda:LOCAL_RANK (an explicit
/// cuda:N is kept, with a warning when several local ranks would share it), made the
/// current CUDA device.
Placement place(const Config& cfg, const dist::World& world = {});

/// summary.json's fused_kernels: whether the models use the fused operators (`enabled`, after
/// the capability check) and every self-check this process ran ({device, dtype,
/// memory_format, passed, worst, worst_in, seconds}, and on a mismatch both sides' values).
nlohmann::json fused_kernels_report(bool enabled);

/// summary.json's peak_cuda_memory_mb: the caching allocator's high-water marks on `device`,
/// {"allocated", "reserved"} in MiB; null off CUDA.
nlohmann::json peak_cuda_memory_mb(const torch::Device& device);

}  // namespace dlrun::train
