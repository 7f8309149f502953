// Choosing the checkpoint to resume from (see resume.h).
#include "train/resume.h"

#include <fmt/ranges.h>

#include "base/log.h"
#include "checkpoint/tensor_file.h"
#include "models/model.h"

namespace dlrun::train {

namespace {

void skip_report(const std::string& path, const std::string& why) { log0::warn("skipping checkpoint {}: {}", path, why); }

/// The newest remote checkpoint newer than `local_step` that downloads and verifies.
void newest_remote(ckpt::RemoteStore& remote, int64_t local_step, ResumePlan& plan) {
  std::vector<ckpt::RemoteEntry> entries;
  try {
    entries = remote.list();
  } catch (const remote::S3Error& e) {
    log0::warn("cannot list the remote checkpoints ({}); resuming from the local ones", e.what());
    return;
  }
  for (auto it = entries.rbegin(); it != entries.rend() && it->step > local_step; ++it) {
    const std::string where = remote.url().str(it->name);
    if (!it->complete) {
      skip_report(where, "incomplete: no manifest.json (an upload cut short); ignored");
      continue;
    }
    try {
      log0::info("downloading {} (newer than any local checkpoint)", where);
      ckpt::FileSet set = remote.fetch(it->name);
      ckpt::Snapshot snap = ckpt::parse(set, where);
      plan.from = ckpt::Loaded{where, std::move(snap)};
      plan.fetched = std::move(set);
      return;
    } catch (const ckpt::NewerFormatError&) {
      throw;  // not damage: skipping it would continue from an older step beside it
    } catch (const Error& e) {
      if (e.code() != ExitCode::kBadInput) throw;
      skip_report(where, e.message());
    } catch (const remote::S3Error& e) {
      log0::warn("cannot download {} ({}); resuming from the local checkpoints", where, e.what());
      return;
    } catch (const std::exception& e) {  // a manifest or state.json that parses but does not fit
      skip_report(where, e.what());
    }
  }
}

}  // namespace

ResumePlan plan_resume(const std::string& resume, bool force, const RunDir& dir, ckpt::RemoteStore* remote) {
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
      std::vector<ckpt::RemoteEntry> entries;
      try {
        entries = remote->list();
      } catch (const remote::S3Error& e) {
        fail_runtime("--resume never: cannot check that {} holds no earlier run: {}", remote->url().str(), e.what());
      }
      DLRUN_CHECK_INPUT(entries.empty(),
                        "--resume never: {} holds {} checkpoint(s) of an earlier run, which a fresh start would mix "
                        "with its own (and --force does not set remote checkpoints aside); use another "
                        "checkpoint.remote prefix, or --resume auto to continue that run",
                        remote->url().str(), entries.size());
    }
  } else if (resume == "auto") {
    plan.from = ckpt::load_newest(dir.checkpoints(), skip_report);
    if (remote) newest_remote(*remote, plan.from ? plan.from->snapshot.step : -1, plan);
  } else if (remote::is_s3_url(resume)) {
    DLRUN_CHECK_INPUT(remote != nullptr, "--resume {}: an s3:// checkpoint needs checkpoint.remote (for the "
                                         "endpoint, region and credentials)", resume);
    const auto url = remote::parse_s3_url(resume, "--resume");
    const auto slash = url.prefix.rfind('/');
    const std::string name = slash == std::string::npos ? url.prefix : url.prefix.substr(slash + 1);
    remote::S3Url parent{url.bucket, slash == std::string::npos ? "" : url.prefix.substr(0, slash)};
    ckpt::RemoteStore store(remote->config(), parent);
    ckpt::FileSet set = store.fetch(name);
    plan.from = ckpt::Loaded{resume, ckpt::parse(set, resume)};
    plan.fetched = std::move(set);
  } else {
    plan.from = ckpt::Loaded{resume, ckpt::load(resume)};
  }
  return plan;
}

void save_weights(const torch::nn::Module& model, const std::string& path) {
  ckpt::TensorDict d;
  for (const auto& [n, t] : models::state_dict(model)) d.emplace_back(n, t.detach().to(torch::kCPU).contiguous());
  ckpt::write_tensor_file(path, d);
}

}  // namespace dlrun::train
