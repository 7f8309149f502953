// The tar member table (tar.h). Header fields are fixed-width ASCII in a 512-byte block: octal
// numbers NUL- or space-terminated, or base-256 (GNU) when the first byte has its top bit set.
#include "data/tar.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace dlrun::data {

namespace {

constexpr size_t kBlock = 512;
constexpr uint64_t kMaxExtended = 1 << 20;  // a long name or pax record set larger than this is refused

std::string field(const char* p, size_t n) { return std::string(p, strnlen(p, n)); }

/// An octal or base-256 number field; false when it is neither.
bool parse_number(const char* p, size_t n, uint64_t* out) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  if (u[0] & 0x80) {  // base-256: big-endian, top bit of the first byte is the marker (negative: refused)
    if (u[0] & 0x40) return false;
    uint64_t v = u[0] & 0x3f;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 55) return false;  // would overflow
      v = (v << 8) | u[i];
    }
    *out = v;
    return true;
  }
  size_t i = 0;
  while (i < n && p[i] == ' ') ++i;
  uint64_t v = 0;
  size_t digits = 0;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i, ++digits) {
    if (v >> 60) return false;
    v = v * 8 + static_cast<uint64_t>(p[i] - '0');
  }
  for (; i < n; ++i)
    if (p[i] != ' ' && p[i] != '\0') return false;
  *out = v;
  return digits > 0 || n == 0;
}

bool checksum_ok(const char* h) {
  uint64_t stored = 0;
  if (!parse_number(h + 148, 8, &stored)) return false;
  uint64_t u = 0;
  int64_t s = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const char c = (i >= 148 && i < 156) ? ' ' : h[i];
    u += static_cast<unsigned char>(c);
    s += static_cast<signed char>(c);
  }
  return stored == u || static_cast<int64_t>(stored) == s;  // some old writers summed signed chars
}

bool all_zero(const char* h) { return std::all_of(h, h + kBlock, [](char c) { return c == 0; }); }

/// A member path dlrun accepts: relative, no "..", no empty or NUL-bearing name.
void check_path(const std::string& path, const std::string& tar) {
  DLRUN_CHECK_INPUT(!path.empty(), "tar {}: a member has an empty name", tar);
  DLRUN_CHECK_INPUT(path.find('\0') == std::string::npos, "tar {}: member name with a NUL byte", tar);
  DLRUN_CHECK_INPUT(path[0] != '/', "tar {}: member {} has an absolute path (outside the sample key)", tar, path);
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    DLRUN_CHECK_INPUT(path.compare(start, end - start, "..") != 0,
                      "tar {}: member {} climbs out of the sample key with '..'", tar, path);
    start = end + 1;
  }
}

/// pax records: "LEN key=value\n" repeated. Returns path and size when present.
void parse_pax(const std::string& data, const std::string& tar, std::string* path, uint64_t* size, bool* has_size) {
  size_t pos = 0;
  while (pos < data.size()) {
    size_t sp = data.find(' ', pos);
    // At most 19 digits: a 20-digit length could wrap around and move `pos` backwards.
    DLRUN_CHECK_INPUT(sp != std::string::npos && sp > pos && sp - pos <= 19, "tar {}: malformed pax record at byte {}",
                      tar, pos);
    uint64_t len = 0;
    for (size_t i = pos; i < sp; ++i) {
      DLRUN_CHECK_INPUT(data[i] >= '0' && data[i] <= '9', "tar {}: malformed pax record length", tar);
      len = len * 10 + static_cast<uint64_t>(data[i] - '0');
    }
    DLRUN_CHECK_INPUT(len > sp - pos + 1 && len <= data.size() - pos && data[pos + len - 1] == '\n',
                      "tar {}: malformed pax record at byte {}", tar, pos);
    const std::string rec = data.substr(sp + 1, pos + len - 1 - (sp + 1));
    const size_t eq = rec.find('=');
    DLRUN_CHECK_INPUT(eq != std::string::npos, "tar {}: malformed pax record (no '=')", tar);
    const std::string key = rec.substr(0, eq), value = rec.substr(eq + 1);
    if (key == "path") {
      *path = value;
    } else if (key == "size") {
      uint64_t v = 0;
      DLRUN_CHECK_INPUT(!value.empty() && value.size() <= 19 &&
                            std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; }),
                        "tar {}: malformed pax size '{}'", tar, value);
      for (char c : value) v = v * 10 + static_cast<uint64_t>(c - '0');
      *size = v;
      *has_size = true;
    }
    pos += len;
  }
}

}  // namespace

