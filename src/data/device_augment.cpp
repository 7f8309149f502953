// Batched tensor version of the image pipeline (see device_augment.h). Per-sample
// parameters are packed on the host into small tensors, copied once, and applied with
// gathers, grid sampling and masks, so the whole batch stays on the device.
#include "data/device_augment.h"

#include <cmath>

#include "base/numbers.h"

namespace dlrun::data {

namespace F = torch::nn::functional;

namespace {


/// grid_sample with per-sample affine maps theta (B, 2, 3) from output to source coordinates.
torch::Tensor warp(const torch::Tensor& x, const std::vector<float>& theta, int64_t oh, int64_t ow) {
  const int64_t b = x.size(0);
  torch::Tensor t = to_device_async(torch::from_blob(const_cast<float*>(theta.data()), {b, 2, 3}, torch::kFloat).clone(), x.device());
  torch::Tensor grid = F::affine_grid(t, {b, x.size(1), oh, ow}, /*align_corners=*/false);
  return F::grid_sample(x, grid,
                        F::GridSampleFuncOptions().mode(torch::kBilinear).padding_mode(torch::kZeros).align_corners(false));
}

torch::Tensor where_flip(const torch::Tensor& x, const std::vector<uint8_t>& mask, int64_t dim) {
  const int64_t b = x.size(0);
  torch::Tensor m = to_device_async(torch::from_blob(const_cast<uint8_t*>(mask.data()), {b}, torch::kBool).clone(), x.device());
  return torch::where(m.view({b, 1, 1, 1}), x.flip({dim}), x);
}

}  // namespace

torch::Tensor to_device_async(const torch::Tensor& host, const torch::Device& d) {
  if (!d.is_cuda()) return host.to(d);
  return host.pin_memory().to(d, /*non_blocking=*/true);
}

torch::Tensor augment_batch(const torch::Tensor& images, const Pipeline& p, const std::vector<SampleParams>& params) {
  const int64_t b = images.size(0), h = images.size(2), w = images.size(3);
  const int64_t oh = p.out_h, ow = p.out_w;
  torch::Tensor x = images.to(torch::kFloat).div_(255.0f);  // (B, C, H, W)

  bool identity = true;
  for (const auto& sp : params) identity = identity && sp.identity_base(h, w, p);
  if (!identity) {
    std::vector<float> theta;
    for (const auto& sp : params) {
      theta.insert(theta.end(), {static_cast<float>(sp.box_w / w), 0.0f, static_cast<float>((2 * sp.box_x + sp.box_w) / w - 1),
                                 0.0f, static_cast<float>(sp.box_h / h), static_cast<float>((2 * sp.box_y + sp.box_h) / h - 1)});
    }
    x = warp(x, theta, oh, ow);  // (B, C, oh, ow)
  }

  std::vector<uint8_t> flip, vflip;
  bool any_flip = false, any_vflip = false, any_affine = false, any_erase = false;
  for (const auto& sp : params) {
    flip.push_back(sp.flip);
    vflip.push_back(sp.vflip);
    any_flip |= sp.flip;
    any_vflip |= sp.vflip;
    any_affine |= sp.angle_deg != 0 || sp.shift_x != 0 || sp.shift_y != 0;
    any_erase |= sp.erase;
  }
  if (any_flip) x = where_flip(x, flip, 3);
  if (any_vflip) x = where_flip(x, vflip, 2);

  if (any_affine) {
    // Output pixel offsets from the center, u * (size / 2) in normalized units (align_corners=false).
    std::vector<float> theta;
    const double hw = ow / 2.0, hh = oh / 2.0;
    for (const auto& sp : params) {
      double a = sp.angle_deg * kPi / 180.0, ca = std::cos(a), sa = std::sin(a);
      double tx = -(ca * sp.shift_x + sa * sp.shift_y) / hw, ty = -(-sa * sp.shift_x + ca * sp.shift_y) / hh;
      theta.insert(theta.end(), {static_cast<float>(ca), static_cast<float>(sa * hh / hw), static_cast<float>(tx),
                                 static_cast<float>(-sa * hw / hh), static_cast<float>(ca), static_cast<float>(ty)});
    }
    x = warp(x, theta, oh, ow);
  }

  if (p.crop) {
    const int64_t pad = p.crop_padding, c = x.size(1);
    std::vector<int64_t> oy, ox;
    for (const auto& sp : params) {
      oy.push_back(sp.crop_y);
      ox.push_back(sp.crop_x);
    }
    auto lopt = torch::TensorOptions().dtype(torch::kLong);
    torch::Tensor ty = to_device_async(torch::from_blob(oy.data(), {b}, lopt).clone(), x.device());
    torch::Tensor tx = to_device_async(torch::from_blob(ox.data(), {b}, lopt).clone(), x.device());
    torch::Tensor xp = F::pad(x, F::PadFuncOptions({pad, pad, pad, pad}));  // (B, C, oh+2p, ow+2p)
    torch::Tensor rows = (ty.view({b, 1}) + torch::arange(oh, lopt.device(x.device())).view({1, oh}));  // (B, oh)
    torch::Tensor cols = (tx.view({b, 1}) + torch::arange(ow, lopt.device(x.device())).view({1, ow}));  // (B, ow)
    xp = xp.gather(2, rows.view({b, 1, oh, 1}).expand({b, c, oh, ow + 2 * pad}));
    x = xp.gather(3, cols.view({b, 1, 1, ow}).expand({b, c, oh, ow}));
  }

  if (p.normalize) {
    const int64_t c = x.size(1);
    torch::Tensor mean = to_device_async(torch::tensor(std::vector<float>(p.mean.begin(), p.mean.end())), x.device()).view({1, c, 1, 1});
    torch::Tensor sd = to_device_async(torch::tensor(std::vector<float>(p.std.begin(), p.std.end())), x.device()).view({1, c, 1, 1});
    x = (x - mean) / sd;
  }

  if (any_erase) {
    std::vector<int64_t> box;  // (B, 4): y, x, h, w (h = w = 0: no erase)
    for (const auto& sp : params)
      box.insert(box.end(), {sp.erase_y, sp.erase_x, sp.erase ? sp.erase_h : 0, sp.erase ? sp.erase_w : 0});
    auto lopt = torch::TensorOptions().dtype(torch::kLong);
    torch::Tensor t = to_device_async(torch::from_blob(box.data(), {b, 4}, lopt).clone(), x.device());
    torch::Tensor ry = torch::arange(oh, lopt.device(x.device())).view({1, oh});
    torch::Tensor rx = torch::arange(ow, lopt.device(x.device())).view({1, ow});
    torch::Tensor in_y = (ry >= t.select(1, 0).view({b, 1})) & (ry < (t.select(1, 0) + t.select(1, 2)).view({b, 1}));
    torch::Tensor in_x = (rx >= t.select(1, 1).view({b, 1})) & (rx < (t.select(1, 1) + t.select(1, 3)).view({b, 1}));
    torch::Tensor mask = in_y.view({b, 1, oh, 1}) & in_x.view({b, 1, 1, ow});  // (B, 1, oh, ow)
    x = x.masked_fill(mask, 0.0f);
  }
  return x.contiguous();
}

}  // namespace dlrun::data
