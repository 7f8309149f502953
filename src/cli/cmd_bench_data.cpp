// `dlrun bench data CONFIG.yaml [key=value ...] [--batches N] [--warmup N] [--json]`
// The input pipeline alone: the training loader of the configured dataset (reading, decoding,
// augmentation, normalisation, collation, in data.workers threads) with no model behind it,
// delivering batches where a run of the config gets them (host memory on the CPU; on CUDA the
// copies to the GPU, as in training). Prints images/s and images/s per worker, the figure
// bench/compare.py puts next to torchvision's ImageFolder + DataLoader on the same files.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "base/clock.h"
#include "cli/app.h"
#include "cli/config_args.h"
#include "data/loader.h"
#include "data/transforms.h"
#include "train/components.h"
#include "train/step/device.h"

namespace dlrun::cli {
namespace {

struct BenchDataOptions {
  ConfigArgs config;
  int64_t batches = 100;
  int64_t warmup = 10;
  int64_t psnr = 0;
  bool json = false;
};

void bench_data(const BenchDataOptions& o) {
  Config cfg = load_validated(o.config);
  // The device, threads and seed a run of this config gets: a device that is not there is
  // refused as train refuses it, and on CUDA the batches are delivered there, as in training.
  const torch::Device device = train::place(cfg).device;
  const auto datasets = train::open_datasets(cfg, train::Purpose::kTrain);
  data::LoaderSpec spec;
  spec.seed = cfg.run.seed;
  spec.device = device;
  data::Loader loader(datasets.train, cfg.data, spec);
  int64_t epoch = 0, images = 0, got = 0;
  double start = 0;
  loader.start_epoch(epoch);
  while (got < o.warmup + o.batches) {
    auto b = loader.next();
    if (!b) {
      loader.start_epoch(++epoch);
      continue;
    }
    if (++got == o.warmup) start = mono_now();
    if (got > o.warmup) images += b->x.size(0);
  }
#ifdef DLRUN_TORCH_HAS_CUDA
  if (device.is_cuda()) torch::cuda::synchronize();  // the last copies are part of the time
#endif
  const double seconds = mono_now() - start;
  const double ips = static_cast<double>(images) / std::max(1e-9, seconds);
  const int64_t threads = std::max<int64_t>(1, cfg.data.workers);
  nlohmann::json j = {{"dataset", cfg.data.name},
                      {"device", device.str()},
                      {"workers", cfg.data.workers},
                      {"batch", cfg.data.batch_size},
                      {"augment", cfg.data.augment},
                      {"batches", o.batches},
                      {"seconds", seconds},
                      {"images_per_s", ips},
                      {"images_per_s_per_worker", ips / static_cast<double>(threads)},
                      {"host_cores", std::thread::hardware_concurrency()}};
  if (o.psnr > 0) {
    const data::RoiQuality q = data::measure_roi_decode(*datasets.train, cfg.data, cfg.run.seed, o.psnr);
    j["roi_psnr"] = {{"samples", q.samples}, {"identical", q.identical}, {"scaled", q.scaled},
                     {"mean_db", q.mean_psnr_db}, {"worst_db", q.worst_psnr_db},
                     {"roi_ms_per_image", 1e3 * q.roi_s / std::max<int64_t>(1, q.samples)},
                     {"full_ms_per_image", 1e3 * q.full_s / std::max<int64_t>(1, q.samples)}};
    // A PSNR only for images that differ: with none, there is nothing to average (not 0.0 dB).
    const bool others = q.samples > q.identical;
    if (!others) j["roi_psnr"]["mean_db"] = j["roi_psnr"]["worst_db"] = nullptr;
    if (!o.json)
      std::printf("region decode vs full decode, %lld samples: %lld identical, %lld at a reduced DCT scale; %s; %.2f "
                  "vs %.2f ms per image (decode + transform, one thread)\n",
                  static_cast<long long>(q.samples), static_cast<long long>(q.identical),
                  static_cast<long long>(q.scaled),
                  others ? fmt::format("PSNR of the others mean {:.1f} dB, worst {:.1f} dB", q.mean_psnr_db,
                                       q.worst_psnr_db).c_str()
                         : "every image identical",
                  1e3 * q.roi_s / std::max<int64_t>(1, q.samples), 1e3 * q.full_s / std::max<int64_t>(1, q.samples));
  }
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s, %lld worker thread(s), batch %lld: %.0f images/s (%.0f per worker) over %lld batches, "
                "delivered to %s\n",
                cfg.data.name.c_str(), static_cast<long long>(cfg.data.workers),
                static_cast<long long>(cfg.data.batch_size), ips, ips / static_cast<double>(threads),
                static_cast<long long>(o.batches), device.str().c_str());
  }
}

}  // namespace

void setup_bench_data(CLI::App* bench) {
  auto o = std::make_shared<BenchDataOptions>();
  auto* cmd = bench->add_subcommand("data", "input pipeline throughput: the training loader with no model behind it");
  add_config_args(cmd, o->config);
  cmd->add_option("--batches", o->batches, "batches timed")->check(CLI::Range(1, 1000000));
  cmd->add_option("--warmup", o->warmup, "batches read before timing (workers start, caches fill)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--psnr", o->psnr,
                  "also compare the region JPEG decode with the full decode on the first N samples (PSNR, time)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_flag("--json", o->json, "print JSON (one line)");
  cmd->callback([o] { bench_data(*o); });
}

}  // namespace dlrun::cli