std::vector<TarMember> scan_tar(const ReadAt& read, uint64_t file_size, const std::string& name) {
  std::vector<TarMember> out;
  uint64_t pos = 0;
  std::string long_name, pax_path;
  uint64_t pax_size = 0;
  bool pax_has_size = false;
  char h[kBlock];
  while (true) {
    // Every tar writer ends an archive with zero blocks; without them, a file cut at a member
    // boundary would look whole.
    DLRUN_CHECK_INPUT(pos < file_size, "tar {} is truncated: it ends at byte {} without the end-of-archive blocks",
                      name, pos);
    DLRUN_CHECK_INPUT(pos + kBlock <= file_size, "tar {} is truncated: a header at byte {} runs past its end ({} bytes)",
                      name, pos, file_size);
    read(pos, kBlock, h);
    if (all_zero(h)) break;  // end of archive
    DLRUN_CHECK_INPUT(checksum_ok(h), "tar {}: the header at byte {} has a bad checksum (not a tar, or corrupt)", name,
                      pos);
    uint64_t size = 0;
    DLRUN_CHECK_INPUT(parse_number(h + 124, 12, &size), "tar {}: the header at byte {} has a malformed size", name, pos);
    const char type = h[156];
    std::string path = field(h, 100);
    const std::string magic = field(h + 257, 6);
    if (magic == "ustar") {  // POSIX ustar: a prefix completes the name
      const std::string prefix = field(h + 345, 155);
      if (!prefix.empty()) path = prefix + "/" + path;
    }
    if (pax_has_size) size = pax_size;
    const uint64_t data = pos + kBlock;
    const std::string shown = !pax_path.empty() ? pax_path : !long_name.empty() ? long_name : path;
    DLRUN_CHECK_INPUT(size <= kMaxTarMember, "tar {}: member {} claims {} bytes (at most {} are accepted)", name, shown,
                      size, kMaxTarMember);
    DLRUN_CHECK_INPUT(data + size <= file_size, "tar {} is truncated: member {} needs {} bytes at byte {}, the file has {}",
                      name, shown, size, data, file_size);
    const uint64_t next = data + (size + kBlock - 1) / kBlock * kBlock;
    if (type == 'L' || type == 'x' || type == 'g' || type == 'K') {
      DLRUN_CHECK_INPUT(size <= kMaxExtended, "tar {}: an extended header at byte {} claims {} bytes", name, pos, size);
      std::string ext(size, '\0');
      if (size) read(data, size, ext.data());
      if (type == 'L') {
        long_name = field(ext.data(), ext.size());
      } else if (type == 'x') {
        parse_pax(ext, name, &pax_path, &pax_size, &pax_has_size);
      }  // 'g' (global pax) and 'K' (long link name): nothing dlrun uses
      pos = next;
      continue;
    }
    if (!pax_path.empty()) {
      path = pax_path;
    } else if (!long_name.empty()) {
      path = long_name;
    }
    long_name.clear();
    pax_path.clear();
    pax_has_size = false;
    if (type == '5') {  // a directory
      pos = next;
      continue;
    }
    DLRUN_CHECK_INPUT(type == '0' || type == '\0' || type == '7',
                      "tar {}: member {} is a {} (only regular files are accepted in a shard)", name, path,
                      type == '1' ? "hard link" : type == '2' ? "symbolic link" : "special file");
    check_path(path, name);
    out.push_back({path, data, size});
    pos = next;
  }
  return out;
}

std::vector<TarMember> scan_tar(const std::string& bytes, const std::string& name) {
  return scan_tar([&](uint64_t off, size_t n, char* buf) { std::memcpy(buf, bytes.data() + off, n); }, bytes.size(),
                  name);
}

std::pair<std::string, std::string> split_key(const std::string& member) {
  const size_t slash = member.rfind('/');
  const size_t dot = member.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos) return {member, ""};
  return {member.substr(0, dot), member.substr(dot + 1)};
}

void TarWriter::put(const char* p, size_t n) {
  sink_(p, n);
  bytes_ += n;
}

void TarWriter::add(const std::string& name, const void* data, size_t n) {
  DLRUN_CHECK(n <= kMaxTarMember, ExitCode::kRuntime, "tar member {} is too large ({} bytes)", name, n);
  char h[kBlock];
  std::memset(h, 0, kBlock);
  std::string prefix, base = name;
  if (name.size() > 100) {  // split at a '/' so that the name fits 100 bytes and the prefix 155
    size_t cut = name.rfind('/', 155);
    DLRUN_CHECK(cut != std::string::npos && name.size() - cut - 1 <= 100 && cut > 0, ExitCode::kBadInput,
                "tar member name too long for ustar: {}", name);
    prefix = name.substr(0, cut);
    base = name.substr(cut + 1);
  }
  std::memcpy(h, base.data(), base.size());
  std::snprintf(h + 100, 8, "%07o", 0644);
  std::snprintf(h + 108, 8, "%07o", 0);
  std::snprintf(h + 116, 8, "%07o", 0);
  std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(n));
  std::snprintf(h + 136, 12, "%011o", 0);
  h[156] = '0';
  std::memcpy(h + 257, "ustar", 6);
  std::memcpy(h + 263, "00", 2);
  std::memcpy(h + 345, prefix.data(), prefix.size());
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (size_t i = 0; i < kBlock; ++i) sum += static_cast<unsigned char>(h[i]);
  std::snprintf(h + 148, 8, "%06o", sum);  // six digits, NUL, then the space already there
  h[155] = ' ';
  put(h, kBlock);
  if (n) put(static_cast<const char*>(data), n);
  static const char zeros[kBlock] = {};
  if (n % kBlock) put(zeros, kBlock - n % kBlock);
}

void TarWriter::finish() {
  static const char zeros[kBlock] = {};
  put(zeros, kBlock);
  put(zeros, kBlock);
}

}  // namespace dlrun::data
