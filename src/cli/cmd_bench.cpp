// `dlrun bench ckpt [--model resnet50] [--repeat N] [--dir DIR] [--json]`
// Measures what a checkpoint costs the training loop: the stall (copying model + optimizer
// state to host memory at the step boundary) and the background write (serialize, hash,
// fsync, commit), for a model's full training state (weights, SGD momentum, RNG).
//
// `dlrun bench memory [--model resnet50] [--batch N] [--image-size S] [--checkpointing MODE]
//                     [--amp off|bf16|fp16] [--channels-last] [--device D] [--repeat N]
//                     [--max-batch] [--json]`
// What a training step (forward, loss, backward, SGD update) of synthetic images costs in
// memory and time under one activation-checkpointing mode: the peak memory a step adds, after
// a first one has made the optimizer state (the peak of bytes held by tensors over what they held before it: on CUDA from the
// caching allocator's statistics, on the CPU from a counting allocator; oneDNN's own
// scratch buffers are not tensors and not counted), the median step time after it, and with
// --max-batch (CUDA) the largest batch that fits.
#include <CLI/CLI.hpp>

#include <c10/core/CPUAllocator.h>
#include <unistd.h>

#include <cstdlib>

#include <mutex>
#include <unordered_map>

#include <algorithm>
#include <filesystem>

#include "base/clock.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include <fmt/ranges.h>

#include "cli/app.h"
#include "models/model.h"
#include "models/recompute.h"
#include "train/amp.h"
#include "train/components.h"
#include "train/device.h"
#include "train/optim.h"
#include "train/resume.h"
#include "train/step.h"

#ifdef DLRUN_TORCH_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace fs = std::filesystem;

