// `dlrun ckpt list RUN_DIR [--json]` and `dlrun ckpt verify PATH`: inspect checkpoints without
// training. list shows every checkpoint (committed, corrupt, partial) and exits 0 even when
// some are invalid; verify exits 0 for a valid checkpoint and 2 (with the reason) otherwise.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>
#include <memory>
#include <string>

#include "base/error.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/remote_store.h"
#include "cli/app.h"
#include "cli/remote_args.h"

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
  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& e : entries)
      arr.push_back({{"name", e.name}, {"url", store->url().str(e.name)}, {"step", e.step}, {"bytes", e.bytes},
                     {"status", e.complete ? "complete" : "incomplete"}, {"latest", latest && *latest == e.name}});
    nlohmann::json j = {{"dir", store->url().str()}, {"latest", latest ? nlohmann::json(*latest) : nlohmann::json()},
                        {"checkpoints", arr}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s (LATEST: %s)\n", store->url().str().c_str(), latest ? latest->c_str() : "none");
  if (entries.empty()) {
    std::printf("no checkpoints\n");
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
  const auto entries = ckpt::list(dir);
  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& e : entries) {
      arr.push_back({{"name", e.name}, {"path", e.path}, {"step", e.step},
                     {"epoch", e.verified.epoch}, {"status", status_of(e)},
                     {"reason", e.verified.reason}, {"bytes", e.bytes}, {"mtime", e.mtime},
                     {"time", local_time(e.mtime)}, {"latest", latest && *latest == e.name}});
    }
    nlohmann::json j = {{"dir", dir}, {"latest", latest ? nlohmann::json(*latest) : nlohmann::json()},
                        {"checkpoints", arr}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s (LATEST: %s)\n", dir.c_str(), latest ? latest->c_str() : "none");
  if (entries.empty()) {
    std::printf("no checkpoints\n");
    return;
  }
  std::printf("  %-20s %10s %6s  %-19s  %10s  %s\n", "NAME", "STEP", "EPOCH", "TIME", "SIZE", "STATUS");
  for (const auto& e : entries) {
    const bool is_latest = latest && *latest == e.name;
    std::string status = e.partial ? e.verified.reason : e.verified.ok ? "ok" : "INVALID: " + e.verified.reason;
    if (is_latest) status += "  <- LATEST";
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
}

}  // namespace dlrun::cli
