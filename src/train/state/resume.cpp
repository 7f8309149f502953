// Choosing the checkpoint to resume from (see resume.h).
#include "train/state/resume.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "base/fsutil.h"
#include "base/log.h"
#include "checkpoint/layout.h"
#include "checkpoint/tensor_file.h"
#include "models/model.h"
#include "preempt/preempt.h"

namespace dlrun::train {

namespace {

void skip_report(const std::string& path, const std::string& why) { log0::warn("skipping checkpoint {}: {}", path, why); }

int64_t step_of(const std::string& name) {
  int64_t step = -1;
  std::string suffix;
  return ckpt::detail::parse_dir_name(name, &step, &suffix) && suffix.empty() ? step : -1;
}

/// Retries the store until checkpoint.remote_wait_s is spent (then exit 75); a signal ends the wait.
ckpt::Patience patience(const CheckpointOptions& opts) {
  return ckpt::Patience(opts.remote_wait_s, [] { return preempt::stop_requested(); });
}

/// Remote checkpoint `name` downloaded, verified and parsed into `plan`; false (reported) when
/// it is damaged or cannot be read. A store that does not answer is `p`'s to retry.
bool take_remote(ckpt::RemoteStore& remote, const std::string& name, ckpt::Patience& p, ResumePlan& plan) {
  const std::string where = remote.url().str(name);
  try {
    log0::info("downloading {}", where);
    ckpt::FileSet set = p.run("download " + where, [&] { return remote.fetch(name); });
    ckpt::Snapshot snap = ckpt::parse(set, where);
    plan.from = ckpt::Loaded{where, std::move(snap)};
    plan.fetched = std::move(set);
    return true;
  } catch (const ckpt::NewerFormatError&) {
    throw;  // not damage: skipping it would continue from an older step beside it
  } catch (const Error& e) {
    if (e.code() != ExitCode::kBadInput) throw;
    skip_report(where, e.message());
  } catch (const remote::S3Error& e) {  // answered, and refused (an object that cannot be read)
    skip_report(where, e.what());
  } catch (const std::exception& e) {  // a manifest or state.json that parses but does not fit
    skip_report(where, e.what());
  }
  return false;
}

void plan_auto(const RunDir& dir, const CheckpointOptions& opts, ckpt::RemoteStore* remote, ResumePlan& plan) {
  std::optional<ckpt::Loaded> local = ckpt::load_preferred(dir.checkpoints(), skip_report);
  const auto local_latest = ckpt::read_latest(dir.checkpoints());
  const bool local_is_latest = local && local_latest && fsutil::base_name(local->path) == *local_latest;
  if (!remote) {
    plan.from = std::move(local);
    return;
  }
  // The remote picture: retried until it answers when there is nothing to resume locally (a
  // requeue on a fresh VM must not start over); asked once when there is.
  std::vector<ckpt::RemoteEntry> entries;
  std::optional<std::string> remote_latest;
  ckpt::Patience p = patience(opts);
  try {
    auto ask = [&] {
      entries = remote->list();
      remote_latest = remote->latest();
    };
    if (local) ask();
    else p.run("list " + remote->url().str(), ask);
  } catch (const remote::S3Error& e) {
    if (!local || !e.transient()) throw;
    log0::warn("cannot reach {} ({}); resuming from the local checkpoint {}", remote->url().str(), e.what(), local->path);
    plan.from = std::move(local);
    plan.upload_resumed = true;  // the uploader tries again in the background
    return;
  }
  const int64_t local_step = local ? local->snapshot.step : -1;
  std::set<std::string> reported;  // remote entries already spoken of
  auto skip = [&](const std::string& name, const std::string& why) {
    skip_report(remote->url().str(name), why);
    reported.insert(name);
  };
  auto take = [&](const std::string& name) {
    if (take_remote(*remote, name, p, plan)) return true;
    reported.insert(name);  // (take_remote said why)
    return false;
  };
  // Whatever is taken, the remote steps newer than it are said once: an upload cut short, or a
  // checkpoint newer than what LATEST names (a timeline given up without being set aside).
  auto done = [&] {
    const int64_t from = plan.from ? plan.from->snapshot.step : -1;
    for (const auto& e : entries)
      if (e.step > from && !reported.count(e.name))
        skip(e.name, e.complete ? "newer than the checkpoint LATEST names; not resumed"
                                : "incomplete: no manifest.json (an upload cut short); ignored");
  };
  auto take_local = [&] {
    plan.upload_resumed = !remote_latest || step_of(*remote_latest) < local_step;
    plan.from = std::move(local);
    done();
  };
  if (remote_latest && step_of(*remote_latest) > local_step) {
    const bool whole = std::any_of(entries.begin(), entries.end(),
                                   [&](const auto& e) { return e.name == *remote_latest && e.complete; });
    if (!whole) skip(*remote_latest, "named by LATEST but incomplete: no manifest.json");
    else if (take(*remote_latest)) return done();
  }
  if (local_is_latest) return take_local();
  // Neither LATEST verifies: the newest checkpoint that does, local or remote.
  for (auto it = entries.rbegin(); it != entries.rend() && it->step > local_step; ++it)
    if (it->complete && !reported.count(it->name) && take(it->name)) return done();
  if (local) return take_local();
  done();
  const auto n = std::count_if(entries.begin(), entries.end(), [](const auto& e) { return e.complete; });
  DLRUN_CHECK_INPUT(n == 0,
                    "--resume auto: {} holds {} complete checkpoint(s) and none of them verifies (see the warnings "
                    "above); refusing to start over into it, where retention would mix the two runs. `dlrun ckpt list "
                    "{}` shows them; --resume never --force sets them aside and starts fresh",
                    remote->url().str(), n, remote->url().str());
}

}  // namespace

ResumePlan plan_resume(const std::string& resume, bool force, const RunDir& dir, ckpt::RemoteStore* remote,
                       const CheckpointOptions& opts) {
  ResumePlan plan;
  if (resume == "never") {
    const auto previous = dir.previous_run_files();
    if (!previous.empty()) {
      DLRUN_CHECK_INPUT(force,
                        "{} already holds a run ({}); use --resume auto to continue it, another --run-dir, or --force "
                        "to set it aside and start fresh",
                        dir.path(), fmt::join(previous, ", "));
      plan.set_aside = true;
    }
    if (remote) {
      ckpt::Patience p = patience(opts);
      const auto entries = p.run("list " + remote->url().str(), [&] { return remote->list(); });
      if (!entries.empty()) {
        DLRUN_CHECK_INPUT(force,
                          "--resume never: {} holds {} checkpoint(s) of an earlier run, which a fresh start would mix "
                          "with its own; use --resume auto to continue that run, another checkpoint.remote prefix, or "
                          "--force to set them aside (within the bucket) and start fresh",
                          remote->url().str(), entries.size());
        plan.set_aside_remote = true;
      }
    }
    return plan;
  }
  if (resume == "auto") {
    plan_auto(dir, opts, remote, plan);
    return plan;
  }
  if (remote::is_s3_url(resume)) {
    DLRUN_CHECK_INPUT(remote != nullptr, "--resume {}: an s3:// checkpoint needs checkpoint.remote (for the "
                                         "endpoint, region and credentials)", resume);
    const auto url = remote::parse_s3_url(resume, "--resume");
    const auto slash = url.prefix.rfind('/');
    const std::string name = slash == std::string::npos ? url.prefix : url.prefix.substr(slash + 1);
    remote::S3Url parent{url.bucket, slash == std::string::npos ? "" : url.prefix.substr(0, slash)};
    ckpt::RemoteStore store(remote->config(), parent);
    ckpt::Patience p = patience(opts);
    ckpt::FileSet set = p.run("download " + resume, [&] { return store.fetch(name); });
    plan.from = ckpt::Loaded{resume, ckpt::parse(set, resume)};
    plan.fetched = std::move(set);
  } else {
    plan.from = ckpt::Loaded{resume, ckpt::load(resume)};
    plan.upload_resumed = remote != nullptr;  // the store may not hold it (retention, an older run's)
  }
  plan.abandon_after = plan.from->snapshot.step;
  return plan;
}

void save_weights(const torch::nn::Module& model, const std::string& path) {
  ckpt::TensorDict d;
  for (const auto& [n, t] : models::state_dict(model)) d.emplace_back(n, t.detach().to(torch::kCPU).contiguous());
  ckpt::write_tensor_file(path, d);
}

}  // namespace dlrun::train
