// The two gates before the fused kernels run (src/kernels/self_check.h): the capability check,
// fed the compute capabilities of the GPUs people rent and the architectures a build may carry;
// the self-check on the CPU (where the operators run dlrun's CPU kernels), its verdict under an
// injected kernel defect (DLRUN_FAULT=fused_mismatch), and what the models do then: fall back to
// the modules and give their outputs exactly, or fail with exit 1 under fused_conv_bn_relu: true.
#include <catch2/catch.hpp>

#include <torch/autograd.h>

#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "base/error.h"
#include "kernels/ops.h"
#include "kernels/self_check.h"
#include "models/model.h"
#include "support/capture.h"
#include "support/env.h"

using namespace dlrun;
using dlrun::testing::ScopedEnv;

namespace {

// What `cmake` makes of the default TORCH_CUDA_ARCH_LIST (cmake/Dependencies.cmake).
const char* kDefault = "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 compute_120";

// Forgets the process's self-checks and the policy when a test case ends.
struct FreshGate {
  FreshGate() { kernels::forget_self_checks(); }
  ~FreshGate() {
    kernels::forget_self_checks();
    kernels::set_on_mismatch(kernels::OnMismatch::kFallBack);
  }
};

}  // namespace

TEST_CASE("the capability check: which GPU code runs on which GPU", "[kernels][gpu_safety]") {
  struct Case {
    const char* gpu;
    int major, minor;
    const char* archs;
    bool runs;
    const char* image;  // the start of the verdict's image, or of its reason
  };
  const std::vector<Case> cases = {
      {"T4", 7, 5, kDefault, true, "sm_75 machine code"},
      {"A100", 8, 0, kDefault, true, "sm_80 machine code"},
      {"A10G", 8, 6, kDefault, true, "sm_86 machine code"},
      {"L4 / L40S (8.9: sm_86's machine code runs there)", 8, 9, kDefault, true, "sm_86 machine code"},
      {"H100", 9, 0, kDefault, true, "sm_90 machine code"},
      {"B200", 10, 0, kDefault, true, "sm_100 machine code"},
      {"B300 (10.3)", 10, 3, kDefault, true, "sm_100 machine code"},
      {"RTX 5090", 12, 0, kDefault, true, "sm_120 machine code"},
      {"a GPU newer than the build: PTX", 13, 0, kDefault, true, "compute_120 PTX"},
      {"P100: older than any", 6, 0, kDefault, false, "compute capability 6.0 is not among"},
      {"A100 on an H100-only build", 8, 0, "sm_90", false, "compute capability 8.0 is not among"},
      {"B200 on an H100-only build without PTX", 10, 0, "sm_90", false, "compute capability 10.0"},
      {"B200 on an H100 build with PTX", 10, 0, "sm_90 compute_90", true, "compute_90 PTX"},
      {"arch-specific sm_90a on H100", 9, 0, "sm_90a", true, "sm_90a machine code"},
      {"arch-specific sm_90a on a later 9.x", 9, 1, "sm_90a", false, "compute capability 9.1"},
      {"no GPU code at all", 9, 0, "", false, "this dlrun was built without GPU code"},
  };
  for (const auto& c : cases) {
    INFO(c.gpu << " (" << c.major << "." << c.minor << ") with \"" << c.archs << "\"");
    const auto v = kernels::fused_kernels_run_on(c.major, c.minor, c.archs);
    CHECK(v.runs == c.runs);
    CHECK_THAT(c.runs ? v.image : v.why, Catch::StartsWith(c.image));
  }
}

TEST_CASE("the self-check passes dlrun's CPU kernels and catches an injected defect", "[kernels][gpu_safety]") {
  for (const auto dtype : {at::kFloat, at::kDouble, at::kBFloat16}) {
    for (const bool channels_last : {false, true}) {
      INFO(c10::toString(dtype) << (channels_last ? " channels_last" : " contiguous"));
      const auto ok = kernels::self_check(at::kCPU, dtype, channels_last);
      CHECK(ok.passed);
      CHECK(ok.worst <= 1.0);
      CHECK(ok.seconds < 10);  // (what it costs is measured in docs/kernels.md, not here)
      CHECK(ok.device == "cpu");
      ScopedEnv defect("DLRUN_FAULT", "fused_mismatch");
      const auto bad = kernels::self_check(at::kCPU, dtype, channels_last);
      CHECK_FALSE(bad.passed);
      CHECK(bad.worst > 1.0);
      CHECK_THAT(bad.worst_in, Catch::Contains("output"));
      CHECK(bad.to_json()["values"]["fused"] != bad.to_json()["values"]["reference"]);
    }
  }
  // Tolerances scaled far below the tests' own: the float32 kernels and the reference differ by
  // rounding, and the check says so.
  CHECK_FALSE(kernels::self_check(at::kCPU, at::kFloat, false, 1e-9).passed);
}