namespace dlrun::cli {
namespace {

struct BenchCkptOptions {
  std::string model = "resnet50";
  int repeat = 3;
  std::string dir;
  std::string device = "auto";
  bool json = false;
};

void bench_ckpt(const BenchCkptOptions& o) {
  Config cfg;
  cfg.model.name = o.model;
  cfg.model.in_channels = 3;
  cfg.model.num_classes = 1000;
  cfg.optim.name = OptimName::kSgd;
  cfg.data.name = "synthetic";
  cfg.run.device = o.device;
  auto c = train::build_components(cfg, train::place(cfg), train::Purpose::kBench);
  auto& model = c.model;
  auto& optim = c.optimizer;
  // One step so the optimizer has its momentum buffers (the state a real checkpoint holds).
  for (auto& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
  optim->step();
  train::GradScaler scaler(cfg.amp, false);
  train::TrainState st;
  std::string dir = o.dir;
  if (dir.empty()) {  // a fresh private directory (mkdtemp: mode 0700, a name nobody could have prepared)
    std::string tmpl = (fs::temp_directory_path() / "dlrun-bench-ckpt-XXXXXX").string();
    DLRUN_CHECK(::mkdtemp(tmpl.data()) != nullptr, ExitCode::kRuntime, "cannot create a directory under {}",
                fs::temp_directory_path().string());
    dir = tmpl;
  }
  fs::create_directories(dir);
  CheckpointOptions copts;
  copts.keep_last = 1;
  copts.async = true;
  ckpt::Writer writer(dir, copts);
  nlohmann::json runs = nlohmann::json::array();
  uint64_t bytes = 0;
  for (int i = 0; i < o.repeat; ++i) {
    st.step = i + 1;
    const double t0 = mono_now();
    auto snap = train::make_snapshot(cfg, *model, *optim, scaler, st, 1000, c.placement.device);
    const double t1 = mono_now();
    writer.save(std::move(snap));
    const double t2 = mono_now();
    writer.wait();
    const double t3 = mono_now();
    bytes = 0;
    for (const auto& e : fs::directory_iterator(fs::path(dir) / ckpt::dir_name(st.step)))
      bytes += fs::file_size(e.path());
    runs.push_back({{"copy_s", t1 - t0}, {"stall_s", t2 - t0}, {"write_s", t3 - t1}});
  }
  writer.wait();
  if (o.dir.empty()) fsutil::remove_tree(dir);  // not fs::remove_all: docs/development.md
  auto median = [&](const char* k) {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r[k].get<double>());
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  nlohmann::json j = {{"model", o.model},
                      {"device", c.placement.device.str()},
                      {"parameters", models::num_parameters(*model)},
                      {"checkpoint_bytes", bytes},
                      {"stall_s_median", median("stall_s")},
                      {"write_s_median", median("write_s")},
                      {"runs", runs}};
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("checkpoint of %s (%lld parameters, %.1f MB on disk), %d runs:\n", o.model.c_str(),
                static_cast<long long>(models::num_parameters(*model)), bytes / 1e6, o.repeat);
    std::printf("  training stall (host copy):       median %.3f s\n", median("stall_s"));
    std::printf("  background write+hash+fsync+commit: median %.3f s (%.0f MB/s)\n", median("write_s"),
                bytes / 1e6 / std::max(1e-9, median("write_s")));
  }
}

struct BenchMemoryOptions {
  std::string model = "resnet50";
  int64_t batch = 32;
  int64_t image_size = 224;
  std::string checkpointing = "none";
  std::string amp = "off";
  bool channels_last = false;
  std::string device = "auto";
  int repeat = 5;
  bool max_batch = false;
  bool json = false;
};

// The CPU allocator, counting: every tensor allocation made through it adds its bytes, every
// release takes them back, and the high-water mark is kept — the CPU counterpart of the CUDA
// caching allocator's allocated-bytes peak. (The process's resident set is no measure of
// this: glibc keeps freed blocks, so churn looks like growth.) Installed once, for good.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  static CountingCpuAllocator& install() {
    static CountingCpuAllocator* a = [] {
      auto* c = new CountingCpuAllocator(c10::GetCPUAllocator());
      c->make_current();
      c10::SetCPUAllocator(c, /*priority=*/100);
      return c;
    }();
    return *a;
  }
  // "Simple" data pointers (data == context, one raw deleter), as the default CPU allocator
  // hands out: some of LibTorch allocates through raw_allocate(), which needs them.
  c10::DataPtr allocate(size_t n) override {
    void* data = n ? base_->raw_allocate(n) : nullptr;
    if (data) {
      std::lock_guard<std::mutex> lock(mu_);
      sizes_[data] = n;
      current_ += static_cast<int64_t>(n);
      peak_ = std::max(peak_, current_);
    }
    return {data, data, &CountingCpuAllocator::release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CountingCpuAllocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  /// Start a measurement: the peak from now on, over what is allocated now.
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = current_;
  }
  int64_t current() {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }
  int64_t peak() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

 private:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {
    TORCH_CHECK(base_->raw_deleter() != nullptr, "the CPU allocator has no raw deleter to count through");
  }
  static void release(void* p) {
    if (p == nullptr) return;
    auto* self = instance_;
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      auto it = self->sizes_.find(p);
      if (it != self->sizes_.end()) {
        self->current_ -= static_cast<int64_t>(it->second);
        self->sizes_.erase(it);
      }
    }
    self->base_->raw_deallocate(p);
  }
  c10::Allocator* base_;
  std::mutex mu_;
  std::unordered_map<void*, size_t> sizes_;
  int64_t current_ = 0, peak_ = 0;
  static inline CountingCpuAllocator* instance_ = nullptr;

 public:
  CountingCpuAllocator(const CountingCpuAllocator&) = delete;
  CountingCpuAllocator& operator=(const CountingCpuAllocator&) = delete;
  void make_current() { instance_ = this; }
};

struct MemoryRig {
  Config cfg;
  torch::Device device = torch::kCPU;
  std::shared_ptr<models::Model> model;
  std::unique_ptr<torch::optim::Optimizer> optim;
  std::unique_ptr<train::StepRunner> runner;

  explicit MemoryRig(const BenchMemoryOptions& o) {
    cfg.model.name = o.model;
    cfg.model.in_channels = 3;
    cfg.model.num_classes = 1000;
    cfg.model.channels_last = o.channels_last;
    cfg.model.activation_checkpointing = parse_enum<ActivationCheckpointing>(o.checkpointing, "--checkpointing");
    cfg.amp.enabled = o.amp != "off";
    if (cfg.amp.enabled) cfg.amp.dtype = parse_enum<AmpDtype>(o.amp, "--amp");
    cfg.optim.lr = 0.01;
    cfg.optim.momentum = 0.9;
    cfg.run.device = o.device;
    device = train::place(cfg).device;
    model = models::build(cfg.model, 0, o.image_size);
    model->to(device);
    model->train();
    optim = train::build_optimizer(cfg.optim, *model);
    runner = std::make_unique<train::StepRunner>(cfg.train, cfg.amp, *model, *optim, device);
  }

