// Fuzz target: the CIFAR-10 / CIFAR-100 binary readers. Input: one byte choosing 10 or 100
// classes, then the test file's bytes.
#include <cstdint>
#include <string>

#include "base/error.h"
#include "common.h"
#include "data/memory_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int classes = data[0] % 2 ? 100 : 10;
  const std::string& dir = dlrun::fuzz::scratch();
  dlrun::fuzz::write(dir + (classes == 10 ? "/test_batch.bin" : "/test.bin"),
                     std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  dlrun::DataOptions opts;
  opts.root = dir;
  try {
    auto ds = dlrun::data::open_cifar(opts, dlrun::data::Split::kEval, classes);
    for (int64_t i = 0; i < ds->size(); ++i) ds->get(i);
  } catch (const dlrun::Error&) {
  }
  return 0;
}