TEST_CASE("a failed self-check: the model falls back to the modules, or the run fails with exit 1",
          "[kernels][gpu_safety]") {
  FreshGate fresh;
  ModelOptions o;
  o.name = "resnet18";
  o.in_channels = 3;
  o.num_classes = 5;
  o.stem = ResnetStem::kCifar;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const auto x = torch::randn({4, 3, 12, 12}, gen);
  auto forward = [&](bool fused) {
    auto model = models::build(o, 7, 12);
    model->use_fused_conv_bn_relu(fused);
    model->train();
    return model->forward(x);
  };
  const auto plain = forward(false);

  ScopedEnv defect("DLRUN_FAULT", "fused_mismatch");
  const auto before = kernels::fused_calls(c10::DeviceType::CPU);
  at::Tensor fell_back;
  const auto log = testing::capture_stderr([&] { fell_back = forward(true); });
  CHECK(kernels::fused_calls(c10::DeviceType::CPU) == before);  // no fused operator ran
  CHECK(torch::equal(fell_back, plain));                        // the modules' outputs, bit for bit
  CHECK_THAT(log, Catch::Contains("the fused BatchNorm kernels disagree with the reference on cpu (Float"));
  CHECK_THAT(log, Catch::Contains("fused: ") && Catch::Contains("reference: "));
  CHECK_THAT(log, Catch::Contains("this run uses the modules"));
  auto report = kernels::self_check_report();
  REQUIRE(report.size() == 1);  // once per device, dtype and memory format, not once per layer
  CHECK(report[0]["passed"] == false);
  CHECK(report[0]["dtype"] == "Float");
  // The next pass asks again and gets the same answer without a second check.
  const auto again = testing::capture_stderr([&] { forward(true); });
  CHECK(again.find("disagree") == std::string::npos);
  CHECK(kernels::self_check_report().size() == 1);

  kernels::forget_self_checks();
  kernels::set_on_mismatch(kernels::OnMismatch::kFail);
  try {
    forward(true);
    FAIL("a failed self-check under fused_conv_bn_relu: true trained on");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kRuntime);
    CHECK_THAT(std::string(e.what()), Catch::Contains("does not train on wrong kernels"));
  }

  // Operators that throw during the check (here: an input they refuse, as a kernel that cannot
  // launch on some GPU would) are a failed check, not a failed run, under auto.
  kernels::forget_self_checks();
  kernels::set_on_mismatch(kernels::OnMismatch::kFallBack);
  bool usable = true;
  const auto refused = testing::capture_stderr(
      [&] { usable = kernels::fused_checked(torch::zeros({2, 3, 4, 4}, torch::kInt32)); });
  CHECK_FALSE(usable);
  CHECK_THAT(refused, Catch::Contains("the fused BatchNorm kernels failed their self-check on cpu (Int"));
  report = kernels::self_check_report();
  REQUIRE(report.size() == 1);
  CHECK(report[0]["passed"] == false);
  CHECK(report[0]["worst"] == "inf");
  CHECK_THAT(report[0]["error"].get<std::string>(), Catch::Contains("floating"));

  // Without the defect the check passes and the fused operators run.
  unsetenv("DLRUN_FAULT");
  kernels::forget_self_checks();
  const auto fused_before = kernels::fused_calls(c10::DeviceType::CPU);
  const auto fused = forward(true);
  CHECK(kernels::fused_calls(c10::DeviceType::CPU) > fused_before);
  CHECK(torch::allclose(fused, plain, 1e-3, 1e-4));  // float rounding apart
  report = kernels::self_check_report();
  REQUIRE(report.size() == 1);
  CHECK(report[0]["passed"] == true);
}

namespace {

// dlrun's own CPU operators in the shape of cuDNN's fused BatchNorm-activation (self_check.h's
// BnActOp): what check_bn_act compares, where no cuDNN runs.
at::Tensor dlrun_bn_act(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& w, const at::Tensor& b,
                        at::Tensor& rm, at::Tensor& rv, double momentum, double eps) {
  return residual.defined() ? std::get<0>(kernels::bn_add_relu(x, residual, w, b, rm, rv, true, momentum, eps))
                            : std::get<0>(kernels::bn_relu(x, w, b, rm, rv, true, momentum, eps));
}

// An operator whose forward is right and whose backward throws, as a cuDNN that takes a call's
// forward and refuses its backward would.
struct ThrowingBackward : torch::autograd::Function<ThrowingBackward> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext*, const at::Tensor& out) {
    return {out.clone()};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list) {
    throw std::runtime_error("CUDNN_STATUS_NOT_SUPPORTED (a refused backward)\nmore lines");
  }
};

}  // namespace

