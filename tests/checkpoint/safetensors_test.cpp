// The safetensors writer: header length, JSON header (dtype, shape, data_offsets, metadata),
// 8-byte alignment and raw little-endian data. (Python's safetensors reads these files in
// tests/checkpoint/python_check.py.)
#include <catch2/catch.hpp>

#include <cstring>

#include "base/error.h"
#include "checkpoint/safetensors.h"
#include "support/files.h"
#include "support/scratch_dir.h"
#include "support/snapshot.h"

namespace ckpt = dlrun::ckpt;

TEST_CASE("safetensors layout: header length, header, contiguous data", "[ckpt]") {
  const auto model = dlrun::testing::sample_model(3);
  const std::string bytes = ckpt::safetensors_bytes(model, {{"step", "3"}});
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<uint8_t>(bytes[i]);
  CHECK(len % 8 == 0);
  const auto header = nlohmann::json::parse(bytes.substr(8, len));
  CHECK(header["__metadata__"]["step"] == "3");

  uint64_t expected_offset = 0;
  for (const auto& [name, t] : model) {
    INFO(name);
    const auto& h = header.at(name);
    CHECK(h["shape"].get<std::vector<int64_t>>() == t.sizes().vec());
    const auto off = h["data_offsets"].get<std::vector<uint64_t>>();
    CHECK(off[0] == expected_offset);
    const auto c = t.contiguous();
    const uint64_t n = c.numel() * c.element_size();
    CHECK(off[1] - off[0] == n);
    CHECK(std::memcmp(bytes.data() + 8 + len + off[0], c.data_ptr(), n) == 0);
    expected_offset = off[1];
  }
  CHECK(bytes.size() == 8 + len + expected_offset);
  CHECK(header["conv.weight"]["dtype"] == "F32");
  CHECK(header["fc.bias"]["dtype"] == "F64");
  CHECK(header["half"]["dtype"] == "F16");
  CHECK(header["bf16"]["dtype"] == "BF16");
  CHECK(header["bn.num_batches_tracked"]["dtype"] == "I64");
  CHECK(header["bn.num_batches_tracked"]["shape"].empty());
  CHECK(header["ids"]["dtype"] == "I32");
  CHECK(header["bytes"]["dtype"] == "U8");
  CHECK(header["mask"]["dtype"] == "BOOL");
}

TEST_CASE("safetensors rejects dtypes it cannot hold, naming the tensor", "[ckpt]") {
  ckpt::TensorDict t = {{"z", torch::zeros({2}, torch::kComplexFloat)}};
  CHECK_THROWS_WITH(ckpt::safetensors_bytes(t), Catch::Contains("tensor 'z'"));
}
