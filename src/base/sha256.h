// SHA-256, from OpenSSL's libcrypto (EVP interface): checkpoint manifests hash every file on
// save, resume and verify, and params_sha256 fingerprints a model, so the speed of this hash
// bounds how fast a preempted run can commit (docs/benchmarks.md has the figures). HMAC-SHA-256
// signs the S3 client's requests (remote/sigv4.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dlrun {

/// Incremental SHA-256. update() any number of times, then hex() once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  void update(const void* data, size_t n);
  /// Finishes the digest: lower-case hex. A second call returns the same digest.
  std::string hex();
  /// Bytes hashed by every Sha256 of this process so far: how tests check that a checkpoint
  /// is hashed once, not twice, on its way through save, retention and resume.
  static uint64_t bytes_hashed();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Digest of a buffer, lower-case hex.
std::string sha256_hex(const void* data, size_t n);

/// HMAC-SHA-256 of `data` under `key`: the 32 raw bytes (AWS Signature Version 4 chains them).
std::string hmac_sha256(const std::string& key, const std::string& data);

/// Bytes as lower-case hex.
std::string to_hex(const std::string& bytes);

/// Digest of a file's contents, read in 1 MiB chunks; `bytes` (if given) receives the size.
/// Throws dlrun::Error (exit 2) naming the file when it cannot be read.
std::string sha256_file(const std::string& path, uint64_t* bytes = nullptr);

/// Digest of bytes [offset, offset + length) of a file (one part of a multipart upload).
/// Throws dlrun::Error (exit 2) naming the file when it cannot be read or ends before them.
std::string sha256_file_range(const std::string& path, uint64_t offset, uint64_t length);

}  // namespace dlrun
