// safetensors serialization, written from the format description (header length, JSON
// header, raw data); see safetensors.h.
#include "checkpoint/safetensors.h"

#include <cstring>
#include <set>

#include "base/error.h"
#include "base/fsutil.h"

namespace dlrun::ckpt {

std::string safetensors_dtype(c10::ScalarType type, const std::string& tensor_name) {
  switch (type) {
    case c10::ScalarType::Float: return "F32";
    case c10::ScalarType::Half: return "F16";
    case c10::ScalarType::BFloat16: return "BF16";
    case c10::ScalarType::Double: return "F64";
    case c10::ScalarType::Long: return "I64";
    case c10::ScalarType::Int: return "I32";
    case c10::ScalarType::Short: return "I16";
    case c10::ScalarType::Char: return "I8";
    case c10::ScalarType::Byte: return "U8";
    case c10::ScalarType::Bool: return "BOOL";
    default:
      fail_input("tensor '{}': dtype {} cannot be exported to safetensors", tensor_name, c10::toString(type));
  }
}

std::string safetensors_bytes(const TensorDict& tensors, const std::map<std::string, std::string>& metadata) {
  const uint16_t probe = 1;
  uint8_t first = 0;
  std::memcpy(&first, &probe, 1);
  DLRUN_CHECK(first == 1, ExitCode::kRuntime, "safetensors export needs a little-endian host");

  std::vector<torch::Tensor> data;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    DLRUN_CHECK_INPUT(name != "__metadata__", "tensor name '__metadata__' is reserved by safetensors");
    DLRUN_CHECK_INPUT(seen.insert(name).second, "duplicate tensor name '{}'", name);
    const std::string dtype = safetensors_dtype(t.scalar_type(), name);
    auto c = t.detach().to(torch::kCPU).contiguous();
    const uint64_t n = c.numel() * c.element_size();
    header[name] = {{"dtype", dtype}, {"shape", c.sizes().vec()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    data.push_back(c);
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + json.size() + offset);
  const uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out += json;
  for (const auto& c : data)
    if (c.numel() > 0) out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  return out;
}

void write_safetensors(const std::string& path, const TensorDict& tensors,
                       const std::map<std::string, std::string>& metadata) {
  fsutil::write_file_atomic(path, safetensors_bytes(tensors, metadata));
}

}  // namespace dlrun::ckpt
