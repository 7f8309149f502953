// A test-only executable: dlrun's policy operations (src/data/image_ops.h) on images Python gives
// it, so tests/data/policy_ops.py can compare them with torchvision's.
//
//   dlrun_image_ops CASES.json IN.bin OUT.bin
//
// CASES.json: [{"op": "ShearX", "magnitude": 0.3, "c": 3, "h": 37, "w": 53, "offset": 0,
// "interpolation": "nearest" or "bilinear"}, ...];
// IN.bin holds each case's planar uint8 image at its offset; OUT.bin gets the outputs one after
// another, each c * h * w bytes.
//
//   dlrun_image_ops --tables KIND BINS H W
//       the magnitude table and sign of each op of policy KIND (trivial_augment, rand_augment,
//       auto_augment), as JSON {"ShearX": {"signed": true, "table": [...]}, ...}
//   dlrun_image_ops --draw KIND BINS NUM_OPS MAGNITUDE POLICY H W N
//       the operations of N samples (keys 0..N-1) as JSON [[["ShearX", 0.3], ...], ...]
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

#include "data/image_ops.h"
#include "data/policies.h"

namespace {

dlrun::data::PolicyKind kind_of(const std::string& s) {
  using dlrun::data::PolicyKind;
  return s == "trivial_augment" ? PolicyKind::kTrivialAugment
         : s == "rand_augment"  ? PolicyKind::kRandAugment
                                : PolicyKind::kAutoAugment;
}

int policy_modes(int argc, char** argv) {
  using namespace dlrun::data;
  const std::string mode = argv[1];
  PolicyConfig c;
  c.kind = kind_of(argv[2]);
  c.bins = std::stoll(argv[3]);
  nlohmann::json out;
  if (mode == "--tables" && argc == 6) {
    const int64_t h = std::stoll(argv[4]), w = std::stoll(argv[5]);
    for (int i = 0; i < kImageOps; ++i) {
      const OpSpace s = op_space(c.kind, static_cast<ImageOp>(i), c.bins, h, w);
      if (s.present) out[op_name(static_cast<ImageOp>(i))] = {{"signed", s.is_signed}, {"table", s.table}};
    }
  } else if (mode == "--draw" && argc == 10) {
    c.num_ops = std::stoll(argv[4]);
    c.magnitude = std::stoll(argv[5]);
    c.auto_policy = *dlrun::parse_enum<dlrun::AutoAugmentPolicy>(argv[6]);
    const int64_t h = std::stoll(argv[7]), w = std::stoll(argv[8]), n = std::stoll(argv[9]);
    out = nlohmann::json::array();
    for (int64_t k = 0; k < n; ++k) {
      SampleRng rng(sample_key(7, 0, k, kStreamPolicy));
      nlohmann::json ops = nlohmann::json::array();
      for (const OpDraw& d : draw_policy(c, rng, h, w)) ops.push_back({op_name(d.op), d.magnitude});
      out.push_back(ops);
    }
  } else {
    std::fprintf(stderr, "bad arguments for %s\n", mode.c_str());
    return 2;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && argv[1][0] == '-' && argv[1][1] == '-') return policy_modes(argc, argv);
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CASES.json IN.bin OUT.bin\n", argv[0]);
    return 2;
  }
  std::ifstream cases_file(argv[1]);
  const auto cases = nlohmann::json::parse(cases_file);
  std::ifstream in(argv[2], std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream out(argv[3], std::ios::binary);
  for (const auto& c : cases) {
    dlrun::data::U8Image img;
    img.c = c["c"];
    img.h = c["h"];
    img.w = c["w"];
    const size_t offset = c["offset"], n = static_cast<size_t>(img.c * img.h * img.w);
    img.px.assign(bytes.begin() + static_cast<std::ptrdiff_t>(offset),
                  bytes.begin() + static_cast<std::ptrdiff_t>(offset + n));
    const auto op = dlrun::data::parse_op(c["op"].get<std::string>());
    if (!op) {
      std::fprintf(stderr, "unknown op %s\n", c["op"].get<std::string>().c_str());
      return 2;
    }
    const auto sampling = c.value("interpolation", "nearest") == "bilinear" ? dlrun::data::Sampling::kBilinear
                                                                            : dlrun::data::Sampling::kNearest;
    dlrun::data::apply_op(*op, c["magnitude"].get<double>(), img, sampling);
    out.write(reinterpret_cast<const char*>(img.px.data()), static_cast<std::streamsize>(img.px.size()));
  }
  return 0;
}
