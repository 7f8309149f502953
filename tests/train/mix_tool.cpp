// A test-only executable: dlrun's MixUp and CutMix (src/train/step/mixing.h) on batches Python
// gives it, so tests/train/mixing_torchvision.py can compare them with torchvision's.
//
//   dlrun_mix CASES.json IN.bin OUT.bin
//
// CASES.json: [{"kind": "mixup" or "cutmix", "lam": 0.3, "r_x": 5, "r_y": 2, "n": 4, "c": 3,
// "h": 8, "w": 8, "classes": 10, "offset": 0}, ...]; IN.bin holds each case's images (float32,
// n*c*h*w) then labels (int64, n) at its offset; OUT.bin gets each case's mixed images then
// targets (float32, n*classes); stdout a JSON list of each case's lambda and CutMix box.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

#include "train/step/mixing.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CASES.json IN.bin OUT.bin\n", argv[0]);
    return 2;
  }
  std::ifstream cases_file(argv[1]);
  const auto cases = nlohmann::json::parse(cases_file);
  std::ifstream in(argv[2], std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream out(argv[3], std::ios::binary);
  nlohmann::json report = nlohmann::json::array();
  for (const auto& c : cases) {
    const int64_t n = c["n"], ch = c["c"], h = c["h"], w = c["w"], classes = c["classes"];
    const size_t offset = c["offset"];
    const auto x = torch::from_blob(bytes.data() + offset, {n, ch, h, w}, torch::kFloat32).clone();
    const auto y = torch::from_blob(bytes.data() + offset + sizeof(float) * static_cast<size_t>(n * ch * h * w), {n},
                                    torch::kInt64)
                       .clone();
    dlrun::train::MixDraw d;
    if (c["kind"] == "cutmix") {
      d = dlrun::train::cutmix_box(c["lam"].get<double>(), c["r_x"].get<int64_t>(), c["r_y"].get<int64_t>(), h, w);
    } else {
      d.kind = dlrun::train::MixDraw::Kind::kMixUp;
      d.lam = c["lam"].get<double>();
    }
    const auto [mx, targets] = dlrun::train::apply_mix(d, x, y, classes);
    const auto xo = mx.contiguous(), to = targets.contiguous();
    out.write(reinterpret_cast<const char*>(xo.data_ptr<float>()), static_cast<std::streamsize>(xo.numel() * 4));
    out.write(reinterpret_cast<const char*>(to.data_ptr<float>()), static_cast<std::streamsize>(to.numel() * 4));
    report.push_back({{"lam", d.lam}, {"box", {d.x1, d.y1, d.x2, d.y2}}});
  }
  std::printf("%s\n", report.dump().c_str());
  return 0;
}
