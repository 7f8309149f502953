// `dlrun bench ckpt [--model resnet50] [--repeat N] [--dir DIR] [--json]`
// Measures what a checkpoint costs the training loop: the stall (copying model + optimizer
// state to host memory at the step boundary) and the background write (serialize, hash,
// fsync, commit), for a model's full training state (weights, SGD momentum, RNG).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "base/clock.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include "cli/app.h"
#include "models/model.h"
#include "train/amp.h"
#include "train/components.h"
#include "train/resume.h"

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
  auto c = train::build_components(cfg, train::place(cfg.run), train::Purpose::kBench);
  auto& model = c.model;
  auto& optim = c.optimizer;
  // One step so the optimizer has its momentum buffers (the state a real checkpoint holds).
  for (auto& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
  optim->step();
  train::GradScaler scaler(cfg.amp, false);
  train::TrainState st;
  std::string dir = o.dir.empty() ? (fs::temp_directory_path() / ("dlrun-bench-ckpt-" + std::to_string(getpid()))).string() : o.dir;
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
}

}  // namespace dlrun::cli
