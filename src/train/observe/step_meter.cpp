// Step metering (see step_meter.h).
#include "train/observe/step_meter.h"

#include <cmath>
#include <limits>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "distributed/replicas.h"
#include "kernels/device_query.h"
#include "metrics/nvml.h"

namespace dlrun::train {

StepMeter::StepMeter(const Config& cfg, const torch::Device& device, StepRunner& runner, TrainState& st,
                     metrics::Reporter& report, bool leader)
    : cfg_(cfg),
      device_(device),
      runner_(runner),
      st_(st),
      report_(report),
      leader_(leader),
      final_loss_(std::numeric_limits<double>::quiet_NaN()) {}

StepMeter::~StepMeter() = default;

void StepMeter::begin(double now) {
  last_log_mono_ = now;
  sum_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
}

void StepMeter::watch_gpu() {
  if (!device_.is_cuda()) return;
  const int index = device_.has_index() ? device_.index() : 0;
  std::string why;
  nvml_ = metrics::Nvml::open(cuda::pci_bus_id(index), static_cast<unsigned>(index), &why);
  if (nvml_) log0::info("GPU telemetry from NVML: {} (gpu_* in metrics.jsonl)", nvml_->name());
  else log0::info("no GPU telemetry: {}", why);
}

void StepMeter::record(const StepResult& r, int64_t done, double lr) {
  last_lr_ = lr;
  if (cfg_.train.nonfinite == NonfinitePolicy::kStop) {  // remember the first bad step on the device
    if (!first_bad_.defined())
      first_bad_ = torch::full({}, -1, torch::TensorOptions().dtype(torch::kLong).device(device_));
    first_bad_ = torch::where(first_bad_.lt(0).logical_and(r.nonfinite), done, first_bad_);
  }
  last_ = r.loss;
  if (r.skipped.defined()) {  // counted when the loop next reads from the device (settle_skips)
    sum_ = sum_ + torch::where(r.skipped, torch::zeros_like(r.loss), r.loss);
    const auto one = r.skipped.to(torch::kFloat64);
    pending_ = pending_.defined() ? pending_ + one : one;
  } else {
    sum_ = sum_ + r.loss;
  }
  ++steps_;
  samples_since_log_ += cfg_.data.batch_size;
  samples_ += cfg_.data.batch_size;
}

double StepMeter::samples_per_s(double now) const {
  return static_cast<double>(samples_since_log_) / std::max(1e-9, now - last_log_mono_);
}

void StepMeter::log(int64_t epoch, dist::Replicas& replicas) {
  const auto bad = first_bad_.defined() ? first_bad_.to(torch::kFloat64) : torch::full_like(sum_, -1);
  auto host = torch::stack({last_, sum_, bad}).to(torch::kCPU);  // one read for all three
  host = torch::cat({host, torch::full({1}, data_wait_s_, host.options())});
  // The mean loss over ranks, the first non-finite step of any, the slowest loader.
  const auto all = torch::stack(replicas.all_gather(host));  // (ranks, 4)
  host = torch::stack({all.select(1, 0).mean(), all.select(1, 1).mean(), all.select(1, 2).max(), all.select(1, 3).max()});
  if (host[2].item<double>() >= 0) fail_nonfinite(static_cast<int64_t>(host[2].item<double>()));
  settle_skips();
  final_loss_ = host[0].item<double>();
  const double now = mono_now();
  const double wait = host[3].item<double>();
  const double wait_frac = wait / std::max(1e-9, now - last_log_mono_);
  metrics::Event e{"train", st_.step};
  e.scalars = {{"loss", final_loss_},
               {"loss_avg", steps_ > skipped_ ? host[1].item<double>() / static_cast<double>(steps_ - skipped_) : NAN},
               {"lr", last_lr_},
               {"samples_per_s", samples_per_s(now)},
               {"data_wait_s", wait},
               {"data_wait_frac", wait_frac}};
  // Where this rank's steps spent their time (the loss read above waited for them on a GPU).
  const PhaseTimes phases = runner_.take_phase_times();
  if (phases[0] + phases[1] + phases[2] > 0) {  // steps replayed from a CUDA graph are not split
    e.scalars.push_back({"forward_s", phases[0]});
    e.scalars.push_back({"backward_s", phases[1]});
    e.scalars.push_back({"optimizer_s", phases[2]});
  }
  for (int i = 0; i < kPhases; ++i) phase_total_s_[i] += phases[i];
  data_wait_total_s_ += data_wait_s_;
  if (nvml_) {  // the leader's GPU, and what the caching allocator holds; a sensor the board lacks is left out
    if (const auto g = nvml_->sample())
      for (const auto& [name, v] : {std::pair<const char*, double>{"gpu_util_pct", g->util_pct},
                                    {"gpu_mem_util_pct", g->mem_util_pct},
                                    {"gpu_mem_used_mb", g->mem_used_mb},
                                    {"gpu_power_w", g->power_w},
                                    {"gpu_temp_c", g->temp_c}})
        if (std::isfinite(v)) e.scalars.push_back({name, v});
  }
  e.fields = {{"epoch", epoch}};
  report_.report(std::move(e));
  warn_if_loader_bound(wait, now - last_log_mono_, steps_);
  ++logs_;
  sum_.zero_();
  steps_ = 0;
  skipped_ = 0;
  samples_since_log_ = 0;
  data_wait_s_ = 0;
  last_log_mono_ = now;
}

// One warning per run when the step loop spends a large share of its time waiting for data,
// judged over a window long enough to mean something (kWindowSteps steps and kWindowS seconds
// after the first log interval, which includes the loader's start and the warm-up): a short
// run, or one slow interval, says nothing about the loader.
void StepMeter::warn_if_loader_bound(double wait_s, double interval_s, int64_t steps) {
  constexpr double kLoaderBound = 0.25, kWindowS = 5;
  constexpr int64_t kWindowSteps = 20;
  if (told_loader_bound_ || !leader_) return;
  if (logs_ == 0) return;  // (the first interval)
  window_wait_s_ += wait_s;
  window_s_ += interval_s;
  window_steps_ += steps;
  if (window_steps_ < kWindowSteps || window_s_ < kWindowS) return;
  const double frac = window_wait_s_ / std::max(1e-9, window_s_);
  const int64_t steps_seen = window_steps_;
  const double seconds_seen = window_s_;
  window_wait_s_ = window_s_ = 0;
  window_steps_ = 0;
  if (frac < kLoaderBound) return;
  told_loader_bound_ = true;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::string knob;
  if (cfg_.data.workers == 0)
    knob = "set data.workers (decoding and augmentation run inline in the step loop now)";
  else if (static_cast<unsigned>(cfg_.data.workers) < cores)
    knob = fmt::format("raise data.workers (now {}; this host has {} cores)", cfg_.data.workers, cores);
  else  // more workers than cores only share the same cores
    knob = fmt::format("data.workers ({}) already uses this host's {} cores: the input needs a faster source, "
                       "smaller or pre-resized images, or a host with more cores",
                       cfg_.data.workers, cores);
  if (device_.is_cuda() && !cfg_.data.device_resident)
    knob += "; or keep an in-memory dataset on the GPU (data.device_resident: true)";
  log0::warn("the data loader is the bottleneck: the step loop waited for batches {:.0f}% of the time over the last "
             "{} steps ({:.0f} s); {} (data_wait_frac in metrics.jsonl)",
             100 * frac, steps_seen, seconds_seen, knob);
}

// Skipped steps are decided on the device; the host counts them when it reads anyway (a
// metrics line, a save, the end), and reports them then: one `skip` event per read.
void StepMeter::settle_skips() {
  if (!pending_.defined()) return;
  const auto n = static_cast<int64_t>(std::llround(pending_.item<double>()));
  pending_.zero_();
  if (n == 0) return;
  st_.skipped_steps += n;
  skipped_ += n;
  std::string reason = runner_.skip_reason();
  if (runner_.precision().scaler().active())
    reason += fmt::format("; loss scale now {}", runner_.precision().scaler().scale_value());
  metrics::Event e{"skip", st_.step};
  e.fields = {{"reason", reason}, {"steps", n}, {"skipped_steps", st_.skipped_steps}};
  log::warn("{} update(s) skipped up to step {}: {}", n, st_.step, reason);
  report_.report(std::move(e));
}

void StepMeter::check_finite() {
  settle_skips();
  if (!first_bad_.defined()) return;
  const int64_t bad = first_bad_.item<int64_t>();
  if (bad >= 0) fail_nonfinite(bad);
}

void StepMeter::fail_nonfinite(int64_t step) const {
  throw Error(ExitCode::kRuntime,
              fmt::format("step {}: the training loss or a gradient is not finite (inf or NaN); stopping "
                          "(train.nonfinite: stop)",
                          step),
              "lower optim.lr, set train.clip_grad_norm, or train.nonfinite: skip to skip such steps; checkpoints "
              "written before step " + std::to_string(step) + " are unaffected");
}

double StepMeter::read_last_loss() {
  if (last_.defined()) final_loss_ = last_.item<double>();
  return final_loss_;
}

StepMeter::Totals StepMeter::totals() const {
  return {final_loss_, samples_, data_wait_total_s_, phase_total_s_, !runner_.graph_captured()};
}

}  // namespace dlrun::train
