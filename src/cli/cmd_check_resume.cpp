// `dlrun check-resume CONFIG [key=value ...] --steps N [--interruptions K] [--nproc P] [--seed S]
//  [--work-dir DIR] [--keep] [--json]`: does this config resume exactly? The flags, then
// train::check_resume (train/check_resume.h: both runs, the interruptions, the comparison),
// then its verdict. Exit 0 only when the two runs are identical; 1 when they differ (or a run
// failed), 2 for a bad config or flag. docs/checkpoints.md, "Checking that a config resumes
// exactly".
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "base/error.h"
#include "cli/app.h"
#include "cli/config_args.h"
#include "train/check_resume.h"

namespace dlrun::cli {
namespace {

struct CheckResumeArgs {
  ConfigArgs config;
  train::CheckResumeOptions check;
  bool json = false;
};

void run_check(CheckResumeArgs a) {
  (void)load_validated(a.config);  // a bad config is refused here, before anything runs
  a.check.config = a.config.path;
  a.check.overrides = a.config.overrides;
  const train::CheckResumeReport r = train::check_resume(a.check);
  std::printf("%s\n", a.json ? r.json.dump().c_str() : r.verdict.c_str());
  if (!r.identical) throw Error(ExitCode::kRuntime, "check-resume: the interrupted run differs from the uninterrupted one");
}

}  // namespace

void setup_check_resume(CLI::App& app) {
  auto* cmd = app.add_subcommand("check-resume",
                                 "prove that a config resumes exactly: N steps uninterrupted vs with K random "
                                 "interruptions (SIGTERM, SIGUSR1, SIGKILL), compared step by step");
  auto o = std::make_shared<CheckResumeArgs>();
  add_config_args(cmd, o->config);
  cmd->add_option("--steps", o->check.steps, "optimizer steps of each run")->required()->check(CLI::Range(2, 100000000));
  cmd->add_option("--interruptions", o->check.interruptions, "interruptions of the second run, at random steps")
      ->capture_default_str();
  cmd->add_option("--nproc", o->check.nproc, "ranks: more than 1 runs through scripts/dlrun-launch --standalone")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--seed", o->check.seed, "seed of the interruption steps and signals (default: drawn, and printed)");
  cmd->add_option("--work-dir", o->check.work_dir, "where both runs go (default: a new temporary directory)");
  cmd->add_option("--launcher", o->check.launcher, "the launcher for --nproc > 1 (default: $DLRUN_LAUNCH, else "
                                            "scripts/dlrun-launch beside the build, else dlrun-launch on PATH)");
  cmd->add_flag("--keep", o->check.keep, "keep the work directory when the runs are identical too");
  cmd->add_flag("--json", o->json, "print the report as JSON");
  cmd->callback([o] { run_check(*o); });
}

}  // namespace dlrun::cli
