// The step-window profiler (see profiler.h).
#include "train/observe/profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>

#include "base/error.h"
#include "base/fsutil.h"
#include "base/log.h"

namespace dlrun::train {
namespace {
namespace prof = torch::profiler::impl;

std::set<prof::ActivityType> activities(bool cuda) {
  std::set<prof::ActivityType> a{prof::ActivityType::CPU};
  if (cuda) a.insert(prof::ActivityType::CUDA);
  return a;
}

}  // namespace

StepProfiler::StepProfiler(const ProfileOptions& o, const torch::Device& device, std::string dir, int rank)
    : o_(o), cuda_(device.is_cuda()), dir_(std::move(dir)), rank_(rank), start_(o.start_step) {}

void StepProfiler::plan(int64_t first, int64_t total) {
  if (o_.steps <= 0) return;
  if (o_.start_step >= total) {
    start_ = std::max<int64_t>(first, total - o_.steps);  // the last steps the run reaches
    log0::warn("profile.start_step={} is past the end of this run ({} steps): tracing steps {}..{} instead",
               o_.start_step, total, start_ + 1, std::min(total, start_ + o_.steps));
  } else if (o_.start_step < first) {
    done_ = true;
    log0::warn("profile: this segment starts after step {}, past profile.start_step={}: no trace in this segment "
               "(set profile.start_step={} or later to trace it)",
               first, o_.start_step, first);
  }
}

StepProfiler::~StepProfiler() {
  step_range_.reset();
  if (!active_) return;
  try {  // unwinding from a failure: stop the profiler, keep nothing
    torch::autograd::profiler::disableProfiler();
  } catch (const std::exception&) {
  }
}

void StepProfiler::before_step(int64_t done) {
  if (active_) {
    step_name_ = "ProfilerStep#" + std::to_string(done + 1);
    step_range_.emplace(at::RecordScope::USER_SCOPE);
    if (step_range_->isActive()) step_range_->before(step_name_, c10::ArrayRef<const c10::IValue>{});
    return;
  }
  if (o_.steps <= 0 || done_ || done != start_) return;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO, o_.record_shapes, o_.memory, o_.with_stack);
  try {
    torch::autograd::profiler::prepareProfiler(config, activities(cuda_));
    torch::autograd::profiler::enableProfiler(config, activities(cuda_));
  } catch (const std::exception& e) {
    log::warn("profile: the profiler could not start ({}); training goes on without a trace",
              std::string(e.what()).substr(0, std::string(e.what()).find('\n')));
    done_ = true;  // do not try again
    return;
  }
  active_ = true;
  first_ = done;
  log0::info("profile: tracing steps {}..{}", done + 1, done + o_.steps);
  before_step(done);  // the first step's range
}

void StepProfiler::after_step(int64_t done) {
  step_range_.reset();  // ends the step's range
  if (active_ && done - first_ >= o_.steps) stop(done);
}

void StepProfiler::finish(int64_t done) {
  if (active_) stop(done);
}

void StepProfiler::stop(int64_t done) {
  step_range_.reset();
  active_ = false;
  done_ = true;
  auto result = torch::autograd::profiler::disableProfiler();
  fsutil::make_dirs(dir_);
  const std::string path = fmt::format("{}/rank{}.step{}.pt.trace.json", dir_, rank_, first_ + 1);
  try {
    result->save(path);
  } catch (const std::exception& e) {
    throw Error(ExitCode::kRuntime, fmt::format("profile: writing the trace {} failed: {}", path, e.what()));
  }
  written_ = path;
  log0::info("profile: steps {}..{} traced into {} (open it at https://ui.perfetto.dev)", first_ + 1, done, path);
}

}  // namespace dlrun::train
