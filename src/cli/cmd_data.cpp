// `dlrun data pack|index|verify`: WebDataset shards from a dataset dlrun reads, the index of
// shards written elsewhere, and a check of shards against their index (data/pack.h).
//   dlrun data pack --dataset image_folder --root DIR [--split train|eval] --to DIR|s3://...
//                   [--prefix NAME] [--shard-size-mb N] [--samples-per-shard N] [--remote-* ...]
//   dlrun data index SHARDS     (a directory, a brace pattern or an s3:// prefix)
//   dlrun data verify SHARDS    (exit 0: every shard matches its index; 2: the list of those that do not)
// The --remote-* options (cli/remote_args.h) say how to reach an s3:// store and, for pack and
// index, the server-side encryption of what they write.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "base/clock.h"
#include "base/error.h"
#include "cli/app.h"
#include "cli/remote_args.h"
#include "data/pack.h"

namespace dlrun::cli {
namespace {

struct PackArgs {
  std::string dataset = "image_folder", root, split = "train", to, prefix;
  int64_t shard_mb = 256;
  int64_t shard_samples = 0;
  RemoteArgs remote;
};

/// A progress line on stderr, redrawn at most a few times a second (only on a terminal).
class Progress {
 public:
  void show(const std::string& line, bool last = false) {
    if (!isatty(2)) return;
    const double now = mono_now();
    if (!last && now - shown_ < 0.2) return;
    shown_ = now;
    std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), last ? "\n" : "");
  }

 private:
  double shown_ = -1;
};

void run_pack(const PackArgs& a) {
  data::PackSpec spec;
  spec.source.name = a.dataset;
  spec.source.root = a.root;
  spec.source.workers = 0;
  DLRUN_CHECK_INPUT(a.split == "train" || a.split == "eval", "--split must be train or eval, not '{}'", a.split);
  spec.split = a.split == "train" ? data::Split::kTrain : data::Split::kEval;
  spec.dest = a.to;
  spec.prefix = a.prefix.empty() ? a.split : a.prefix;
  spec.shard_bytes = static_cast<uint64_t>(a.shard_mb) << 20;
  spec.shard_samples = a.shard_samples;
  spec.remote = remote_options(a.remote);
  Progress bar;
  const double t0 = mono_now();
  spec.progress = [&](int64_t done, int64_t all, uint64_t bytes) {
    const double s = std::max(1e-9, mono_now() - t0);
    bar.show(fmt::format("packed {}/{} samples ({:.0f}%), {:.1f} MB, {:.0f} samples/s", done, all, 100.0 * done / all,
                         bytes / 1e6, done / s),
             done == all);
  };
  const data::PackResult r = data::pack_shards(spec);
  std::printf("packed %lld samples into %lld shard(s), %.1f MB, in %.1f s (%.0f samples/s, %.1f MB/s); index: %s\n",
              static_cast<long long>(r.samples), static_cast<long long>(r.shards), r.bytes / 1e6, r.seconds,
              r.samples / std::max(1e-9, r.seconds), r.bytes / 1e6 / std::max(1e-9, r.seconds), r.index.c_str());
}

void run_verify(const std::string& shards, const RemoteArgs& remote) {
  Progress bar;
  const data::VerifyResult r = data::verify_shards(
      shards, [&](int64_t done, int64_t all) { bar.show(fmt::format("verified {}/{} shards", done, all), done == all); },
      remote_options(remote));
  for (const auto& p : r.problems) std::printf("BAD %s\n", p.c_str());
  if (!r.problems.empty()) throw Error(ExitCode::kBadInput, fmt::format("{}: {}", shards, r.summary()));
  std::printf("%s: ok (%lld shards, %lld samples, %.1f MB; sizes, SHA-256 and sample tables match the index)\n",
              shards.c_str(), static_cast<long long>(r.shards), static_cast<long long>(r.samples), r.bytes / 1e6);
}

}  // namespace

void setup_data(CLI::App& app) {
  auto* cmd = app.add_subcommand("data", "WebDataset shards: pack a dataset into shards, index and verify shards");
  cmd->require_subcommand(1);

  auto a = std::make_shared<PackArgs>();
  auto* pack = cmd->add_subcommand("pack", "write a dataset (image_folder, cifar10, cifar100, mnist, fashion_mnist) "
                                           "as WebDataset tar shards with their index");
  pack->add_option("--dataset", a->dataset, "the dataset to read (data.name)")
      ->check(CLI::IsMember({"image_folder", "cifar10", "cifar100", "mnist", "fashion_mnist"}));
  pack->add_option("--root", a->root, "its directory (data.root; fashion_mnist has a default)");
  pack->add_option("--split", a->split, "train or eval (image_folder: root/train or root/val)");
  pack->add_option("--to", a->to, "a directory or an s3://BUCKET/PREFIX for the shards")->required();
  pack->add_option("--prefix", a->prefix, "shard names PREFIX-000000.tar ... (default: the split)");
  pack->add_option("--shard-size-mb", a->shard_mb, "start a new shard past this size")->check(CLI::Range(1, 1 << 20));
  pack->add_option("--samples-per-shard", a->shard_samples, "start a new shard after this many samples (0: no limit)")
      ->check(CLI::Range(0, 1 << 30));
  add_remote_args(pack, a->remote, true);
  pack->callback([a] { run_pack(*a); });

  auto index_spec = std::make_shared<std::string>();
  auto* index = cmd->add_subcommand("index", "index shards (written by Python's webdataset, say) and write "
                                             "shardindex.json beside them");
  index->add_option("SHARDS", *index_spec, "a directory of .tar, a brace pattern, or an s3:// prefix")->required();
  auto index_remote = std::make_shared<RemoteArgs>();
  add_remote_args(index, *index_remote, true);
  index->callback([index_spec, index_remote] {
    std::printf("wrote %s\n", data::index_shards(*index_spec, remote_options(*index_remote)).c_str());
  });

  auto verify_spec = std::make_shared<std::string>();
  auto* verify = cmd->add_subcommand("verify", "check shards against their shardindex.json (exit 0 ok, 2 not)");
  verify->add_option("SHARDS", *verify_spec, "a directory of .tar, a brace pattern, or an s3:// prefix")->required();
  auto verify_remote = std::make_shared<RemoteArgs>();
  add_remote_args(verify, *verify_remote);
  verify->callback([verify_spec, verify_remote] { run_verify(*verify_spec, *verify_remote); });
}

}  // namespace dlrun::cli
