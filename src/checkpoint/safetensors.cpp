// safetensors serialization, written from the format description (header length, JSON
// header, raw data); see safetensors.h.
#include "checkpoint/safetensors.h"

#include <fmt/ranges.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

#include "base/endian.h"
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
  DLRUN_CHECK(host_is_little_endian(), ExitCode::kRuntime, "safetensors export needs a little-endian host");

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

/// The header's largest size, as the reference implementation (safetensors' MAX_HEADER_SIZE)
/// refuses a larger one: a header is a few kilobytes per thousand tensors.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

/// A tensor of the header: what it is and where its bytes lie in the data after the header.
struct TensorEntry {
  std::string name;
  c10::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

/// A tensor named twice in the header (the reference refuses the file; a JSON parser keeps
/// the last).
struct DuplicateName {
  std::string name;
};

/// The header `text` parsed and checked as the reference implementation checks it, for
/// `data_size` bytes of data after it: the tensors in data order, covering every data byte once
/// -- no tensor named twice, no two overlapping, no gap between them, none past the data and no
/// data after the last. Exit 2 naming `what` and the tensor otherwise.
std::vector<TensorEntry> read_header(const std::string& text, uint64_t data_size, const std::string& what,
                               std::map<std::string, std::string>* metadata) {
  nlohmann::json header;
  try {
    std::set<std::string> names;
    header = nlohmann::json::parse(text, [&names](int depth, nlohmann::json::parse_event_t event, nlohmann::json& v) {
      if (depth > 4) throw std::runtime_error("nested more than 4 levels deep");
      if (event == nlohmann::json::parse_event_t::key && depth == 1 && !names.insert(v.get<std::string>()).second)
        throw DuplicateName{v.get<std::string>()};
      return true;
    });
  } catch (const DuplicateName& d) {
    fail_input("{}: tensor '{}' is named twice in the safetensors header", what, d.name);
  } catch (const std::exception& e) {
    fail_input("{}: the safetensors header is not JSON: {}", what, e.what());
  }
  DLRUN_CHECK_INPUT(header.is_object(), "{}: the safetensors header is not a JSON object", what);
  std::vector<TensorEntry> entries;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      if (metadata && v.is_object())
        for (const auto& [k, m] : v.items())
          if (m.is_string()) (*metadata)[k] = m.get<std::string>();
      continue;
    }
    try {
      TensorEntry e{name, scalar_type_of(v.at("dtype").get<std::string>(), what, name), {}, 0, 0};
      // Integers only: a float (9e99) converted to an integer type is undefined behaviour.
      std::vector<uint64_t> offsets;
      DLRUN_CHECK_INPUT(v.at("shape").is_array() && v.at("data_offsets").is_array(),
                        "{}: tensor '{}': shape and data_offsets must be lists", what, name);
      for (const auto& d : v.at("shape")) {
        const auto i = json_int64(d);
        DLRUN_CHECK_INPUT(i.has_value(), "{}: tensor '{}': a dimension of its shape is not an integer", what, name);
        e.shape.push_back(*i);
      }
      for (const auto& o : v.at("data_offsets")) {
        const auto u = json_uint64(o);
        DLRUN_CHECK_INPUT(u.has_value(), "{}: tensor '{}': data_offsets must be non-negative integers", what, name);
        offsets.push_back(*u);
      }
      DLRUN_CHECK_INPUT(offsets.size() == 2 && offsets[0] <= offsets[1] && offsets[1] <= data_size,
                        "{}: tensor '{}': data_offsets outside the file's {} data bytes", what, name, data_size);
      e.begin = offsets[0];
      e.end = offsets[1];
      uint64_t numel = 1;
      for (int64_t d : e.shape) {
        DLRUN_CHECK_INPUT(d >= 0 && (d == 0 || numel <= data_size / static_cast<uint64_t>(d)),
                          "{}: tensor '{}': shape does not fit the file", what, name);
        numel *= static_cast<uint64_t>(d);
      }
      const uint64_t n = e.end - e.begin;
      DLRUN_CHECK_INPUT(numel * c10::elementSize(e.type) == n, "{}: tensor '{}': {} bytes for shape {} of {}", what,
                        name, n, fmt::format("{}", fmt::join(e.shape, "x")), c10::toString(e.type));
      entries.push_back(std::move(e));
    } catch (const nlohmann::json::exception& e) {
      fail_input("{}: tensor '{}': malformed header entry ({})", what, name, e.what());
    }
  }
  // Data order (the header's key order is not kept by every writer), then every byte once.
  std::stable_sort(entries.begin(), entries.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t at = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& e : entries) {
    DLRUN_CHECK_INPUT(e.begin >= at, "{}: tensor '{}' (bytes {} to {}) overlaps tensor '{}' (which ends at {})", what,
                      e.name, e.begin, e.end, previous ? previous->name : "", at);
    DLRUN_CHECK_INPUT(e.begin == at, "{}: tensor '{}' begins at byte {}, leaving {} bytes after {} that no tensor holds",
                      what, e.name, e.begin, e.begin - at,
                      previous ? fmt::format("tensor '{}'", previous->name) : std::string("the header"));
    at = e.end;
    previous = &e;
  }
  DLRUN_CHECK_INPUT(at == data_size, "{}: {} bytes after the last tensor{} that no tensor holds", what, data_size - at,
                    previous ? fmt::format(" ('{}')", previous->name) : std::string());
  return entries;
}

