// dlrun_ckpt_fault: a tiny driver for the crash tests in tests/checkpoint/tests.cmake.
//   dlrun_ckpt_fault write DIR STEP   commit the known sample snapshot of STEP into DIR
//                                     (with DLRUN_FAULT=ckpt:<point> it aborts at that point)
//   dlrun_ckpt_fault check DIR STEP.. LATEST names a checkpoint that verifies, resume finds a
//                                     valid one, and each STEP verifies and loads exactly
//   dlrun_ckpt_fault dump STEP        the sample model tensors of STEP as JSON (for Python)
//   dlrun_ckpt_fault points           the fault point names, one per line
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "checkpoint/checkpoint.h"
#include "support/snapshot.h"

namespace ckpt = dlrun::ckpt;

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "dlrun_ckpt_fault: FAIL: %s\n", msg.c_str());
  return 1;
}

int check(const std::string& dir, int argc, char** argv) {
  const auto latest = ckpt::read_latest(dir);
  if (!latest) return fail(dir + ": no LATEST");
  const auto v = ckpt::verify(dir + "/" + *latest);
  if (!v.ok) return fail("LATEST names " + *latest + ", which does not verify: " + v.reason);
  const auto chosen = ckpt::latest_verified(dir, [](const std::string& p, const std::string& r) {
    std::printf("resume skips %s: %s\n", p.c_str(), r.c_str());
  });
  if (!chosen) return fail("no checkpoint verifies");
  std::printf("LATEST %s ok; resume would use %s\n", latest->c_str(), chosen->c_str());
  for (int i = 0; i < argc; ++i) {
    const int64_t step = std::stoll(argv[i]);
    const auto snap = ckpt::load(dir + "/" + ckpt::dir_name(step));
    const auto expected = dlrun::testing::sample_snapshot(step);
    for (const auto& [stem, tensors] : expected.tensor_files)
      if (!snap.tensor_files.count(stem) || !dlrun::testing::same_tensors(snap.tensor_files.at(stem), tensors))
        return fail(ckpt::dir_name(step) + ": " + stem + " differs from what was saved");
    if (snap.state != expected.state) return fail(ckpt::dir_name(step) + ": state.json differs");
    std::printf("%s intact\n", ckpt::dir_name(step).c_str());
  }
  return 0;
}

void dump(int64_t step) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();  // keeps the saved order
  for (const auto& [name, t] : dlrun::testing::sample_model(step)) {
    auto flat = t.contiguous().to(torch::kFloat64).flatten();
    std::vector<double> values(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
    j[name] = {{"dtype", c10::toString(t.scalar_type())}, {"shape", t.sizes().vec()}, {"values", values}};
  }
  std::printf("%s\n", j.dump().c_str());
}

int run(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "write" && argc == 4) {
    const auto path = ckpt::commit(dlrun::testing::sample_snapshot(std::stoll(argv[3])), argv[2]);
    std::printf("committed %s\n", path.c_str());
    return 0;
  }
  if (mode == "check" && argc >= 3) return check(argv[2], argc - 3, argv + 3);
  if (mode == "dump" && argc == 3) {
    dump(std::stoll(argv[2]));
    return 0;
  }
  if (mode == "points") {
    for (const auto& p : ckpt::fault_points()) std::printf("%s\n", p.c_str());
    return 0;
  }
  std::fprintf(stderr, "usage: dlrun_ckpt_fault write DIR STEP | check DIR [STEP...] | dump STEP | points\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const dlrun::Error& e) {
    std::fprintf(stderr, "dlrun_ckpt_fault: %s\n", e.render().c_str());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dlrun_ckpt_fault: %s\n", e.what());
    return 1;
  }
}
