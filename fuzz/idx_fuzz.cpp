// Fuzz target: the idx (MNIST / Fashion-MNIST) reader as training opens it. Input: the
// images file, "IDXSPLIT", the labels file; each may be gzipped (the reader detects it).
#include <cstdint>
#include <string>

#include "base/error.h"
#include "common.h"
#include "data/memory_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto [images, labels] = dlrun::fuzz::split(in, "IDXSPLIT");
  const std::string& dir = dlrun::fuzz::scratch();
  dlrun::fuzz::write(dir + "/t10k-images-idx3-ubyte", images);
  dlrun::fuzz::write(dir + "/t10k-labels-idx1-ubyte", labels);
  dlrun::DataOptions opts;
  opts.root = dir;
  try {
    auto ds = dlrun::data::open_idx(opts, dlrun::data::Split::kEval, "fashion_mnist");
    // Every sample the dataset claims must be readable.
    for (int64_t i = 0; i < ds->size(); ++i) ds->get(i);
  } catch (const dlrun::Error&) {
  }
  return 0;
}
