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
// a first one has made the optimizer state (the peak of bytes held by tensors over what they
// held before it: on CUDA from the caching allocator's statistics, on the CPU from a counting
// allocator; oneDNN's own scratch buffers are not tensors and not counted), the median step
// time after it, and with --max-batch (CUDA) the largest batch that fits.
//
// The measurements are training code (train/checkpoint_cost.h, train/step/memory.h); this file
// parses the flags, calls them and prints.
#include <CLI/CLI.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/stats.h"
#include "cli/app.h"
#include "cli/config_args.h"
#include "config/options.h"
#include "train/checkpoint_cost.h"
#include "train/step/memory.h"

namespace dlrun::cli {
namespace {

struct BenchCkptOptions {
  train::CheckpointCostOptions cost;
  bool json = false;
};

void bench_ckpt(const BenchCkptOptions& o) {
  const train::CheckpointCost r = train::measure_checkpoint_cost(o.cost);
  nlohmann::json runs = nlohmann::json::array();
  std::vector<double> stalls, writes;
  for (const auto& s : r.saves) {
    runs.push_back({{"copy_s", s.copy_s}, {"stall_s", s.stall_s}, {"write_s", s.write_s}});
    stalls.push_back(s.stall_s);
    writes.push_back(s.write_s);
  }
  const double stall_median = median(stalls), write_median = median(writes);
  const uint64_t bytes = r.checkpoint_bytes;
  nlohmann::json j = {{"model", o.cost.model},
                      {"device", r.device.str()},
                      {"parameters", r.parameters},
                      {"checkpoint_bytes", bytes},
                      {"stall_s_median", stall_median},
                      {"write_s_median", write_median},
                      {"runs", runs}};
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("checkpoint of %s (%lld parameters, %.1f MB on disk), %d runs:\n", o.cost.model.c_str(),
                static_cast<long long>(r.parameters), bytes / 1e6, o.cost.repeat);
    std::printf("  training stall (host copy):       median %.3f s\n", stall_median);
    std::printf("  background write+hash+fsync+commit: median %.3f s (%.0f MB/s)\n", write_median,
                bytes / 1e6 / std::max(1e-9, write_median));
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

void bench_memory(const BenchMemoryOptions& o) {
  train::StepMemoryOptions m;
  m.model = o.model;
  m.batch = o.batch;
  m.image_size = o.image_size;
  m.checkpointing = parse_enum_or_fail<ActivationCheckpointing>(o.checkpointing, "--checkpointing");
  if (o.amp != "off") m.amp = parse_enum_or_fail<AmpDtype>(o.amp, "--amp");
  m.channels_last = o.channels_last;
  m.device = o.device;
  m.repeat = o.repeat;
  m.max_batch = o.max_batch;
  const train::StepMemory r = train::measure_step_memory(m);
  const double step_s = r.step_s;
  nlohmann::json j = {{"model", o.model},
                      {"device", r.device.str()},
                      {"batch", o.batch},
                      {"image_size", o.image_size},
                      {"checkpointing", o.checkpointing},
                      {"amp", o.amp},
                      {"channels_last", o.channels_last},
                      {"peak_step_bytes", r.peak_bytes},
                      {"peak_measure", r.peak_measure},
                      {"step_s_median", step_s},
                      {"first_step_s", r.first_step_s},
                      {"images_per_s", o.batch / std::max(1e-12, step_s)},
                      {"segments_recomputed", r.segments_recomputed}};
  if (r.largest_batch) j["largest_batch"] = *r.largest_batch;
  if (o.max_batch && !r.cuda) log::warn("--max-batch needs a CUDA device; skipped");
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s %lldx3x%lldx%lld on %s, activation checkpointing %s, amp %s: step peak +%.1f MiB, %.4f s/step "
                "(%.1f img/s)%s\n",
                o.model.c_str(), static_cast<long long>(o.batch), static_cast<long long>(o.image_size),
                static_cast<long long>(o.image_size), r.device.str().c_str(), o.checkpointing.c_str(), o.amp.c_str(),
                r.peak_bytes / (1 << 20), step_s, o.batch / std::max(1e-12, step_s),
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
  ck->add_option("--model", o->cost.model, "model name (resnet50 by default)");
  ck->add_option("--repeat", o->cost.repeat, "saves to time")->check(CLI::Range(1, 100));
  ck->add_option("--dir", o->cost.dir, "where to write (default: a temporary directory, removed after)");
  ck->add_option("--device", o->cost.device,
                 "where the model lives (auto | cpu | cuda | cuda:N); on CUDA the stall includes the copy to pinned "
                 "host memory");
  ck->add_flag("--json", o->json, "print JSON");
  ck->callback([o] { with_flag_names({{"model.name", "--model"}, {"run.device", "--device"}}, [&] { bench_ckpt(*o); }); });

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
  mem->callback([m] {
    with_flag_names({{"model.name", "--model"},
                     {"model.activation_checkpointing", "--checkpointing"},
                     {"amp.dtype", "--amp"},
                     {"amp.enabled", "--amp"},
                     {"run.device", "--device"},
                     {"data.batch_size", "--batch"},
                     {"data.synthetic_shape", "--image-size"}},
                    [&] { bench_memory(*m); });
  });
  setup_bench_data(cmd);
  setup_bench_kernels(cmd);
}

}  // namespace dlrun::cli
