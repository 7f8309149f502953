// The host side of dlrun's CUDA BatchNorm kernels that bn_relu.cu's launches share: how a tensor
// lies (shape_of, dense), the grids of the NCHW and scalar channels_last kernels (blocks_for,
// chunks_for), and the vectorised channels_last path's plan (vec_plan: when it applies; its
// grids, sized to one wave of resident blocks) and its backward launch (vec_backward). bn_relu.cu
// says what the kernels compute and why; this is its planning, kept apart so that file stays the
// argument checks, the forward and backward launches and the operators' registration. Included by
// bn_relu.cu alone, after the device headers (its names are that translation unit's own).
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/bn_relu_device.cuh"
#include "kernels/bn_relu_nhwc_vec.cuh"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

namespace dlrun::kernels {
namespace {

using namespace bn_cuda;

// ---- host side -------------------------------------------------------------------------------

// How x lies: channels_last (or H*W = 1, the same addresses either way) or NCHW, both dense.
struct Shape {
  int64_t channels, hw, count, numel;
  bool nhwc;
};

Shape shape_of(const at::Tensor& x) {
  const int64_t hw = x.size(2) * x.size(3);
  return {x.size(1), hw, x.size(0) * hw, x.numel(),
          hw == 1 || x.suggest_memory_format() == at::MemoryFormat::ChannelsLast};
}

// x in its own memory format, dense (NCHW-contiguous or channels_last-contiguous).
at::Tensor dense(const at::Tensor& x) { return x.contiguous(x.suggest_memory_format()); }

// NCHW elementwise grid: one value per thread and step, grid-stride.
int blocks_for(int64_t numel) {
  return static_cast<int>(std::min<int64_t>((numel + kThreads - 1) / kThreads, int64_t{65535} * 8));
}

// The reduction grid: chunks per channel (NCHW) or channel tile (channels_last) — at least
// kMaxChunks, more when there are few channels, so that about kFillBlocks blocks share the
// device — and the values (NCHW) or rows (channels_last) in each.
struct Chunks {
  int64_t count, len;
};
Chunks chunks_for(const Shape& s) {
  const int64_t groups = s.nhwc ? (s.channels + kTileC - 1) / kTileC : s.channels;
  const int64_t cap = std::min<int64_t>(65535, std::max<int64_t>(kMaxChunks, kFillBlocks / std::max<int64_t>(1, groups)));
  const int64_t least = s.nhwc ? kTileR * 16 : kThreads * 8;  // values or rows a block takes at least
  const int64_t count = std::max<int64_t>(1, std::min<int64_t>(cap, (s.count + least - 1) / least));
  return {count, (s.count + count - 1) / count};
}

// channels_last elementwise grid: channel tiles x enough row blocks to fill the device.
dim3 nhwc_grid(const Shape& s) {
  const int64_t tiles = (s.channels + kTileC - 1) / kTileC;
  const int64_t want = std::max<int64_t>(1, kFillBlocks / tiles), most = (s.count + kTileR - 1) / kTileR;
  return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(std::min<int64_t>({want, most, 65535})));
}

const dim3 kTile(kTileC, kTileR);

// 32-bit indexing where every index and index + grid stride fits (fewer registers, and
// IntDivider's multiply-and-shift division).
bool small_indices(const Shape& s) { return s.numel < (int64_t{1} << 31); }

// ---- the vectorised channels_last path (bn_relu_nhwc_vec.cuh) ------------------------------------

// Where it applies and how its blocks lie: channels_last with C a multiple of the vector's lanes
// (8 for fp16/bf16, 4 for float32; float64 keeps the scalar kernels), fewer than 2^31 values
// (32-bit indices), every activation pointer 16-byte aligned. Blocks: the cv vector columns split
// into `tiles` of tx <= 32 (as even as possible), ty = 256 / tx rows.
struct VecPlan {
  bool ok = false;
  uint32_t cv = 0, rows = 0;
  unsigned tiles = 0;
  dim3 block;
};

int vec_lanes(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 ? 8 : t == at::kFloat ? 4 : 0;
}

VecPlan vec_plan(const Shape& s, at::ScalarType dtype, std::initializer_list<const void*> pointers) {
  VecPlan p;
  const int lanes = vec_lanes(dtype);
  if (!s.nhwc || lanes == 0 || s.channels % lanes != 0 || s.numel >= (int64_t{1} << 31)) return p;
  for (const void* q : pointers)
    if (q != nullptr && reinterpret_cast<uintptr_t>(q) % 16 != 0) return p;
  const int64_t cv = s.channels / lanes, tiles = (cv + 31) / 32, tx = (cv + tiles - 1) / tiles;
  p.ok = true;
  p.cv = static_cast<uint32_t>(cv);
  p.rows = static_cast<uint32_t>(s.count);
  p.tiles = static_cast<unsigned>(tiles);
  p.block = dim3(static_cast<unsigned>(tx), static_cast<unsigned>(vec::kBlockThreads / tx));
  return p;
}

// Blocks of `kernel` (256 threads at most) the device holds at once: one full wave. The
// occupancy query is asked once per kernel, block size and device and kept (a training step
// launches these kernels hundreds of times with a handful of block sizes).
template <typename Kernel>
int64_t resident_blocks(Kernel kernel, const dim3& block) {
  struct Key {
    const void* kernel;
    unsigned threads;
    int device;
    bool operator<(const Key& o) const {
      return std::tie(kernel, threads, device) < std::tie(o.kernel, o.threads, o.device);
    }
  };
  static std::mutex mu;
  static std::map<Key, int64_t> known;
  const Key key{reinterpret_cast<const void*>(kernel), block.x * block.y, c10::cuda::current_device()};
  std::lock_guard<std::mutex> lock(mu);
  const auto it = known.find(key);
  if (it != known.end()) return it->second;
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, key.threads, 0));
  const int64_t n = int64_t{std::max(per_sm, 1)} * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  known.emplace(key, n);
  return n;
}

