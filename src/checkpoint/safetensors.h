// The safetensors format (https://github.com/huggingface/safetensors), written directly:
// an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets},
// "__metadata__": {string: string}}, then the raw little-endian tensor bytes back to back.
// `dlrun export --format safetensors` uses it; safetensors.torch.load_file reads the result.
#pragma once

#include <map>
#include <string>

#include "checkpoint/checkpoint.h"

namespace dlrun::ckpt {

/// safetensors dtype name ("F32", "BF16", "I64", "BOOL", ...) of a scalar type; throws
/// dlrun::Error (exit 2) naming `tensor_name` for a type safetensors cannot hold.
std::string safetensors_dtype(c10::ScalarType type, const std::string& tensor_name);

/// The whole file as bytes. Tensors are written in order, contiguous, from host memory; the
/// header is padded with spaces to a multiple of 8 bytes so the data stays aligned.
std::string safetensors_bytes(const TensorDict& tensors, const std::map<std::string, std::string>& metadata = {});

/// Parse a whole safetensors file held in memory (any writer's: dlrun export,
/// safetensors.torch.save_file, Hugging Face checkpoints). Tensors come back in file order on
/// the CPU; `metadata` (when given) receives the "__metadata__" strings. The file is checked as
/// the reference implementation checks it, and refused (dlrun::Error, exit 2, naming `what` and
/// the tensor) for: a header over 100 MB, or that does not parse; a dtype dlrun cannot hold; a
/// tensor named twice; a shape that does not match its byte range; a range outside the file,
/// overlapping another, or leaving a gap; data after the last tensor.
TensorDict safetensors_from_bytes(const std::string& bytes, const std::string& what,
                                  std::map<std::string, std::string>* metadata = nullptr);

/// The same from the file `path`, each tensor read straight into its own memory: the file is
/// never held whole (a model's weights need their size once, not twice).
TensorDict read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

/// Whether `bytes` begin as a safetensors file does (a header length that fits, then '{').
bool looks_like_safetensors(const std::string& bytes);
/// The same for a file of `file_size` bytes whose first bytes (at least 10) are `head`.
bool looks_like_safetensors(const std::string& head, uint64_t file_size);

/// Write `path` atomically and durably (tmp file, fsync, rename).
void write_safetensors(const std::string& path, const TensorDict& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace dlrun::ckpt