/// The header length of a file whose first bytes are `head` and whose size is `file_size`,
/// checked (exit 2 naming `what`).
uint64_t checked_header_length(const std::string& head, uint64_t file_size, const std::string& what) {
  DLRUN_CHECK_INPUT(looks_like_safetensors(head, file_size),
                    "{}: not a safetensors file (no header length and JSON header)", what);
  const uint64_t len = header_length(head);
  DLRUN_CHECK_INPUT(len <= kMaxHeaderBytes, "{}: the safetensors header is {} bytes, over the {} safetensors allows",
                    what, len, kMaxHeaderBytes);
  return len;
}

}  // namespace

bool looks_like_safetensors(const std::string& head, uint64_t file_size) {
  if (head.size() < 10 || file_size < 10) return false;
  const uint64_t len = header_length(head);
  return len >= 2 && len <= file_size - 8 && head[8] == '{';
}

bool looks_like_safetensors(const std::string& bytes) { return looks_like_safetensors(bytes, bytes.size()); }

TensorDict safetensors_from_bytes(const std::string& bytes, const std::string& what,
                                  std::map<std::string, std::string>* metadata) {
  const uint64_t len = checked_header_length(bytes, bytes.size(), what);
  const uint64_t data_size = bytes.size() - 8 - len;
  const char* data = bytes.data() + 8 + len;
  TensorDict out;
  for (auto& e : read_header(bytes.substr(8, len), data_size, what, metadata)) {
    auto t = torch::empty(e.shape, torch::TensorOptions().dtype(e.type));
    if (e.end > e.begin) std::memcpy(t.data_ptr(), data + e.begin, e.end - e.begin);
    out.emplace_back(std::move(e.name), std::move(t));
  }
  return out;
}

TensorDict read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DLRUN_CHECK_INPUT(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  DLRUN_CHECK_INPUT(::fstat(fd, &st) == 0 && S_ISREG(st.st_mode), "{}: not a regular file", path);
  const auto file_size = static_cast<uint64_t>(st.st_size);
  // Exactly `n` bytes at `offset` into `to`, or exit 2 (a file shorter than it was: truncated
  // while being read).
  auto read_at = [&](void* to, uint64_t n, uint64_t offset) {
    auto* p = static_cast<char*>(to);
    while (n > 0) {
      const ssize_t got = ::pread(fd, p, std::min<uint64_t>(n, uint64_t{1} << 30), static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      DLRUN_CHECK_INPUT(got > 0, "{}: cannot read {} bytes at {}: {}", path, n, offset,
                        got < 0 ? std::strerror(errno) : "the file ends there");
      p += got, n -= static_cast<uint64_t>(got), offset += static_cast<uint64_t>(got);
    }
  };
  std::string head(static_cast<size_t>(std::min<uint64_t>(file_size, 16)), '\0');
  read_at(head.data(), head.size(), 0);
  const uint64_t len = checked_header_length(head, file_size, path);
  std::string text(static_cast<size_t>(len), '\0');
  read_at(text.data(), len, 8);
  TensorDict out;
  // Each tensor is read straight into its own memory: the file is never held whole.
  for (auto& e : read_header(text, file_size - 8 - len, path, metadata)) {
    auto t = torch::empty(e.shape, torch::TensorOptions().dtype(e.type));
    if (e.end > e.begin) read_at(t.data_ptr(), e.end - e.begin, 8 + len + e.begin);
    out.emplace_back(std::move(e.name), std::move(t));
  }
  return out;
}

void write_safetensors(const std::string& path, const TensorDict& tensors,
                       const std::map<std::string, std::string>& metadata) {
  fsutil::write_file_atomic(path, safetensors_bytes(tensors, metadata));
}

}  // namespace dlrun::ckpt
