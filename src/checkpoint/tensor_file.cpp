// torch.save-compatible tensor dictionaries, through LibTorch's pickler.
#include "checkpoint/tensor_file.h"

#include <set>

#include "base/error.h"
#include "checkpoint/fsutil.h"

namespace dlrun::ckpt {

std::vector<char> tensors_to_bytes(const TensorDict& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (!seen.insert(name).second) fail_runtime("tensor file: duplicate tensor name '{}'", name);
    dict.insert(name, t.device().is_cpu() ? t.contiguous() : t.to(torch::kCPU).contiguous());
  }
  return torch::pickle_save(c10::IValue(dict));
}

TensorDict tensors_from_bytes(const std::vector<char>& bytes, const std::string& what) {
  c10::IValue v;
  try {
    v = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    fail_input("{}: not a readable torch file: {}", what, e.what_without_backtrace());
  }
  DLRUN_CHECK_INPUT(v.isGenericDict(), "{}: expected a dict of tensors, found {}", what, v.tagKind());
  TensorDict out;
  for (const auto& item : v.toGenericDict()) {
    DLRUN_CHECK_INPUT(item.key().isString(), "{}: a key is not a string ({})", what, item.key().tagKind());
    const std::string name = item.key().toStringRef();
    DLRUN_CHECK_INPUT(item.value().isTensor(), "{}: entry '{}' is not a tensor ({})", what, name,
                      item.value().tagKind());
    out.emplace_back(name, item.value().toTensor());
  }
  return out;
}

void write_tensor_file(const std::string& path, const TensorDict& tensors) {
  const auto bytes = tensors_to_bytes(tensors);
  detail::write_file_atomic(path, std::string_view(bytes.data(), bytes.size()));
}

TensorDict load_tensor_file(const std::string& path) {
  const std::string data = detail::read_file(path);
  return tensors_from_bytes(std::vector<char>(data.begin(), data.end()), path);
}

}  // namespace dlrun::ckpt