  template <typename E>
  static E parse_enum(const std::string& s, const char* flag) {
    const auto& names = EnumNames<E>::names;
    for (size_t i = 0; i < names.size(); ++i)
      if (s == names[i]) return static_cast<E>(i);
    fail_input("{} {}: expected one of {}", flag, s, fmt::join(names, ", "));
  }

  data::Batch batch(int64_t n, int64_t side) const {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
    data::Batch b;
    b.x = torch::randn({n, 3, side, side}, gen).to(device);
    b.y = torch::randint(0, 1000, {n}, gen).to(device);
    return b;
  }

  double step() {  // seconds, device work included
    const double t0 = mono_now();
    auto r = runner->run({current}, 0.01);
    (void)r.loss.item<double>();
    return mono_now() - t0;
  }
  data::Batch current;
};

#ifdef DLRUN_TORCH_HAS_CUDA
// Whether `e` says the device ran out of memory. The caching allocator throws
// c10::OutOfMemoryError, but near the limit cuDNN and cuBLAS fail on their own workspace
// allocations with plain errors ("unable to find an engine", CUBLAS_STATUS_ALLOC_FAILED,
// "CUDA error: out of memory").
bool is_out_of_memory(const c10::Error& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  const std::string what = e.what_without_backtrace();
  for (const char* sign : {"out of memory", "unable to find an engine", "ALLOC_FAILED"})
    if (what.find(sign) != std::string::npos) return true;
  return false;
}

// The largest batch whose step fits on the GPU: doubling from `start`, then bisection down to
// a granularity of 8 (or 1 below 64). cuDNN's autotuning is off while it searches: each new
// batch size would tune every convolution again, and the algorithms it picks depend on the
// memory that happens to be free.
int64_t largest_batch(MemoryRig& rig, int64_t start, int64_t side) {
  struct NoAutotuning {
    const bool was = at::globalContext().benchmarkCuDNN();
    NoAutotuning() { at::globalContext().setBenchmarkCuDNN(false); }
    ~NoAutotuning() { at::globalContext().setBenchmarkCuDNN(was); }
  } no_autotuning;
  auto fits = [&](int64_t n) {
    try {
      rig.current = rig.batch(n, side);
      rig.step();
      rig.current = {};
      return true;
    } catch (const c10::Error& e) {
      if (!is_out_of_memory(e)) throw;
      rig.current = {};
      rig.optim->zero_grad(true);
      c10::cuda::CUDACachingAllocator::emptyCache();
      return false;
    }
  };
  int64_t ok = 0, bad = 0;
  for (int64_t n = start; n <= (int64_t{1} << 20); n *= 2) {
    if (!fits(n)) {
      bad = n;
      break;
    }
    ok = n;
  }
  if (bad == 0) return ok;
  while (bad - ok > (ok < 64 ? 1 : 8)) {
    const int64_t mid = (ok + bad) / 2;
    (fits(mid) ? ok : bad) = mid;
  }
  return ok;
}
#endif

