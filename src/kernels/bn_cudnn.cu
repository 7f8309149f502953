// dlrun::bn_act_cudnn and its backward on CUDA (schemas: library.cpp): a training step's
// relu(BatchNorm(x) [+ z]) through cuDNN's fused BatchNorm-activation -- one
// cudnnBatchNormalizationForwardTrainingEx call with the BN_ACTIVATION (or BN_ADD_ACTIVATION)
// op, and one cudnnBatchNormalizationBackwardEx for the gradients of x, z, the weight and the
// bias -- in cuDNN's persistent spatial mode on NHWC tensors. This is the BatchNorm PyTorch
// calls for fp16 channels_last, with the ReLU and the residual add that eager runs as passes of
// their own folded in.
//
// Who may call it: kernels::cudnn_bn_takes (bn_path.h) says which calls cuDNN takes; the
// autograd wrapper and the routing are in bn_cudnn_autograd.cpp. cuDNN computes what dlrun's
// operators compute (ops.h): batch statistics in float32, running statistics moved by
// `momentum` towards the mean and the unbiased variance, save_invstd = 1/sqrt(var + eps).
// The reserve space cuDNN fills in the forward (the activation's record) is returned as a byte
// tensor, kept by autograd and handed back to the backward.
//
// Host code only (nvcc compiles it with the CUDA sources, where the wheel's cuDNN is linked);
// not run on a GPU yet when written: the first-use self-check compares it with the reference
// before a run trusts it (self_check.cpp), and tests/kernels' [gpu] cases do the same.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cudnn.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "kernels/bn_cudnn.h"
#include "kernels/bn_path.h"

namespace dlrun::kernels {
namespace {

void check(cudnnStatus_t status, const char* call) {
  TORCH_CHECK(status == CUDNN_STATUS_SUCCESS, "dlrun::bn_act_cudnn: ", call, " failed: ",
              cudnnGetErrorString(status));
}

// Owners of cuDNN's descriptors.
class Tensor4d {
 public:
  Tensor4d() { check(cudnnCreateTensorDescriptor(&d_), "cudnnCreateTensorDescriptor"); }
  ~Tensor4d() { cudnnDestroyTensorDescriptor(d_); }
  Tensor4d(const Tensor4d&) = delete;
  Tensor4d& operator=(const Tensor4d&) = delete;
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

class Relu {
 public:
  Relu() {
    check(cudnnCreateActivationDescriptor(&d_), "cudnnCreateActivationDescriptor");
    check(cudnnSetActivationDescriptor(d_, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0),
          "cudnnSetActivationDescriptor");
  }
  ~Relu() { cudnnDestroyActivationDescriptor(d_); }
  Relu(const Relu&) = delete;
  Relu& operator=(const Relu&) = delete;
  cudnnActivationDescriptor_t get() const { return d_; }

