// What every checkpoint part shares (see part.h).
#include "checkpoint/part.h"

#include "base/error.h"

namespace dlrun::ckpt {

const TensorDict& tensor_file(const Snapshot& snap, const std::string& stem) {
  auto it = snap.tensor_files.find(stem);
  if (it == snap.tensor_files.end()) throw Error(ExitCode::kBadInput, "checkpoint has no " + stem + ".pt");
  return it->second;
}

}  // namespace dlrun::ckpt
