// SHA-256 (FIPS 180-4) for checkpoint manifests: every file of a checkpoint is listed with
// its digest, and `verify` recomputes it. Private to src/checkpoint; metrics::Sha256 in
// src/metrics is the project-wide one (the two may be merged later).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dlrun::ckpt::detail {

/// Incremental SHA-256: update() any number of times, then hex() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  /// Finalizes and returns the lower-case hex digest (64 characters).
  std::string hex();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;  ///< bytes fed so far
  bool done_ = false;
};

/// Digest of a buffer.
std::string sha256_hex(const void* data, size_t n);
/// Digest of a file's contents, read in chunks; `bytes` (if given) receives its size.
/// Throws dlrun::Error (exit 2) naming the file when it cannot be read.
std::string sha256_file(const std::string& path, uint64_t* bytes = nullptr);

}  // namespace dlrun::ckpt::detail
