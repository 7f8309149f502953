// `dlrun check-resume`'s algorithm (see check_resume.h).
#include "train/check_resume.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "base/clock.h"
#include "base/env.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "run/child.h"
#include "run/metrics_log.h"
#include "train/averaging/averages.h"
#include "train/state/checkpoint_diff.h"

namespace dlrun::train {
namespace {

/// Per-step losses of a run's metrics.jsonl: the last record of each step wins (a resumed run
/// replays the steps after its checkpoint).
std::map<int64_t, double> losses(const std::string& run) {
  std::map<int64_t, double> out;
  MetricsLog(run + "/metrics.jsonl").poll([&](const MetricsRecord& r) {
    if (r.is_step_line() && r.step() && r.number("loss")) out[*r.step()] = *r.number("loss");
  });
  return out;
}

/// The committed checkpoints of a run: step -> directory.
std::map<int64_t, std::string> checkpoints_of(const std::string& run) {
  std::map<int64_t, std::string> out;
  const std::string dir = run + "/checkpoints";
  if (!fsutil::is_directory(dir)) return out;
  for (const auto& name : fsutil::list_names(dir))
    if (name.rfind("step-", 0) == 0 && name.find(".tmp") == std::string::npos &&
        fsutil::path_exists(dir + "/" + name + "/manifest.json"))
      out[std::strtoll(name.c_str() + 5, nullptr, 10)] = dir + "/" + name;
  return out;
}

std::string sha_of(const nlohmann::json& summary) {
  const auto v = summary.value("params_sha256", nlohmann::json());
  return v.is_string() ? v.get<std::string>() : std::string("(none)");
}

std::string launcher_path(const CheckResumeOptions& o, const std::string& self) {
  if (!o.launcher.empty()) return o.launcher;
  if (const std::string env = dlrun::env("DLRUN_LAUNCH"); !env.empty()) return env;
  const std::string beside = fsutil::parent_of(fsutil::parent_of(self)) + "/scripts/dlrun-launch";
  return fsutil::path_exists(beside) ? beside : "dlrun-launch";
}

struct Interruption {
  std::string signal;    ///< "SIGTERM", "SIGUSR1", "SIGKILL", or "" for the last segment
  int64_t at_step = -1;  ///< the logged step when the signal was sent (-1: the segment ended first)
  int status = 0;        ///< waitpid's
  std::string outcome;
};

class Checker {
 public:
  explicit Checker(const CheckResumeOptions& o) : o_(o), self_(self_exe()) {
    for (const auto& ov : o.overrides) common_.push_back(ov);
    // Checkpoints every step, all kept, local, in the run directory: states to compare.
    for (const char* ov : {"checkpoint.every_steps=1", "checkpoint.every_minutes=0", "checkpoint.keep_last=0",
                           "checkpoint.dir=", "checkpoint.remote=", "log.every_steps=1", "log.progress=none"})
      common_.emplace_back(ov);
    common_.push_back(fmt::format("train.max_steps={}", o.steps));
  }

  std::vector<std::string> argv(const std::string& run) const {
    std::vector<std::string> a;
    if (o_.nproc > 1) a = {launcher_path(o_, self_), "--standalone", "--nproc-per-node", std::to_string(o_.nproc)};
    else a = {self_};
    a.insert(a.end(), {"train", o_.config});
    a.insert(a.end(), common_.begin(), common_.end());
    a.insert(a.end(), {"--run-dir", run});
    return a;
  }

