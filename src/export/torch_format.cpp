// --format torch: the weights as a torch.load-able dict of tensors, the format of a
// checkpoint's own model.pt (checkpoint/tensor_file.h).
#include <string>

#include "checkpoint/tensor_file.h"
#include "export/format.h"

namespace dlrun::exporting {

size_t write_as_torch(const std::string& path, const Weights& w) {
  ckpt::write_tensor_file(path, w.tensors);
  return w.tensors.size();
}

}  // namespace dlrun::exporting
