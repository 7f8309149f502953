// torch.save-compatible tensor dictionaries, through LibTorch's pickler. torch::pickle_save
// tags typed containers with torch.jit._pickle.restore_type_tag, which Python's
// torch.load(weights_only=True) (the default since torch 2.6) refuses; so the pickle is made
// here without aggregate tags and packed into the same zip archive torch.save writes.
#include "checkpoint/tensor_file.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <set>

#include "base/error.h"
#include "base/fsutil.h"

namespace dlrun::ckpt {

std::vector<char> tensors_to_bytes(const TensorDict& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (!seen.insert(name).second) fail_runtime("tensor file: duplicate tensor name '{}'", name);
    dict.insert(name, t.device().is_cpu() ? t.contiguous() : t.to(torch::kCPU).contiguous());
  }
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* p, size_t n) { pickle.insert(pickle.end(), p, p + n); },
                              /*tensor_table=*/nullptr, /*type_renamer=*/nullptr,
                              /*memoized_class_types=*/nullptr, /*get_tensor_id=*/nullptr,
                              /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::vector<char> out;
  out.reserve(pickle.size());
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, size_t n) {
      const char* c = static_cast<const char*>(p);
      out.insert(out.end(), c, c + n);
      return n;
    });
    torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  }  // the writer finishes the zip (central directory) when destroyed
  return out;
}

TensorDict tensors_from_bytes(const std::vector<char>& bytes, const std::string& what) {
  c10::IValue v;
  try {
    v = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    fail_input("{}: not a readable torch file: {}", what, e.what_without_backtrace());
  } catch (const std::exception& e) {  // LibTorch's reader also throws std:: errors on damaged archives
    fail_input("{}: not a readable torch file: {}", what, e.what());
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
  fsutil::write_file_atomic(path, std::string_view(bytes.data(), bytes.size()));
}

TensorDict load_tensor_file(const std::string& path) {
  const std::string data = fsutil::read_file(path);
  return tensors_from_bytes(std::vector<char>(data.begin(), data.end()), path);
}

}  // namespace dlrun::ckpt