  /// Runs to the end; returns the exit status.
  int run_through(const std::string& run, const std::string& log, double timeout_s) {
    int status = 0;
    {
      Child c(argv(run), log);
      const double deadline = mono_now() + timeout_s;
      while (!c.poll()) {
        DLRUN_CHECK(mono_now() < deadline, ExitCode::kRuntime, "check-resume: {} ran past {:.0f} s (log: {})", run,
                    timeout_s, log);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      status = *c.poll();
    }
    reap_descendants(60);
    return status;
  }

  /// Starts a segment, sends `sig` once a step >= `target` is logged (by this segment), waits.
  Interruption interrupt(const std::string& run, const std::string& log, int sig, int64_t target, double timeout_s) {
    MetricsLog tail = MetricsLog::from_end(run + "/metrics.jsonl");  // this segment's steps only
    int64_t highest = -1;
    Child c(argv(run), log);
    const double deadline = mono_now() + timeout_s;
    Interruption s;
    s.signal = sig == SIGKILL ? "SIGKILL" : sig == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
    while (!c.poll()) {
      DLRUN_CHECK(mono_now() < deadline, ExitCode::kRuntime, "check-resume: {} ran past {:.0f} s (log: {})", run,
                  timeout_s, log);
      tail.poll([&](const MetricsRecord& r) {
        if (r.is_step_line() && r.step()) highest = std::max(highest, *r.step());
      });
      if (highest >= target) {
        c.signal(sig);
        s.at_step = highest;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    while (!c.poll()) {
      DLRUN_CHECK(mono_now() < deadline, ExitCode::kRuntime, "check-resume: {} did not stop after {} (log: {})", run,
                  s.signal, log);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    s.status = *c.poll();
    s.outcome = describe_status(s.status);
    reap_descendants(60);
    return s;
  }

  const CheckResumeOptions& o_;
  std::string self_;
  std::vector<std::string> common_;
};

}  // namespace

CheckResumeReport check_resume(const CheckResumeOptions& o) {
  DLRUN_CHECK_INPUT(o.steps >= 2, "--steps must be at least 2 (interruptions fall between the first and the last)");
  DLRUN_CHECK_INPUT(o.interruptions >= 1 && o.interruptions < o.steps,
                    "--interruptions must be between 1 and --steps - 1 ({}), got {}", o.steps - 1, o.interruptions);
  const uint64_t seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}() & 0xffffff;
  std::string work = o.work_dir;
  if (work.empty()) {
    std::string tmpl = temp_dir() + "/dlrun-check-resume-XXXXXX";
    DLRUN_CHECK(::mkdtemp(tmpl.data()) != nullptr, ExitCode::kRuntime, "check-resume: mkdtemp: {}",
                std::strerror(errno));
    work = tmpl;
  } else {
    DLRUN_CHECK_INPUT(!fsutil::path_exists(work + "/uninterrupted") && !fsutil::path_exists(work + "/interrupted"),
                      "--work-dir {}: it holds an earlier check (uninterrupted/, interrupted/); give an empty one", work);
    fsutil::make_dirs(work);
  }
  become_subreaper();  // the launcher's workers are reaped here (reap_descendants)
  ::setenv("DLRUN", self_exe().c_str(), 1);  // what the launcher runs: this very binary
  Checker ck(o);
  const std::string a = work + "/uninterrupted", b = work + "/interrupted";
  log::info("check-resume: {} steps uninterrupted, then with {} interruption(s) (seed {}), in {}", o.steps,
            o.interruptions, seed, work);

  const double start = mono_now();
  const int st = ck.run_through(a, work + "/uninterrupted.log", 24 * 3600.0);
  DLRUN_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, ExitCode::kRuntime,
              "check-resume: the uninterrupted run failed ({}); its log: {}/uninterrupted.log", describe_status(st), work);
  const double once = mono_now() - start;
  const double timeout = 120.0 + 10.0 * once;  // a segment far slower than the whole reference run is stuck

  std::mt19937_64 rng(seed);
  std::set<int64_t> targets;
  while (static_cast<int>(targets.size()) < o.interruptions)
    targets.insert(std::uniform_int_distribution<int64_t>(1, o.steps - 1)(rng));
  // The three kinds in an order drawn once, then in turn: K >= 3 interruptions use each.
  std::vector<int> kinds = {SIGTERM, SIGUSR1, SIGKILL};
  std::shuffle(kinds.begin(), kinds.end(), rng);
  std::vector<Interruption> segments;
  int n = 0;
  for (int64_t target : targets) {
    const int sig = kinds[static_cast<size_t>(n) % kinds.size()];
    const std::string log = fmt::format("{}/interrupted-{}.log", work, ++n);
    Interruption s = ck.interrupt(b, log, sig, target, timeout);
    log::info("check-resume: segment {}: {} at step {} -> {}", n, s.signal, s.at_step, s.outcome);
    segments.push_back(s);
    // A segment ends as its signal says (75 after SIGTERM or SIGUSR1, killed by SIGKILL), or, when
    // the run reached its end first, with 0. Anything else is a failure of the run, not a difference.
    const bool stopped = s.at_step >= 0 && ((sig == SIGKILL && WIFSIGNALED(s.status) && WTERMSIG(s.status) == SIGKILL) ||
                                            (sig != SIGKILL && WIFEXITED(s.status) && WEXITSTATUS(s.status) == 75));
    const bool finished = WIFEXITED(s.status) && WEXITSTATUS(s.status) == 0;
    DLRUN_CHECK(stopped || finished, ExitCode::kRuntime,
                "check-resume: segment {} of the interrupted run ended with {} ({} {}); its log: {}", n, s.outcome,
                s.at_step >= 0 ? "after its " + s.signal + " at step " + std::to_string(s.at_step) : "before its",
                s.at_step >= 0 ? "" : s.signal, log);
  }
  const int last = ck.run_through(b, fmt::format("{}/interrupted-{}.log", work, ++n), timeout);
  segments.push_back({"", -1, last, describe_status(last)});
  DLRUN_CHECK(WIFEXITED(last) && WEXITSTATUS(last) == 0, ExitCode::kRuntime,
              "check-resume: the interrupted run's last segment failed ({}); its log: {}/interrupted-{}.log",
              describe_status(last), work, n);

  // Compare: every step's loss, then the final weights.
  const auto la = losses(a), lb = losses(b);
  const auto sa = nlohmann::json::parse(fsutil::read_file(a + "/summary.json")),
             sb = nlohmann::json::parse(fsutil::read_file(b + "/summary.json"));
  std::optional<int64_t> first;
  for (const auto& [step, loss] : la) {
    const auto it = lb.find(step);
    if (it == lb.end() || !(it->second == loss || (std::isnan(it->second) && std::isnan(loss)))) {
      first = step;
      break;
    }
  }
  if (!first && lb.size() != la.size()) first = la.empty() ? 1 : la.rbegin()->first + 1;
  const auto fingerprint = [](const nlohmann::json& summary) {  // the weights', and the averages' when there are any
    nlohmann::json f = nlohmann::json::array({summary.value("params_sha256", nlohmann::json())});
    for (const AverageKind& k : average_kinds()) {
      const char* avg = k.name;
      const auto a = summary.value(avg, nlohmann::json());
      f.push_back(a.is_object() ? a.value("params_sha256", nlohmann::json()) : nlohmann::json());
    }
    return f;
  };
  const bool same_end = fingerprint(sa) == fingerprint(sb);
  const bool identical = !first && same_end;

  nlohmann::json report = {{"identical", identical}, {"steps", o.steps}, {"seed", seed}, {"work_dir", work},
                           {"params_sha256", {sa.value("params_sha256", nlohmann::json()),
                                              sb.value("params_sha256", nlohmann::json())}}};
  nlohmann::json segs = nlohmann::json::array();
  for (const auto& s : segments) segs.push_back({{"signal", s.signal}, {"at_step", s.at_step}, {"outcome", s.outcome}});
  report["segments"] = segs;
  std::string verdict;
  if (identical) {
    const auto delivered = std::count_if(segments.begin(), segments.end(), [](const Interruption& g) { return g.at_step >= 0; });
    // Name every part compared: the weights, and each average the run kept (EMA, SWA).
    std::string averages;
    nlohmann::json compared = nlohmann::json::array({"losses", "params_sha256"});
    for (const AverageKind& k : average_kinds()) {
      const auto avg = sa.value(k.name, nlohmann::json());
      if (!avg.is_object() || !avg.contains("params_sha256") || avg["params_sha256"].is_null()) continue;
      averages += fmt::format(", the {}'s params_sha256 {}", k.what,
                              avg["params_sha256"].get<std::string>().substr(0, 16));
      compared.push_back(std::string(k.name) + ".params_sha256");
    }
    report["compared"] = compared;
    verdict = fmt::format("identical: {} steps' losses, the final params_sha256 {}{} match after {} interruption(s)",
                          la.size(), sha_of(sa), averages, delivered);
  } else {
    const int64_t at = first.value_or(o.steps + 1);
    report["first_difference_step"] = first ? nlohmann::json(*first) : nlohmann::json(nullptr);
    // Which state differs: in the last checkpoint both runs wrote before the first difference;
    // when those are equal (the resume did not restore what was saved), in the first one after.
    const auto ca = checkpoints_of(a), cb = checkpoints_of(b);
    std::optional<int64_t> before, after;
    for (const auto& [step, dir] : ca) {
      if (!cb.count(step)) continue;
      if (step < at) before = step;
      else if (!after) after = step;
    }
    std::string where;
    PartsCompared parts;
    if (before) parts = compare_checkpoints(ca.at(*before), cb.at(*before));
    std::vector<std::string>& diff = parts.differ;
    std::vector<std::string>& same = parts.same;
    if (before && !diff.empty()) {
      report["compared_checkpoint_step"] = *before;
      where = fmt::format("; at step {}, the last checkpoint both runs wrote before it, these differ: {} (equal: {})",
                          *before, fmt::join(diff, ", "), fmt::join(same, ", "));
    } else if (after) {
      parts = compare_checkpoints(ca.at(*after), cb.at(*after));
      report["compared_checkpoint_step"] = *after;
      where = fmt::format("; {} at step {} these differ: {} (equal: {}). State the resume did not restore, or "
                          "that no checkpoint holds, shows first there; the weights and the optimizer follow any cause",
                          before ? fmt::format("the checkpoints of step {} are equal in every part, and", *before)
                                 : std::string("with no common checkpoint before it,"),
                          *after, fmt::join(diff, ", "), fmt::join(same, ", "));
    }
    report["differing_state"] = diff;
    report["same_state"] = same;
    verdict = first ? fmt::format("NOT identical: first difference at step {} (loss {} uninterrupted, {} interrupted){}",
                                  *first, la.count(*first) ? fmt::format("{}", la.at(*first)) : "missing",
                                  lb.count(*first) ? fmt::format("{}", lb.at(*first)) : "missing", where)
                    : fmt::format("NOT identical: every loss matches but the final weights or moving average differ "
                                  "({} vs {}){}", fingerprint(sa).dump(), fingerprint(sb).dump(), where);
  }
  report["verdict"] = verdict;
  if (identical && !o.keep && o.work_dir.empty()) fsutil::remove_tree(work);
  else log::info("check-resume: the runs are kept in {}", work);
  return {identical, verdict, report, work};
}


}  // namespace dlrun::train
