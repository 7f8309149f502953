// The safetensors writer: header length, JSON header (dtype, shape, data_offsets, metadata),
// 8-byte alignment and raw little-endian data. (Python's safetensors reads these files in
// tests/checkpoint/python_check.py.)
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <map>

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

TEST_CASE("safetensors read back: every tensor, dtype and the metadata, in file order", "[ckpt]") {
  const auto model = dlrun::testing::sample_model(3);
  std::map<std::string, std::string> meta;
  const auto back = ckpt::safetensors_from_bytes(ckpt::safetensors_bytes(model, {{"step", "3"}}), "w.safetensors", &meta);
  CHECK(meta.at("step") == "3");
  REQUIRE(back.size() == model.size());
  for (size_t i = 0; i < model.size(); ++i) {
    INFO(model[i].first);
    CHECK(back[i].first == model[i].first);
    CHECK(back[i].second.scalar_type() == model[i].second.scalar_type());
    CHECK(torch::equal(back[i].second, model[i].second.contiguous()));
  }
  CHECK(ckpt::looks_like_safetensors(ckpt::safetensors_bytes(model)));
}

TEST_CASE("safetensors read: a hostile file is exit 2 naming the file and the tensor, never a crash", "[ckpt]") {
  auto file = [](const std::string& header, const std::string& data) {
    std::string out;
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
    return out + header + data;
  };
  auto refused = [](const std::string& bytes, const std::string& want) {
    INFO(want);
    try {
      ckpt::safetensors_from_bytes(bytes, "bad.safetensors");
      FAIL("accepted");
    } catch (const dlrun::Error& e) {
      CHECK(e.code() == dlrun::ExitCode::kBadInput);
      CHECK_THAT(e.message(), Catch::Contains("bad.safetensors") && Catch::Contains(want));
    }
  };
  const std::string four(16, '\0');
  refused("", "not a safetensors file");
  refused(file("{\"a\":1", ""), "not JSON");
  refused(file("[1,2]", ""), "not a safetensors file");
  refused(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10), "not a safetensors file");  // a header length past the end
  refused(file(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", "short"), "outside the file");
  refused(file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", four), "tensor 'w': 16 bytes for shape 3");
  refused(file(R"({"w":{"dtype":"C64","shape":[2],"data_offsets":[0,16]}})", four), "dtype 'C64'");
  refused(file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,16]}})", four), "shape does not fit");
  refused(file(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}})", four),
          "shape does not fit");
  refused(file(R"({"w":{"dtype":"F32","data_offsets":[0,16]}})", four), "malformed header entry");
  // weights_fuzz-style floats where integers belong: converting them would be undefined behaviour.
  refused(file(R"({"w":{"dtype":"F32","shape":[9e99,4],"data_offsets":[0,16]}})", four), "not an integer");
  refused(file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8e80]}})", four), "non-negative integers");
  refused(file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[-1,16]}})", four), "non-negative integers");
  refused(file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", four), "outside the file");
  CHECK(ckpt::safetensors_from_bytes(file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", four), "ok")
            .size() == 1);
}

namespace {

/// A safetensors file: header length, `header`, then `data`.
std::string safetensors_file(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return out + header + data;
}

/// Refused, in memory and from a file, with exit 2 naming the file and `want`.
void refused_both_ways(const std::string& bytes, const std::string& want) {
  INFO(want);
  dlrun::testing::ScratchDir dir;
  const std::string path = dir.write("bad.safetensors", bytes);
  for (int from_file = 0; from_file < 2; ++from_file) {
    try {
      if (from_file) ckpt::read_safetensors(path);
      else ckpt::safetensors_from_bytes(bytes, path);
      FAIL("accepted");
    } catch (const dlrun::Error& e) {
      CHECK(e.code() == dlrun::ExitCode::kBadInput);
      CHECK_THAT(e.message(), Catch::Contains("bad.safetensors") && Catch::Contains(want));
    }
  }
}

}  // namespace

TEST_CASE("safetensors read as the reference refuses: overlaps, duplicate names, gaps, trailing bytes",
          "[ckpt][safetensors]") {
  const std::string sixteen(16, '\x01');
  // Two tensors over the same 8 bytes: the reference's InvalidOffset.
  refused_both_ways(safetensors_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
                                     R"("c":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                                     sixteen),
                    "tensor 'b' (bytes 4 to 12) overlaps tensor 'a'");
  // A name twice: a JSON parser keeps the last, the reference refuses the file.
  refused_both_ways(safetensors_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                     R"("w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                     sixteen),
                    "tensor 'w' is named twice");
  // Bytes no tensor holds: between two tensors, before the first, after the last.
  refused_both_ways(safetensors_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                     sixteen),
                    "tensor 'b' begins at byte 8, leaving 4 bytes after tensor 'a'");
  refused_both_ways(safetensors_file(R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", sixteen),
                    "leaving 8 bytes after the header");
  refused_both_ways(safetensors_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", sixteen),
                    "8 bytes after the last tensor ('a')");
  // What every writer writes still reads, from memory and tensor by tensor from a file.
  const dlrun::ckpt::TensorDict model = {{"w", torch::arange(6, torch::kFloat32).reshape({2, 3})},
                                         {"b", torch::tensor({7, 8}, torch::kInt64)},
                                         {"empty", torch::zeros({0}, torch::kFloat32)}};
  const std::string bytes = ckpt::safetensors_bytes(model, {{"step", "3"}});
  dlrun::testing::ScratchDir dir;
  std::map<std::string, std::string> meta;
  const auto back = ckpt::read_safetensors(dir.write("ok.safetensors", bytes), &meta);
  REQUIRE(back.size() == model.size());
  for (size_t i = 0; i < back.size(); ++i) {
    CHECK(back[i].first == model[i].first);
    CHECK(torch::equal(back[i].second, model[i].second));
  }
  CHECK(meta.at("step") == "3");
}

TEST_CASE("a safetensors header over 100 MB is refused before it is read", "[ckpt][safetensors]") {
  // A sparse file: its header length says 100,000,001 bytes (valid JSON would be spaces), and
  // nothing is read or allocated for it.
  dlrun::testing::ScratchDir dir;
  std::string head = safetensors_file(std::string(1, '{'), "");
  const uint64_t len = 100'000'001;
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  const std::string path = dir.write("huge.safetensors", head);
  REQUIRE(::truncate(path.c_str(), static_cast<off_t>(8 + len + 16)) == 0);
  try {
    ckpt::read_safetensors(path);
    FAIL("accepted");
  } catch (const dlrun::Error& e) {
    CHECK(e.code() == dlrun::ExitCode::kBadInput);
    CHECK_THAT(e.message(), Catch::Contains("huge.safetensors") && Catch::Contains("100000001 bytes, over the 100000000"));
  }
}
