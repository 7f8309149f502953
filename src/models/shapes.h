// The shapes of a network's conv-BN-ReLU units, for benchmarks that time its layers one by one
// (`dlrun bench kernels`: the fused BatchNorm operators on every shape ResNet-50 has). Derived
// from the same convolution specs the ResNet constructors build from (resnet.cpp), so the list
// cannot drift from the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dlrun::models {

/// One conv-BN-ReLU of a network, or (`tail`) a residual block's end, conv-BN-add-ReLU; and how
/// many times the network has a unit of this shape.
struct ConvBnUnit {
  int64_t in = 0;      ///< input channels
  int64_t out = 0;     ///< output channels
  int64_t k = 1;       ///< square kernel side
  int64_t stride = 1;
  int64_t pad = 0;     ///< on every side
  int64_t side = 0;    ///< the input's (square) side
  bool tail = false;   ///< the block's shortcut is added before the ReLU
  int count = 1;

  /// The output's side.
  int64_t out_side() const { return (side + 2 * pad - k) / stride + 1; }
  /// (batch, in, side, side)
  std::vector<int64_t> input_shape(int64_t batch) const { return {batch, in, side, side}; }
  /// (batch, out, out_side, out_side)
  std::vector<int64_t> output_shape(int64_t batch) const { return {batch, out, out_side(), out_side()}; }
  /// (out, in, k, k)
  std::vector<int64_t> weight_shape() const { return {out, in, k, k}; }
};

/// The conv-BN-ReLU units of the ResNet `name` (resnet18 ... wide_resnet101_2, not a ResNeXt:
/// its grouped convs are not listed; else dlrun::Error, exit 1) with the
/// ImageNet stem, for 3-channel `image` x `image` inputs: the stem's conv, then per block its
/// convs in forward order (the last one the tail); the projection shortcuts (conv-BN, no ReLU)
/// are not units. Each distinct shape (channels, kernel, stride, input side, tail) once, in
/// order of first appearance, with its count. The batch enters only through the shapes
/// (input_shape(batch), output_shape(batch)).
std::vector<ConvBnUnit> resnet_conv_bn_units(const std::string& name, int64_t image);

}  // namespace dlrun::models
