// safetensors serialization, written from the format description (header length, JSON
// header, raw data); see safetensors.h.
#include "checkpoint/safetensors.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <set>

#include "base/error.h"
#include "base/fsutil.h"
#include "base/json_limits.h"

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

namespace {

c10::ScalarType scalar_type_of(const std::string& dtype, const std::string& what, const std::string& name) {
  static const std::map<std::string, c10::ScalarType> kTypes = {
      {"F32", c10::ScalarType::Float}, {"F16", c10::ScalarType::Half},  {"BF16", c10::ScalarType::BFloat16},
      {"F64", c10::ScalarType::Double}, {"I64", c10::ScalarType::Long}, {"I32", c10::ScalarType::Int},
      {"I16", c10::ScalarType::Short},  {"I8", c10::ScalarType::Char},  {"U8", c10::ScalarType::Byte},
      {"BOOL", c10::ScalarType::Bool}};
  const auto t = kTypes.find(dtype);
  DLRUN_CHECK_INPUT(t != kTypes.end(), "{}: tensor '{}' has dtype '{}', which dlrun does not read", what, name, dtype);
  return t->second;
}

uint64_t header_length(const std::string& bytes) {
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return len;
}

}  // namespace

bool looks_like_safetensors(const std::string& bytes) {
  if (bytes.size() < 10) return false;
  const uint64_t len = header_length(bytes);
  return len >= 2 && len <= bytes.size() - 8 && bytes[8] == '{';
}

TensorDict safetensors_from_bytes(const std::string& bytes, const std::string& what,
                                  std::map<std::string, std::string>* metadata) {
  DLRUN_CHECK_INPUT(looks_like_safetensors(bytes), "{}: not a safetensors file (no header length and JSON header)",
                    what);
  const uint64_t len = header_length(bytes);
  nlohmann::json header;
  try {
    header = parse_json_capped(bytes.substr(8, len), 4);
  } catch (const std::exception& e) {
    fail_input("{}: the safetensors header is not JSON: {}", what, e.what());
  }
  DLRUN_CHECK_INPUT(header.is_object(), "{}: the safetensors header is not a JSON object", what);
  const uint64_t data_size = bytes.size() - 8 - len;
  const char* data = bytes.data() + 8 + len;
  // File order is data order for every writer; the header's key order is not kept by all.
  std::vector<std::tuple<uint64_t, std::string, torch::Tensor>> found;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (metadata && v.is_object())
        for (const auto& [k, m] : v.items())
          if (m.is_string()) (*metadata)[k] = m.get<std::string>();
      continue;
    }
    try {
      const auto type = scalar_type_of(v.at("dtype").get<std::string>(), what, name);
      // Integers only: a float (9e99) converted to an integer type is undefined behaviour.
      std::vector<int64_t> shape;
      std::vector<uint64_t> offsets;
      DLRUN_CHECK_INPUT(v.at("shape").is_array() && v.at("data_offsets").is_array(),
                        "{}: tensor '{}': shape and data_offsets must be lists", what, name);
      for (const auto& d : v.at("shape")) {
        const auto i = json_int64(d);
        DLRUN_CHECK_INPUT(i.has_value(), "{}: tensor '{}': a dimension of its shape is not an integer", what, name);
        shape.push_back(*i);
      }
      for (const auto& o : v.at("data_offsets")) {
        const auto u = json_uint64(o);
        DLRUN_CHECK_INPUT(u.has_value(), "{}: tensor '{}': data_offsets must be non-negative integers", what, name);
        offsets.push_back(*u);
      }
      DLRUN_CHECK_INPUT(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= data_size,
                        "{}: tensor '{}': data_offsets outside the file's {} data bytes", what, name, data_size);
      uint64_t numel = 1;
      for (int64_t d : shape) {
        DLRUN_CHECK_INPUT(d >= 0 && (d == 0 || numel <= data_size / static_cast<uint64_t>(d)),
                          "{}: tensor '{}': shape does not fit the file", what, name);
        numel *= static_cast<uint64_t>(d);
      }
      const uint64_t n = offsets[1] - offsets[0];
      DLRUN_CHECK_INPUT(numel * c10::elementSize(type) == n, "{}: tensor '{}': {} bytes for shape {} of {}", what,
                        name, n, fmt::format("{}", fmt::join(shape, "x")), c10::toString(type));
      auto t = torch::empty(shape, torch::TensorOptions().dtype(type));
      if (n > 0) std::memcpy(t.data_ptr(), data + offsets[0], n);
      found.emplace_back(offsets[0], name, std::move(t));
    } catch (const nlohmann::json::exception& e) {
      fail_input("{}: tensor '{}': malformed header entry ({})", what, name, e.what());
    }
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  TensorDict out;
  for (auto& [offset, name, t] : found) out.emplace_back(std::move(name), std::move(t));
  return out;
}

void write_safetensors(const std::string& path, const TensorDict& tensors,
                       const std::map<std::string, std::string>& metadata) {
  fsutil::write_file_atomic(path, safetensors_bytes(tensors, metadata));
}

}  // namespace dlrun::ckpt