void bench_memory(const BenchMemoryOptions& o) {
  MemoryRig rig(o);
  const bool cuda = rig.device.is_cuda();
  rig.current = rig.batch(o.batch, o.image_size);
  // A first step makes the optimizer state and (CUDA) tunes cuDNN; the measured one is the next.
  const double first_s = rig.step();
  double before = 0, peak = 0;
  CountingCpuAllocator* counting = cuda ? nullptr : &CountingCpuAllocator::install();
  if (counting) {
    counting->reset_peak();
    before = static_cast<double>(counting->current());
  }
#ifdef DLRUN_TORCH_HAS_CUDA
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  if (cuda) {
    torch::cuda::synchronize();
    alloc::resetPeakStats(rig.device.index());
    before = static_cast<double>(alloc::getDeviceStats(rig.device.index()).allocated_bytes[agg].current);
  }
#endif
  const double measured_s = rig.step();
  if (counting) peak = static_cast<double>(counting->peak()) - before;
#ifdef DLRUN_TORCH_HAS_CUDA
  if (cuda) peak = static_cast<double>(alloc::getDeviceStats(rig.device.index()).allocated_bytes[agg].peak) - before;
#endif
  std::vector<double> times;
  for (int i = 0; i < o.repeat; ++i) times.push_back(rig.step());
  std::sort(times.begin(), times.end());
  const double step_s = times.empty() ? measured_s : times[times.size() / 2];
  const uint64_t recomputed = static_cast<uint64_t>(models::recomputations());
  nlohmann::json j = {{"model", o.model},
                      {"device", rig.device.str()},
                      {"batch", o.batch},
                      {"image_size", o.image_size},
                      {"checkpointing", o.checkpointing},
                      {"amp", o.amp},
                      {"channels_last", o.channels_last},
                      {"peak_step_bytes", peak},
                      {"peak_measure", cuda ? "CUDA caching allocator: allocated bytes" : "CPU allocator: allocated bytes"},
                      {"step_s_median", step_s},
                      {"first_step_s", first_s},
                      {"images_per_s", o.batch / std::max(1e-12, step_s)},
                      {"segments_recomputed", recomputed}};
  rig.current = {};
#ifdef DLRUN_TORCH_HAS_CUDA
  if (o.max_batch && cuda) j["largest_batch"] = largest_batch(rig, o.batch, o.image_size);
#endif
  if (o.max_batch && !cuda) log::warn("--max-batch needs a CUDA device; skipped");
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s %lldx3x%lldx%lld on %s, activation checkpointing %s, amp %s: step peak +%.1f MiB, %.4f s/step "
                "(%.1f img/s)%s\n",
                o.model.c_str(), static_cast<long long>(o.batch), static_cast<long long>(o.image_size),
                static_cast<long long>(o.image_size), rig.device.str().c_str(), o.checkpointing.c_str(), o.amp.c_str(),
                peak / (1 << 20), step_s, o.batch / std::max(1e-12, step_s),
                j.contains("largest_batch") ? fmt::format("; largest batch {}", j["largest_batch"].get<int64_t>()).c_str()
                                            : "");
  }
}

}  // namespace

void setup_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "benchmarks (see docs/benchmarks.md)");
  cmd->require_subcommand(1);
  auto o = std::make_shared<BenchCkptOptions>();
  auto* ck = cmd->add_subcommand("ckpt", "checkpoint stall and write time for a model's training state");
  ck->add_option("--model", o->model, "model name (resnet50 by default)");
  ck->add_option("--repeat", o->repeat, "saves to time")->check(CLI::Range(1, 100));
  ck->add_option("--dir", o->dir, "where to write (default: a temporary directory, removed after)");
  ck->add_option("--device", o->device, "where the model lives (auto | cpu | cuda | cuda:N); on CUDA the stall "
                                         "includes the copy to pinned host memory");
  ck->add_flag("--json", o->json, "print JSON");
  ck->callback([o] { bench_ckpt(*o); });

  auto m = std::make_shared<BenchMemoryOptions>();
  auto* mem = cmd->add_subcommand("memory", "memory and time of a training step under activation checkpointing");
  mem->add_option("--model", m->model, "model name (resnet50 by default)");
  mem->add_option("--batch", m->batch, "images per step")->check(CLI::Range(1, 1 << 20));
  mem->add_option("--image-size", m->image_size, "image side in pixels")->check(CLI::Range(8, 4096));
  mem->add_option("--checkpointing", m->checkpointing, "none | blocks | stages (model.activation_checkpointing)");
  mem->add_option("--amp", m->amp, "off | bf16 | fp16");
  mem->add_flag("--channels-last", m->channels_last, "NHWC memory format");
  mem->add_option("--device", m->device, "auto | cpu | cuda | cuda:N");
  mem->add_option("--repeat", m->repeat, "timed steps after the measured first one")->check(CLI::Range(0, 10000));
  mem->add_flag("--max-batch", m->max_batch, "CUDA: also search the largest batch that fits");
  mem->add_flag("--json", m->json, "print JSON (one line)");
  mem->callback([m] { bench_memory(*m); });
  setup_bench_data(cmd);
  setup_bench_kernels(cmd);
}

}  // namespace dlrun::cli
