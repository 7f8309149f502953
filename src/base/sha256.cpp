// SHA-256 through OpenSSL's EVP digest API (see sha256.h). OpenSSL uses the CPU's SHA
// extensions where present, about ten times the speed of a portable C implementation.
#include "base/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
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
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(digits[md[i] >> 4]);
    out.push_back(digits[md[i] & 0xF]);
  }
  impl_->digest = out;
  return out;
}

std::string sha256_hex(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.hex();
}

std::string sha256_file(const std::string& path, uint64_t* bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_input("{}: cannot open: {}", path, std::strerror(errno));
  Sha256 h;
  std::vector<uint8_t> buf(1 << 20);
  uint64_t total = 0;
  for (;;) {
    ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      ::close(fd);
      fail_input("{}: read failed: {}", path, std::strerror(err));
    }
    if (r == 0) break;
    h.update(buf.data(), static_cast<size_t>(r));
    total += static_cast<uint64_t>(r);
  }
  ::close(fd);
  if (bytes) *bytes = total;
  return h.hex();
}

}  // namespace dlrun
