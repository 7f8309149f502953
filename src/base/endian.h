// The byte order of the host. The files dlrun writes as raw numbers -- safetensors, ONNX's
// raw_data, params_sha256's bytes, TensorBoard's records -- are little-endian by definition;
// dlrun writes tensors' memory as it is, so it refuses a big-endian host where it would.
#pragma once

namespace dlrun {

/// Whether this host stores numbers least significant byte first (x86-64 and AArch64 do).
constexpr bool host_is_little_endian() { return __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__; }

}  // namespace dlrun
