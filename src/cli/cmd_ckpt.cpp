// `dlrun ckpt list RUN_DIR [--json]`, `dlrun ckpt verify PATH` and `dlrun ckpt push RUN_DIR`:
// inspect checkpoints without training, and upload the ones a remote store lacks. list shows
// every checkpoint (committed, corrupt, partial; LATEST and BEST marked; in a bucket, also those
// set aside, which are still billed) and exits 0 even when some are invalid; verify exits 0 for
// a valid checkpoint and 2 (with the reason) otherwise; push uploads the committed local
// checkpoints newer than the store's newest (checkpoint/push.h).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>

#include "base/error.h"
#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/push.h"
#include "checkpoint/remote_store.h"
#include "cli/app.h"
#include "cli/remote_args.h"
#include "config/loader.h"
#include "config/remote_options.h"
#include "remote/s3.h"

namespace dlrun::cli {
namespace {

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string local_time(double unix_s) {
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm {};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

/// `where: ok (...)`, or exit 2 with the reason.
void report_verified(const std::string& where, const ckpt::VerifyResult& v) {
  if (!v.ok) throw Error(ExitCode::kBadInput, fmt::format("{}: INVALID: {}", where, v.reason));
  uint64_t bytes = 0;
  for (const auto& f : v.manifest["files"]) bytes += f["bytes"].get<uint64_t>();
  std::printf("%s: ok (step %lld, epoch %lld, %zu files, %s, sizes and SHA-256 match)\n", where.c_str(),
              static_cast<long long>(v.step), static_cast<long long>(v.epoch), v.manifest["files"].size(),
              human_bytes(bytes).c_str());
}

const char* status_of(const ckpt::Entry& e) { return e.partial ? "partial" : e.verified.ok ? "ok" : "invalid"; }

void run_remote_list(const std::string& url, const RemoteArgs& args, bool json) {
  std::string name;
  auto store = remote_store_for(url, args, &name);
  const auto latest = store->latest();
  const auto entries = store->list();
  const auto aside = store->list_set_aside();
  if (json) {
    nlohmann::json arr = nlohmann::json::array(), set_aside = nlohmann::json::array();
    for (const auto& e : entries)
      arr.push_back({{"name", e.name}, {"url", store->url().str(e.name)}, {"step", e.step}, {"bytes", e.bytes},
                     {"status", e.complete ? "complete" : "incomplete"}, {"latest", latest && *latest == e.name}});
    for (const auto& e : aside)
      set_aside.push_back({{"name", e.name}, {"url", store->url().str(e.name)}, {"step", e.step}, {"bytes", e.bytes}});
    nlohmann::json j = {{"dir", store->url().str()}, {"latest", latest ? nlohmann::json(*latest) : nlohmann::json()},
                        {"checkpoints", arr}, {"set_aside", set_aside}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s (LATEST: %s)\n", store->url().str().c_str(), latest ? latest->c_str() : "none");
  auto print_aside = [&] {
    if (aside.empty()) return;
    uint64_t bytes = 0;
    for (const auto& e : aside) bytes += e.bytes;
    std::printf("set aside (never resumed, still stored and billed: %s in %zu; remove with `aws s3 rm --recursive`):\n",
                human_bytes(bytes).c_str(), aside.size());
    for (const auto& e : aside)
      std::printf("  %-44s %10lld  %10s\n", e.name.c_str(), static_cast<long long>(e.step), human_bytes(e.bytes).c_str());
  };
  if (entries.empty()) {
    std::printf("no checkpoints\n");
    print_aside();
    return;
  }
  std::printf("  %-20s %10s  %10s  %s\n", "NAME", "STEP", "SIZE", "STATUS");
  for (const auto& e : entries) {
    const bool is_latest = latest && *latest == e.name;
    std::string status = e.complete ? "complete (sizes as listed; `dlrun ckpt verify` checks SHA-256)"
                                    : "INCOMPLETE: no manifest.json (an upload cut short); never used";
    if (is_latest) status += "  <- LATEST";
    std::printf("%s %-20s %10lld  %10s  %s\n", is_latest ? "*" : " ", e.name.c_str(), static_cast<long long>(e.step),
                human_bytes(e.bytes).c_str(), status.c_str());
  }
  print_aside();
}

void run_remote_verify(const std::string& url, const RemoteArgs& args) {
  std::string name;
  auto store = remote_store_for(url, args, &name);
  if (name.empty()) {
    const auto latest = store->latest();
    DLRUN_CHECK_INPUT(latest.has_value(), "{}: no LATEST (no checkpoint was uploaded there)", url);
    name = *latest;
    std::printf("%s: LATEST is %s\n", url.c_str(), store->url().str(name).c_str());
  }
  report_verified(store->url().str(name), store->verify(name));
}

void run_list(const std::string& path, bool json) {
  const std::string dir = ckpt::checkpoints_dir_of(path);
  const auto latest = ckpt::read_latest(dir);
  const auto best = ckpt::read_best(dir);
  const auto entries = ckpt::list(dir);
  auto name_or_null = [](const std::optional<std::string>& n) { return n ? nlohmann::json(*n) : nlohmann::json(); };
  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& e : entries) {
      arr.push_back({{"name", e.name}, {"path", e.path}, {"step", e.step},
                     {"epoch", e.verified.epoch}, {"status", status_of(e)},
                     {"reason", e.verified.reason}, {"bytes", e.bytes}, {"mtime", e.mtime},
                     {"time", local_time(e.mtime)}, {"latest", latest && *latest == e.name},
                     {"best", best && *best == e.name}});
    }
    nlohmann::json j = {{"dir", dir}, {"latest", name_or_null(latest)}, {"best", name_or_null(best)},
                        {"checkpoints", arr}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s (LATEST: %s%s)\n", dir.c_str(), latest ? latest->c_str() : "none",
              best ? (", BEST: " + *best).c_str() : "");
  if (entries.empty()) {
    std::printf("no checkpoints\n");
    return;
  }
  std::printf("  %-20s %10s %6s  %-19s  %10s  %s\n", "NAME", "STEP", "EPOCH", "TIME", "SIZE", "STATUS");
  for (const auto& e : entries) {
    const bool is_latest = latest && *latest == e.name;
    std::string status = e.partial ? e.verified.reason : e.verified.ok ? "ok" : "INVALID: " + e.verified.reason;
    if (is_latest) status += "  <- LATEST";
    if (best && *best == e.name) status += "  <- BEST";
    const std::string epoch = e.verified.epoch >= 0 ? std::to_string(e.verified.epoch) : "-";
    std::printf("%s %-20s %10lld %6s  %-19s  %10s  %s\n", is_latest ? "*" : " ", e.name.c_str(),
                static_cast<long long>(e.step), epoch.c_str(), local_time(e.mtime).c_str(),
                human_bytes(e.bytes).c_str(), status.c_str());
  }
  if (latest) {
    bool found = false;
    for (const auto& e : entries) found |= e.name == *latest;
    if (!found) std::printf("warning: LATEST names %s, which does not exist\n", latest->c_str());
  }
}

struct PushArgs {
  std::string run_dir;
  std::string remote;  ///< --remote: instead of the run's checkpoint.remote (with the --remote-* options)
  RemoteArgs remote_args;
};

// The store a run directory's checkpoints belong to: --remote with the --remote-* options, else
// the checkpoint.remote_* keys of RUN_DIR/config.yaml (the config the run wrote).
std::unique_ptr<ckpt::RemoteStore> store_of_run(const PushArgs& a, const std::string& config_yaml) {
  if (!a.remote.empty()) {
    std::string name;
    auto store = remote_store_for(a.remote, a.remote_args, &name);
    DLRUN_CHECK_INPUT(name.empty(), "--remote {}: expected the run's prefix (s3://BUCKET/PREFIX), not a checkpoint",
                      a.remote);
    return store;
  }
  DLRUN_CHECK_INPUT(std::filesystem::is_regular_file(config_yaml),
                    "{} has no config.yaml to name the remote store: give --remote s3://BUCKET/PREFIX", a.run_dir);
  const Config cfg = config::load(config_yaml);
  DLRUN_CHECK_INPUT(!cfg.checkpoint.remote.empty(),
                    "{}: checkpoint.remote is not set (the run uploaded nothing): give --remote s3://BUCKET/PREFIX",
                    config_yaml);
  return std::make_unique<ckpt::RemoteStore>(config::s3_config(cfg.checkpoint),
                                             remote::parse_s3_url(cfg.checkpoint.remote));
}

void run_push(const PushArgs& a) {
  const std::string dir = ckpt::checkpoints_dir_of(a.run_dir);
  auto store = store_of_run(a, a.run_dir + "/config.yaml");
  const auto r = ckpt::push_newer(*store, dir, [&](const ckpt::Entry& e) {
    std::printf("uploading %s (step %lld, %s) to %s\n", e.path.c_str(), static_cast<long long>(e.step),
                human_bytes(e.bytes).c_str(), store->url().str(e.name).c_str());
    std::fflush(stdout);
  });
  for (const auto& e : r.skipped)
    log::warn("{} does not verify ({}): not uploaded", e.path, e.verified.reason);
  if (r.pushed.empty()) {
    DLRUN_CHECK_INPUT(r.local_newest >= 0 || r.remote_newest >= 0, "{}: no committed checkpoint to push", dir);
    std::printf("nothing to push: %s holds step %lld, the newest local checkpoint is step %lld\n",
                store->url().str().c_str(), static_cast<long long>(r.remote_newest),
                static_cast<long long>(r.local_newest));
    DLRUN_CHECK_INPUT(r.skipped.empty(), "the local checkpoints newer than the store's do not verify (above)");
    return;
  }
  std::printf("pushed %zu checkpoint(s); %s now names %s (LATEST)\n", r.pushed.size(), store->url().str().c_str(),
              r.pushed.back().name.c_str());
}

void run_verify(const std::string& path) {
  const std::string ck = ckpt::resolve(path);
  if (ck != path) std::printf("%s: LATEST is %s\n", path.c_str(), ck.c_str());
  report_verified(ck, ckpt::verify(ck));
}

}  // namespace

void setup_ckpt(CLI::App& app) {
  auto* cmd = app.add_subcommand("ckpt", "inspect and check checkpoints");
  cmd->require_subcommand(1);

  auto* list = cmd->add_subcommand("list", "list the checkpoints of a run (committed, corrupt, partial)");
  auto list_dir = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto remote_args = std::make_shared<RemoteArgs>();
  list->add_option("RUN_DIR", *list_dir, "run directory, its checkpoints/ directory, or s3://BUCKET/PREFIX")->required();
  list->add_flag("--json", *json, "print as JSON");
  add_remote_args(list, *remote_args);
  list->callback([list_dir, json, remote_args] {
    if (remote::is_s3_url(*list_dir)) run_remote_list(*list_dir, *remote_args, *json);
    else run_list(*list_dir, *json);
  });

  auto* verify = cmd->add_subcommand("verify", "check a checkpoint's manifest, sizes and SHA-256 (exit 0 ok, 2 not)");
  auto path = std::make_shared<std::string>();
  verify->add_option("PATH", *path,
                      "checkpoint directory, a run directory (verifies LATEST), or s3://BUCKET/PREFIX[/step-N]")
      ->required();
  add_remote_args(verify, *remote_args);
  verify->callback([path, remote_args] {
    if (remote::is_s3_url(*path)) run_remote_verify(*path, *remote_args);
    else run_verify(*path);
  });

  auto* push = cmd->add_subcommand(
      "push", "upload the committed checkpoints of a run directory that its remote store lacks (newer than the "
              "store's newest), oldest first; the store's LATEST then names the newest");
  auto push_args = std::make_shared<PushArgs>();
  push->add_option("RUN_DIR", push_args->run_dir, "the run directory (its config.yaml names checkpoint.remote)")
      ->required();
  push->add_option("--remote", push_args->remote,
                   "s3://BUCKET/PREFIX instead of the run's checkpoint.remote (with the --remote-* options below, "
                   "instead of the run's checkpoint.remote_* keys)");
  add_remote_args(push, push_args->remote_args, /*writes=*/true);
  push->callback([push_args] { run_push(*push_args); });
}

}  // namespace dlrun::cli