 private:
  cudnnActivationDescriptor_t d_ = nullptr;
};

cudnnDataType_t data_type(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return CUDNN_DATA_HALF;
    case at::kBFloat16: return CUDNN_DATA_BFLOAT16;
    case at::kFloat: return CUDNN_DATA_FLOAT;
    default: TORCH_CHECK(false, "dlrun::bn_act_cudnn: no cuDNN data type for ", t);
  }
  return CUDNN_DATA_FLOAT;
}

int dim(int64_t v, const char* what) {
  TORCH_CHECK(v > 0 && v <= INT32_MAX, "dlrun::bn_act_cudnn: ", what, " of ", v, " is out of cuDNN's range");
  return static_cast<int>(v);
}

// The activations' descriptor (NHWC, fully packed) and the per-channel one (1 x C x 1 x 1,
// float32: weight, bias, running and saved statistics).
struct Descriptors {
  Tensor4d x, param;
  Relu relu;
  explicit Descriptors(const at::Tensor& t) {
    check(cudnnSetTensor4dDescriptor(x.get(), CUDNN_TENSOR_NHWC, data_type(t.scalar_type()), dim(t.size(0), "batch"),
                                     dim(t.size(1), "channels"), dim(t.size(2), "height"), dim(t.size(3), "width")),
          "cudnnSetTensor4dDescriptor");
    check(cudnnSetTensor4dDescriptor(param.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, dim(t.size(1), "channels"),
                                     1, 1),
          "cudnnSetTensor4dDescriptor");
  }
};

constexpr auto kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

cudnnHandle_t handle_on_this_stream() {
  cudnnHandle_t h = at::native::getCudnnHandle();
  check(cudnnSetStream(h, at::cuda::getCurrentCUDAStream()), "cudnnSetStream");
  return h;
}

// A device buffer of at least n bytes, never empty: a workspace or reserve of size 0 is still
// passed as a real pointer. (cuDNN's reference reads a NULL workspace of the fused ops as "plain
// BatchNorm": no activation, no add.) The size passed beside it is the size cuDNN asked for.
constexpr size_t kMinBuffer = 256;
at::Tensor bytes(size_t n, const at::Tensor& like) {
  return at::empty({static_cast<int64_t>(std::max(n, kMinBuffer))}, like.options().dtype(at::kByte));
}

at::Tensor nhwc(const at::Tensor& t) { return t.contiguous(at::MemoryFormat::ChannelsLast); }

void check_args(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& rm,
                const at::Tensor& rv, double eps) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 4, "dlrun::bn_act_cudnn: expected a 4-D CUDA input, got ", x.sizes(), " on ",
              x.device());
  TORCH_CHECK(cudnn_bn_takes(x.scalar_type(), true, x.size(1), eps, true, weight.scalar_type()),
              "dlrun::bn_act_cudnn: cuDNN's fused BatchNorm-activation does not take ", x.scalar_type(), " input of ",
              x.size(1), " channels with eps ", eps, " and ", weight.scalar_type(), " parameters");
  TORCH_CHECK(cudnn_bn_sizes_ok(x.size(0), x.size(1), x.size(2), x.size(3)),
              "dlrun::bn_act_cudnn: training needs more than one value per channel, fewer than 2^31 values and a "
              "batch of at most 880801, got input of shape ", x.sizes());
  for (const at::Tensor* t : {&weight, &bias, &rm, &rv}) {
    TORCH_CHECK(t->dim() == 1 && t->size(0) == x.size(1) && t->device() == x.device() &&
                    t->scalar_type() == at::kFloat && t->is_contiguous(),
                "dlrun::bn_act_cudnn: expected contiguous float32 parameters and statistics of shape (", x.size(1),
                ") on ", x.device(), ", got ", t->sizes(), " ", t->scalar_type(), " on ", t->device());
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> forward(const at::Tensor& x_in,
                                                                   const std::optional<at::Tensor>& residual_in,
                                                                   const at::Tensor& weight, const at::Tensor& bias,
                                                                   at::Tensor& running_mean, at::Tensor& running_var,
                                                                   double momentum, double eps) {
  check_args(x_in, weight, bias, running_mean, running_var, eps);
  const bool add = residual_in.has_value() && residual_in->defined();
  if (add)
    TORCH_CHECK(residual_in->sizes() == x_in.sizes() && residual_in->device() == x_in.device(),
                "dlrun::bn_act_cudnn: expected a residual of the input's shape ", x_in.sizes(), ", got ",
                residual_in->sizes(), " on ", residual_in->device());
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = nhwc(x_in);
  const at::Tensor z = add ? nhwc(residual_in->to(x.scalar_type())) : at::Tensor();
  at::Tensor out = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  const auto stats = x.options().dtype(at::kFloat);
  at::Tensor save_mean = at::empty({x.size(1)}, stats), save_invstd = at::empty({x.size(1)}, stats);
  const Descriptors d(x);
  const auto ops = add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  const cudnnHandle_t h = handle_on_this_stream();
  size_t workspace_size = 0, reserve_size = 0;
  check(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(h, kMode, ops, d.x.get(), add ? d.x.get() : nullptr,
                                                                 d.x.get(), d.param.get(), d.relu.get(),
                                                                 &workspace_size),
        "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize");
  check(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, kMode, ops, d.relu.get(), d.x.get(), &reserve_size),
        "cudnnGetBatchNormalizationTrainingExReserveSpaceSize");
  at::Tensor workspace = bytes(workspace_size, x), reserve = bytes(reserve_size, x);
  const float one = 1.0f, zero = 0.0f;
  check(cudnnBatchNormalizationForwardTrainingEx(
            h, kMode, ops, &one, &zero, d.x.get(), x.const_data_ptr(), add ? d.x.get() : nullptr,
            add ? z.const_data_ptr() : nullptr, d.x.get(), out.mutable_data_ptr(), d.param.get(),
            weight.const_data_ptr(), bias.const_data_ptr(), momentum, running_mean.mutable_data_ptr(),
            running_var.mutable_data_ptr(), eps, save_mean.mutable_data_ptr(), save_invstd.mutable_data_ptr(),
            d.relu.get(), workspace.mutable_data_ptr(), workspace_size, reserve.mutable_data_ptr(), reserve_size),
        "cudnnBatchNormalizationForwardTrainingEx");
  return {out, save_mean, save_invstd, reserve};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward(
    const at::Tensor& grad_out, const at::Tensor& x_in, const at::Tensor& out_in, const at::Tensor& weight,
    const at::Tensor& bias, const at::Tensor& save_mean, const at::Tensor& save_invstd, const at::Tensor& reserve,
    bool add, double eps) {
  TORCH_CHECK(grad_out.sizes() == x_in.sizes() && out_in.sizes() == x_in.sizes(),
              "dlrun::bn_act_cudnn_backward: expected the gradient and the output of the input's shape ",
              x_in.sizes(), ", got ", grad_out.sizes(), " and ", out_in.sizes());
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = nhwc(x_in), y = nhwc(out_in), dy = nhwc(grad_out.to(x_in.scalar_type()));
  at::Tensor dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  at::Tensor dz = add ? at::empty_like(x, at::MemoryFormat::ChannelsLast) : at::Tensor();
  at::Tensor dweight = at::empty_like(weight), dbias = at::empty_like(weight);
  const Descriptors d(x);
  const auto ops = add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
  const cudnnHandle_t h = handle_on_this_stream();
  size_t workspace_size = 0;
  check(cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, kMode, ops, d.x.get(), d.x.get(), d.x.get(),
                                                          add ? d.x.get() : nullptr, d.x.get(), d.param.get(),
                                                          d.relu.get(), &workspace_size),
        "cudnnGetBatchNormalizationBackwardExWorkspaceSize");
  at::Tensor workspace = bytes(workspace_size, x);
  // The forward's reserve, of the size this op and input need (a wrong `add` would have cuDNN
  // read past it).
  size_t reserve_size = 0;
  check(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, kMode, ops, d.relu.get(), d.x.get(), &reserve_size),
        "cudnnGetBatchNormalizationTrainingExReserveSpaceSize");
  TORCH_CHECK(reserve.scalar_type() == at::kByte && reserve.device() == x.device() &&
                  static_cast<size_t>(reserve.numel()) >= reserve_size,
              "dlrun::bn_act_cudnn_backward: expected the forward's reserve space of ", reserve_size, " bytes on ",
              x.device(), ", got ", reserve.numel(), " ", reserve.scalar_type(), " on ", reserve.device());
  // (a reserve of 0 bytes from the forward is still a buffer: bytes() above)
  at::Tensor reserve_c = reserve.numel() > 0 ? reserve.contiguous() : bytes(0, x);
  const float one = 1.0f, zero = 0.0f;
  check(cudnnBatchNormalizationBackwardEx(
            h, kMode, ops, &one, &zero, &one, &zero, d.x.get(), x.const_data_ptr(), d.x.get(), y.const_data_ptr(),
            d.x.get(), dy.const_data_ptr(), add ? d.x.get() : nullptr, add ? dz.mutable_data_ptr() : nullptr,
            d.x.get(), dx.mutable_data_ptr(), d.param.get(), weight.const_data_ptr(), bias.const_data_ptr(),
            dweight.mutable_data_ptr(), dbias.mutable_data_ptr(), eps, save_mean.const_data_ptr(),
            save_invstd.const_data_ptr(), d.relu.get(), workspace.mutable_data_ptr(), workspace_size,
            reserve_c.mutable_data_ptr(), reserve_size),
        "cudnnBatchNormalizationBackwardEx");
  return {dx, dz, dweight, dbias};
}

}  // namespace

TORCH_LIBRARY_IMPL(dlrun, CUDA, m) {
  m.impl("bn_act_cudnn", TORCH_FN(forward));
  m.impl("bn_act_cudnn_backward", TORCH_FN(backward));
}

}  // namespace dlrun::kernels