TEST_CASE("the check of a fused BatchNorm-activation: a backward that throws or a mismatch is a verdict, not an "
          "exception", "[kernels][gpu_safety]") {
  const auto ok = kernels::check_bn_act(dlrun_bn_act, at::kCPU, at::kFloat, 64);
  CHECK(ok.passed);
  CHECK(ok.path == "cudnn");
  CHECK(ok.channels == 64);
  CHECK(ok.to_json()["channels"] == 64);

  kernels::BnActOp backward_throws = [](const at::Tensor& x, const at::Tensor& r, const at::Tensor& w,
                                        const at::Tensor& b, at::Tensor& rm, at::Tensor& rv, double m, double e) {
    return ThrowingBackward::apply(dlrun_bn_act(x, r, w, b, rm, rv, m, e))[0];
  };
  kernels::SelfCheck bad;
  REQUIRE_NOTHROW(bad = kernels::check_bn_act(backward_throws, at::kCPU, at::kFloat, 64));
  CHECK_FALSE(bad.passed);
  CHECK_THAT(bad.error, Catch::Contains("backward threw: CUDNN_STATUS_NOT_SUPPORTED (a refused backward)"));
  CHECK(bad.error.find("more lines") == std::string::npos);

  kernels::BnActOp forward_throws = [](const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                       at::Tensor&, at::Tensor&, double, double) -> at::Tensor {
    throw std::runtime_error("CUDNN_STATUS_BAD_PARAM");
  };
  const auto refused = kernels::check_bn_act(forward_throws, at::kCPU, at::kFloat, 64);
  CHECK_FALSE(refused.passed);
  CHECK_THAT(refused.error, Catch::Contains("forward threw: CUDNN_STATUS_BAD_PARAM"));

  kernels::BnActOp wrong = [](const at::Tensor& x, const at::Tensor& r, const at::Tensor& w, const at::Tensor& b,
                              at::Tensor& rm, at::Tensor& rv, double m, double e) {
    return dlrun_bn_act(x, r, w, b, rm, rv, m, e) * 1.05;
  };
  const auto mismatch = kernels::check_bn_act(wrong, at::kCPU, at::kFloat, 64);
  CHECK_FALSE(mismatch.passed);
  CHECK(mismatch.error.empty());
  CHECK_THAT(mismatch.worst_in, Catch::Contains("output"));
}

TEST_CASE("cuDNN's gate refuses per dtype and channel count, warns once, and the run goes on",
          "[kernels][gpu_safety]") {
  FreshGate fresh;
  int checks = 0;
  auto failing = [&] {
    ++checks;
    kernels::SelfCheck r;
    r.dtype = "BFloat16";
    r.device = "cuda:0";
    r.channels = 128;
    r.worst = std::numeric_limits<double>::infinity();
    r.error = "cudnn bn_relu backward threw: CUDNN_STATUS_NOT_SUPPORTED";
    return r;
  };
  auto passing = [&] {
    ++checks;
    kernels::SelfCheck r;
    r.passed = true;
    return r;
  };
  const at::Device cuda(at::kCUDA, 0);  // (the gate keys by device; nothing runs on it here)
  bool usable = true;
  const auto log = testing::capture_stderr([&] { usable = kernels::cudnn_gate(cuda, at::kBFloat16, 128, failing); });
  CHECK_FALSE(usable);
  CHECK_THAT(log, Catch::Contains("cuDNN refused BFloat16 at 128 channels on cuda:0: cudnn bn_relu backward threw: "
                                  "CUDNN_STATUS_NOT_SUPPORTED; dlrun's kernels run there"));
  CHECK(kernels::cudnn_refused(at::kBFloat16, 128));
  // Other channel counts and dtypes are asked about on their own.
  CHECK_FALSE(kernels::cudnn_refused(at::kBFloat16, 64));
  CHECK(kernels::cudnn_gate(cuda, at::kBFloat16, 64, passing));
  CHECK(kernels::cudnn_gate(cuda, at::kHalf, 128, passing));
  // Asked again: the verdict kept, no second check, no second warning.
  const auto again = testing::capture_stderr([&] { usable = kernels::cudnn_gate(cuda, at::kBFloat16, 128, failing); });
  CHECK_FALSE(usable);
  CHECK(again.find("refused") == std::string::npos);
  CHECK(checks == 3);
  // A check that throws anyway is a refusal too.
  CHECK_FALSE(kernels::cudnn_gate(cuda, at::kBFloat16, 256, []() -> kernels::SelfCheck {
    throw std::runtime_error("cudaErrorLaunchFailure");
  }));
  const auto lines = kernels::cudnn_refusals();
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Catch::StartsWith("cuDNN refused BFloat16 at 128, 256 channels: cudnn bn_relu backward threw"));
  const auto report = kernels::self_check_report();
  CHECK(report.size() == 4);
  CHECK(report[0]["path"] == "cudnn");
}