// The reductions' chunks of rows per tile: about one wave of blocks, each thread at least
// kMinRowsPerThread rows and at most kMaxRowsPerThread (the float32 sums' length; more chunks
// then), no chunk empty.
struct VecChunks {
  uint32_t count, rows;
};
VecChunks vec_chunks(const VecPlan& p, int64_t resident) {
  const int64_t ty = p.block.y, rows = p.rows;
  const int64_t fill = std::max<int64_t>(1, resident / p.tiles);
  const int64_t most = std::max<int64_t>(1, rows / (ty * vec::kMinRowsPerThread));
  const int64_t least = (rows + ty * vec::kMaxRowsPerThread - 1) / (ty * vec::kMaxRowsPerThread);
  const int64_t count = std::min<int64_t>(65535, std::max(least, std::min(fill, most)));
  const int64_t len = (rows + count - 1) / count;
  return {static_cast<uint32_t>((rows + len - 1) / len), static_cast<uint32_t>(len)};
}

// The elementwise grid: tiles x row blocks, one wave (grid-stride over the rows beyond it), and
// no more blocks than give every thread two rows (the kernels take rows in pairs).
dim3 vec_grid(const VecPlan& p, int64_t resident) {
  const int64_t want = std::max<int64_t>(1, resident / p.tiles);
  const int64_t most = (int64_t{p.rows} + 2 * p.block.y - 1) / (2 * p.block.y);
  return dim3(p.tiles, static_cast<unsigned>(std::min<int64_t>({want, most, 65535})));
}

// The finalize kernels: one warp per channel, 8 a block.
unsigned warp_blocks(int64_t channels) { return static_cast<unsigned>((channels + 7) / 8); }

// The vectorised backward's launches (bn_relu_nhwc_vec.cuh): one reduction pass (in evaluation
// also the only pass: it writes dx and g as well), a finalize of one warp per channel, and in
// training one elementwise pass for dx and g. kMaskFromX: bn_relu's mask recomputed from x and
// the bias, the output not read.
template <typename scalar_t, bool kMaskFromX>
void vec_backward(const VecPlan& vp, const Shape& s, bool training, const at::Tensor& dy, const at::Tensor& x,
                  const at::Tensor& out, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& mean,
                  const at::Tensor& invstd, at::Tensor& dx, at::Tensor& g, at::Tensor& sum_dy,
                  at::Tensor& sum_dy_xhat, cudaStream_t stream) {
  const auto opts = sum_dy.options();
  const scalar_t *dyp = dy.const_data_ptr<scalar_t>(), *xp = x.const_data_ptr<scalar_t>(),
                 *outp = kMaskFromX ? nullptr : out.const_data_ptr<scalar_t>();
  scalar_t* gp = g.defined() ? g.mutable_data_ptr<scalar_t>() : nullptr;
  scalar_t* dxp = dx.mutable_data_ptr<scalar_t>();
  const float *m = mean.const_data_ptr<float>(), *is = invstd.const_data_ptr<float>(),
              *w = weight.const_data_ptr<float>(), *b = kMaskFromX ? bias.const_data_ptr<float>() : nullptr;
  const auto partial = training ? vec::grad_partial_vec<scalar_t, false, kMaskFromX>
                                : vec::grad_partial_vec<scalar_t, true, kMaskFromX>;
  const VecChunks ch = vec_chunks(vp, resident_blocks(partial, vp.block));
  auto p_dy = at::empty({s.channels, ch.count}, opts), p_dy_xmu = at::empty({s.channels, ch.count}, opts);
  partial<<<dim3(vp.tiles, ch.count), vp.block, 0, stream>>>(
      dyp, xp, outp, vp.cv, vp.rows, ch.rows, m, is, w, b, p_dy.mutable_data_ptr<float>(),
      p_dy_xmu.mutable_data_ptr<float>(), training ? nullptr : dxp, training ? nullptr : gp);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  vec::grad_final_vec<<<warp_blocks(s.channels), kThreads, 0, stream>>>(
      p_dy.const_data_ptr<float>(), p_dy_xmu.const_data_ptr<float>(), static_cast<uint32_t>(s.channels), ch.count,
      is, sum_dy.mutable_data_ptr<float>(), sum_dy_xhat.mutable_data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (!training) return;
  const GradConstants<float> k{m, is, w, sum_dy.const_data_ptr<float>(), sum_dy_xhat.const_data_ptr<float>(),
                               static_cast<float>(1.0 / static_cast<double>(s.count)), true};
  const auto kernel = vec::grad_input_vec<scalar_t, kMaskFromX>;
  kernel<<<vec_grid(vp, resident_blocks(kernel, vp.block)), vp.block, 0, stream>>>(dyp, xp, outp, vp.cv, vp.rows, k,
                                                                                    b, dxp, gp);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace
}  // namespace dlrun::kernels
