// SHA-256 for checkpoint manifests: every file of a checkpoint is listed with its digest, and
// `verify` recomputes it. The hash itself is metrics::Sha256; this adds a file digest whose
// errors are bad input (exit 2) and that reports the size it read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "metrics/writers.h"

namespace dlrun::ckpt::detail {

using metrics::Sha256;
using metrics::sha256_hex;

/// Digest of a file's contents, read in chunks; `bytes` (if given) receives its size.
/// Throws dlrun::Error (exit 2) naming the file when it cannot be read.
std::string sha256_file(const std::string& path, uint64_t* bytes = nullptr);

}  // namespace dlrun::ckpt::detail
