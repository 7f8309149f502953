// summary.json from the parts' totals (see summary.h).
#include "train/observe/summary.h"

#include <algorithm>
#include <cmath>

namespace dlrun::train {
namespace {

nlohmann::json or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
nlohmann::json or_null(const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); }

}  // namespace

nlohmann::json run_summary(const SummaryInputs& in) {
  const TrainState& st = *in.state;
  const double useful = static_cast<double>(st.step);
  const double computed = useful + static_cast<double>(st.steps_lost_total);
  const auto& m = in.meter;
  const auto phase = [&](int i) { return m.phases_known ? nlohmann::json(m.phases[i]) : nlohmann::json(nullptr); };
  nlohmann::json j = {
      {"status", in.status},
      {"steps", st.step},
      {"epochs", static_cast<double>(st.step) / static_cast<double>(in.steps_per_epoch)},
      {"final_train_loss", or_null(m.final_loss)},
      {"eval", in.eval},
      {"test", in.test},
      {"init", in.init},
      {"best", in.best},
      {"early_stop", in.early_stop},
      {"wall_time_s", in.wall_time_s},
      {"samples_per_s", static_cast<double>(m.samples) / std::max(1e-9, in.wall_time_s)},
      // Up to the last log line: data wait, forward, backward, optimizer (metrics.jsonl has each
      // interval).
      {"time_s", {{"data_wait", m.data_wait_s}, {"forward", phase(0)}, {"backward", phase(1)}, {"optimizer", phase(2)}}},
      {"peak_cuda_memory_mb", in.peak_cuda_memory_mb},
      {"fused_kernels", in.fused_kernels},
      {"profile_trace", or_null(in.profile_trace)},
      {"params_sha256", in.params_sha256},
      {"skipped_steps", st.skipped_steps},
      {"steps_lost", st.steps_lost_total},
      {"goodput", computed > 0 ? useful / computed : 1.0},
      {"preemption", st.preemption},
      {"resumed_from_step", st.resumed_from_step},
      {"device", in.device},
      {"world_size", in.world_size},
      {"version", in.version},
      {"wall_clock", in.wall_clock},
      {"cost", in.cost},
  };
  if (in.averages.is_object())
    for (const auto& [name, value] : in.averages.items()) j[name] = value;
  for (const auto& [key, value] : in.checkpointer.items()) j[key] = value;
  return j;
}

}  // namespace dlrun::train
