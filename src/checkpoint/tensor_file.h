// Tensor files of a checkpoint (model.pt, optim.pt, rng-rank*.pt): torch::pickle_save of an
// insertion-ordered c10::Dict<std::string, Tensor>, so Python's torch.load(path) (also with
// weights_only=True) returns a dict of tensors. Also used by `dlrun export --format torch`.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace dlrun::ckpt {

/// Serialize `tensors` (each saved contiguous, on the CPU) in torch.save's zip format.
/// Throws dlrun::Error (exit 1) on a duplicate name.
std::vector<char> tensors_to_bytes(const TensorDict& tensors);
/// Parse bytes written by tensors_to_bytes or by Python's torch.save({name: tensor}).
/// `what` names the source in errors. Throws dlrun::Error (exit 2) when it is not a dict of
/// tensors keyed by strings.
TensorDict tensors_from_bytes(const std::vector<char>& bytes, const std::string& what);
/// Write a tensor file atomically and durably (tmp file, fsync, rename, fsync dir).
void write_tensor_file(const std::string& path, const TensorDict& tensors);
/// Read and parse a tensor file; errors name `path`.
TensorDict load_tensor_file(const std::string& path);

}  // namespace dlrun::ckpt
