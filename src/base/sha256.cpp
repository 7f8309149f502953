// SHA-256 through OpenSSL's EVP digest API (see sha256.h). OpenSSL uses the CPU's SHA
// extensions where present, about ten times the speed of a portable C implementation.
#include "base/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <vector>

#include "base/error.h"

namespace dlrun {

namespace {
std::atomic<uint64_t> g_bytes_hashed{0};
}  // namespace

uint64_t Sha256::bytes_hashed() { return g_bytes_hashed.load(); }

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
  std::string digest;  ///< set by hex()
  ~Impl() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  DLRUN_CHECK(impl_->ctx != nullptr && EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) == 1,
              ExitCode::kRuntime, "OpenSSL: cannot initialize a SHA-256 digest");
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, size_t n) {
  DLRUN_CHECK(impl_->digest.empty(), ExitCode::kRuntime, "Sha256::update after hex()");
  if (n == 0) return;
  g_bytes_hashed.fetch_add(n, std::memory_order_relaxed);
  DLRUN_CHECK(EVP_DigestUpdate(impl_->ctx, data, n) == 1, ExitCode::kRuntime, "OpenSSL: SHA-256 update failed");
}

std::string Sha256::hex() {
  if (!impl_->digest.empty()) return impl_->digest;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  DLRUN_CHECK(EVP_DigestFinal_ex(impl_->ctx, md, &len) == 1 && len == 32, ExitCode::kRuntime,
              "OpenSSL: SHA-256 finalization failed");
  impl_->digest = to_hex(std::string(reinterpret_cast<const char*>(md), len));
  return impl_->digest;
}

std::string sha256_hex(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.hex();
}

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 0xF]);
  }
  return out;
}

std::string hmac_sha256(const std::string& key, const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  DLRUN_CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
                   data.size(), md, &len) != nullptr && len == 32,
              ExitCode::kRuntime, "OpenSSL: HMAC-SHA-256 failed");
  return std::string(reinterpret_cast<const char*>(md), len);
}

namespace {

/// The one reading loop: the digest of `path` from `offset`, `length` bytes of it (to its end
/// when `length` is nullopt); `*bytes` gets how many were read.
std::string digest_file(const std::string& path, uint64_t offset, std::optional<uint64_t> length, uint64_t* bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_input("{}: cannot open: {}", path, std::strerror(errno));
  Sha256 h;
  std::vector<uint8_t> buf(1 << 20);
  uint64_t total = 0;
  while (!length || total < *length) {
    const size_t want = length ? static_cast<size_t>(std::min<uint64_t>(buf.size(), *length - total)) : buf.size();
    const ssize_t r = ::pread(fd, buf.data(), want, static_cast<off_t>(offset + total));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      fail_input("{}: read failed: {}", path, std::strerror(err));
    }
    if (r == 0) break;
    h.update(buf.data(), static_cast<size_t>(r));
    total += static_cast<uint64_t>(r);
  }
  ::close(fd);
  if (length && total < *length)
    fail_input("{}: ends at byte {}, before the {} bytes from offset {} to hash", path, offset + total, *length, offset);
  if (bytes) *bytes = total;
  return h.hex();
}

}  // namespace

std::string sha256_file(const std::string& path, uint64_t* bytes) { return digest_file(path, 0, std::nullopt, bytes); }

std::string sha256_file_range(const std::string& path, uint64_t offset, uint64_t length) {
  return digest_file(path, offset, length, nullptr);
}

}  // namespace dlrun
