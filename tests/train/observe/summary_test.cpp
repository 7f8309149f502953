// summary.json as a pure function of the run's totals (src/train/observe/summary.h): every field a user
// reads, and null wherever a value is not known rather than a made-up 0.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "train/observe/summary.h"

using namespace dlrun;

namespace {

train::SummaryInputs inputs(const train::TrainState& st) {
  train::SummaryInputs in;
  in.status = "completed";
  in.state = &st;
  in.steps_per_epoch = 10;
  in.meter.final_loss = 0.25;
  in.meter.samples = 3200;
  in.meter.data_wait_s = 1.5;
  in.meter.phases = {2.0, 3.0, 0.5};
  in.eval = {{"accuracy", 0.9}};
  in.wall_time_s = 8;
  in.checkpointer = {{"checkpoint", "run/checkpoints/step-00000025"}, {"checkpoint_errors", 0}, {"remote", nullptr}};
  in.params_sha256 = "ab";
  in.peak_cuda_memory_mb = {{"allocated", 10.0}, {"reserved", 12.0}};
  in.fused_kernels = {{"enabled", true}, {"checks", nlohmann::json::array({{{"passed", true}}})}};
  in.profile_trace = "run/profile/trace.json";
  in.device = "cpu";
  in.version = "dlrun test";
  return in;
}

}  // namespace

TEST_CASE("summary.json holds what the parts measured", "[train][summary]") {
  train::TrainState st;
  st.step = 25, st.skipped_steps = 1, st.steps_lost_total = 5, st.resumed_from_step = 20;
  const auto j = train::run_summary(inputs(st));
  CHECK(j["status"] == "completed");
  CHECK(j["steps"] == 25);
  CHECK(j["epochs"] == 2.5);
  CHECK(j["final_train_loss"] == 0.25);
  CHECK(j["eval"]["accuracy"] == 0.9);
  CHECK(j["samples_per_s"] == 400.0);
  CHECK(j["time_s"]["data_wait"] == 1.5);
  CHECK(j["time_s"]["forward"] == 2.0);
  CHECK(j["time_s"]["optimizer"] == 0.5);
  CHECK(j["checkpoint"] == "run/checkpoints/step-00000025");
  CHECK(j["checkpoint_errors"] == 0);
  CHECK(j["goodput"] == Approx(25.0 / 30.0));
  CHECK(j["steps_lost"] == 5);
  CHECK(j["skipped_steps"] == 1);
  CHECK(j["resumed_from_step"] == 20);
  CHECK(j["params_sha256"] == "ab");
  CHECK(j["peak_cuda_memory_mb"]["reserved"] == 12.0);
  CHECK(j["fused_kernels"]["enabled"] == true);
  CHECK(j["fused_kernels"]["checks"][0]["passed"] == true);
  CHECK(j["profile_trace"] == "run/profile/trace.json");
  for (const char* key : {"wall_time_s", "preemption", "device", "world_size", "version", "remote"})
    CHECK(j.contains(key));
}

TEST_CASE("summary.json says null where a value is not known", "[train][summary]") {
  train::TrainState st;  // nothing trained: goodput 1, no resume
  auto in = inputs(st);
  in.meter.final_loss = std::numeric_limits<double>::quiet_NaN();  // never read
  in.meter.phases_known = false;                                    // steps replayed from a CUDA graph
  in.eval = nullptr;
  in.checkpointer["checkpoint"] = nullptr;
  in.params_sha256 = nullptr;
  in.peak_cuda_memory_mb = nullptr;
  in.profile_trace.clear();
  auto j = train::run_summary(in);
  CHECK(j["final_train_loss"].is_null());
  CHECK(j["eval"].is_null());
  CHECK(j["time_s"]["forward"].is_null());
  CHECK(j["time_s"]["backward"].is_null());
  CHECK(j["time_s"]["optimizer"].is_null());
  CHECK(j["time_s"]["data_wait"] == 1.5);  // measured on the host either way
  CHECK(j["checkpoint"].is_null());
  CHECK(j["params_sha256"].is_null());
  CHECK(j["peak_cuda_memory_mb"].is_null());
  CHECK(j["profile_trace"].is_null());
  CHECK(j["remote"].is_null());
  CHECK(j["preemption"].is_null());
  CHECK(j["resumed_from_step"] == -1);
  CHECK(j["goodput"] == 1.0);
  in.meter.final_loss = std::numeric_limits<double>::infinity();  // a loss that is not finite is not a number in JSON
  CHECK(train::run_summary(in)["final_train_loss"].is_null());
}
