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
//       the operations of N samples (keys 0..N-1) as JSON [[["ShearX", 0.3], ...], ...] (augmix:
//       its chains' operations one after another, at severity 3, width 3, depth 1 to 3)
//   dlrun_image_ops --augmix SEVERITY WIDTH DEPTH ALPHA CASES.json IN.bin OUT.bin
//       each case's image through AugMix as sample "key" (the case's interpolation), and its
//       draws on stdout: [{"original": m0, "mixed": m1, "shares": [...], "chains": [[[op, m], ...]]}]
//   dlrun_image_ops --jitter B C S H N
//       color_jitter's operations for N samples, as --draw writes them
//
// A case with "ops": [[op, magnitude], ...] applies those in order instead of "op".
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
         : s == "augmix"        ? PolicyKind::kAugMix
                                : PolicyKind::kAutoAugment;
}

nlohmann::json ops_json(const std::vector<dlrun::data::OpDraw>& ops) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& d : ops) out.push_back({dlrun::data::op_name(d.op), d.magnitude});
  return out;
}

dlrun::data::Sampling sampling_of(const nlohmann::json& c) {
  return c.value("interpolation", "nearest") == "bilinear" ? dlrun::data::Sampling::kBilinear
                                                           : dlrun::data::Sampling::kNearest;
}

/// The cases' images, one at a time: fn(case, image) turns each into its output, written to OUT.
template <typename Fn>
int each_case(const char* cases_path, const char* in_path, const char* out_path, Fn fn) {
  std::ifstream cases_file(cases_path);
  const auto cases = nlohmann::json::parse(cases_file);
  std::ifstream in(in_path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream out(out_path, std::ios::binary);
  for (const auto& c : cases) {
    dlrun::data::U8Image img;
    img.c = c["c"];
    img.h = c["h"];
    img.w = c["w"];
    const size_t offset = c["offset"], n = static_cast<size_t>(img.c * img.h * img.w);
    img.px.assign(bytes.begin() + static_cast<std::ptrdiff_t>(offset),
                  bytes.begin() + static_cast<std::ptrdiff_t>(offset + n));
    if (!fn(c, img)) return 2;
    out.write(reinterpret_cast<const char*>(img.px.data()), static_cast<std::streamsize>(img.px.size()));
  }
  return 0;
}

int augmix_mode(char** argv) {
  using namespace dlrun::data;
  PolicyConfig pc;
  pc.kind = PolicyKind::kAugMix;
  pc.severity = std::stoll(argv[2]);
  pc.width = std::stoll(argv[3]);
  pc.depth = std::stoll(argv[4]);
  pc.alpha = std::stod(argv[5]);
  nlohmann::json draws = nlohmann::json::array();
  const int rc = each_case(argv[6], argv[7], argv[8], [&](const nlohmann::json& c, U8Image& img) {
    SampleRng rng(sample_key(7, 0, c["key"].get<int64_t>(), kStreamPolicy));
    const AugMixDraw d = draw_augmix(pc, rng, img.h, img.w);
    nlohmann::json chains = nlohmann::json::array();
    for (const auto& chain : d.chains) chains.push_back(ops_json(chain));
    draws.push_back({{"original", d.original}, {"mixed", d.mixed}, {"shares", d.shares}, {"chains", chains}});
    apply_augmix(d, img, sampling_of(c));
    return true;
  });
  std::printf("%s\n", draws.dump().c_str());
  return rc;
}

int policy_modes(int argc, char** argv) {
  using namespace dlrun::data;
  const std::string mode = argv[1];
  if (mode == "--augmix" && argc == 9) return augmix_mode(argv);
  PolicyConfig c;
  if (mode == "--jitter" && argc == 7) {
    c.jitter_values = {std::stod(argv[2]), std::stod(argv[3]), std::stod(argv[4]), std::stod(argv[5])};
    nlohmann::json out = nlohmann::json::array();
    for (int64_t k = 0; k < std::stoll(argv[6]); ++k) {
      SampleRng rng(sample_key(7, 0, k, kStreamColorJitter));
      out.push_back(ops_json(draw_color_jitter(c, rng)));
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
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
      std::vector<OpDraw> ops = draw_policy(c, rng, h, w);
      if (c.kind == PolicyKind::kAugMix)
        for (const auto& chain : draw_augmix(c, rng, h, w).chains) ops.insert(ops.end(), chain.begin(), chain.end());
      out.push_back(ops_json(ops));
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
  return each_case(argv[1], argv[2], argv[3], [](const nlohmann::json& c, dlrun::data::U8Image& img) {
    nlohmann::json ops = c.contains("ops") ? c["ops"] : nlohmann::json::array({nlohmann::json::array({c["op"], c["magnitude"]})});
    for (const auto& step : ops) {
      const auto op = dlrun::data::parse_op(step[0].get<std::string>());
      if (!op) {
        std::fprintf(stderr, "unknown op %s\n", step[0].get<std::string>().c_str());
        return false;
      }
      dlrun::data::apply_op(*op, step[1].get<double>(), img, sampling_of(c));
    }
    return true;
  });
}
