// `dlrun check-resume CONFIG [key=value ...] --steps N [--interruptions K] [--nproc P] [--seed S]
//  [--work-dir DIR] [--keep] [--json]`: does this config resume exactly? Trains the first N steps
// once without interruption and once with K interruptions at random steps -- SIGTERM, SIGUSR1
// and SIGKILL mixed, each resumed with --resume auto; through scripts/dlrun-launch when
// --nproc > 1 (a kill takes the whole process group, as losing the machine does) -- then
// compares every step's logged loss and the final params_sha256. On a difference it names the
// first step that differs and which state differs in the last checkpoint both runs wrote
// before it (weights, optimizer, scaler, micro-batch split, RNG, data position, train state,
// verdicts, EMA, SWA).
// Exit 0 only when the two runs are identical; 1 when they differ (or a run failed), 2 for a
// bad config or flag. Both runs save every step (checkpoint.every_steps=1, all kept) in a
// work directory of their own, removed afterwards unless --keep or a difference.
// docs/checkpoints.md, "Checking that a config resumes exactly".
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <algorithm>
#include <random>
#include <set>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "base/json_limits.h"
#include "base/log.h"
#include "checkpoint/tensor_file.h"
#include "cli/app.h"
#include "cli/config_args.h"

namespace dlrun::cli {
namespace {

struct CheckResumeOptions {
  ConfigArgs config;
  int64_t steps = 0;
  int interruptions = 3;
  int nproc = 1;
  int64_t seed = -1;  ///< -1: drawn, and printed so that the check can be repeated
  std::string work_dir;
  std::string launcher;
  bool keep = false;
  bool json = false;
};

/// One child training process (dlrun, or the launcher and its workers), in a process group of
/// its own, its output in a log file.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::string& log) {
    std::vector<char*> args;  // made before fork(): the child only calls async-signal-safe functions
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    DLRUN_CHECK(pid_ >= 0, ExitCode::kRuntime, "check-resume: fork failed: {}", std::strerror(errno));
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // check-resume itself killed: its runs end with it
      if (::getppid() != parent) ::_exit(126);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) ::_exit(126);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execvp(args[0], args.data());
      static const char kMsg[] = "check-resume: cannot run the command\n";
      (void)!::write(2, kMsg, sizeof kMsg - 1);
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // (also in the parent: no race with the first signal)
  }
  ~Child() {
    if (pid_ > 0 && !status_) {
      ::killpg(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  /// The exit status when it has ended (waitpid's), else nullopt.
  std::optional<int> poll() {
    if (status_) return status_;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) status_ = st;
    return status_;
  }
  void signal(int sig) { sig == SIGKILL ? ::killpg(pid_, SIGKILL) : ::kill(pid_, sig); }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

/// Waits (up to `timeout_s`) until every process this one adopted has ended: the launcher's
/// workers, in sessions of their own, outlive a SIGKILL of the launcher by a moment (they end
/// by their parent-death signal), and the next segment must not meet them (the run lock, the
/// GPU's memory). check-resume is their subreaper (run_check), so they are reaped here.
void reap_descendants(double timeout_s) {
  const double deadline = mono_now() + timeout_s;
  while (true) {
    const pid_t pid = ::waitpid(-1, nullptr, WNOHANG);
    if (pid < 0 && errno == ECHILD) return;
    if (pid > 0) continue;
    DLRUN_CHECK(mono_now() < deadline, ExitCode::kRuntime,
                "check-resume: processes of an ended segment are still running after {:.0f} s", timeout_s);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string describe_status(int st) {
  if (WIFEXITED(st)) return fmt::format("exit {}", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return fmt::format("killed by signal {}", WTERMSIG(st));
  return "ended";
}

/// Per-step losses of a run's metrics.jsonl: the last record of each step wins (a resumed run
/// replays the steps after its checkpoint).
std::map<int64_t, double> losses(const std::string& run) {
  std::map<int64_t, double> out;
  const std::string path = run + "/metrics.jsonl";
  if (!fsutil::path_exists(path)) return out;
  const std::string text = fsutil::read_file(path);
  size_t p = 0;
  while (p < text.size()) {
    size_t q = text.find('\n', p);
    if (q == std::string::npos) break;  // a line still being written
    const auto j = nlohmann::json::parse(text.substr(p, q - p), nullptr, false);
    p = q + 1;
    if (j.is_object() && !j.contains("event") && json_int64(j.value("step", nlohmann::json())) && j.contains("loss") &&
        j["loss"].is_number())
      out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

/// The steps a segment logs: its run's metrics.jsonl from where the segment began, new bytes only.
class StepTail {
 public:
  explicit StepTail(std::string path) : path_(std::move(path)) {
    if (std::FILE* f = std::fopen(path_.c_str(), "rb")) {
      std::fseek(f, 0, SEEK_END);
      offset_ = static_cast<long>(std::ftell(f));
      std::fclose(f);
    }
  }
  /// The highest step logged since the segment began (-1: none yet).
  int64_t highest() {
    std::FILE* f = std::fopen(path_.c_str(), "rb");
    if (!f) return best_;
    std::fseek(f, offset_, SEEK_SET);
    char buf[65536];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
      pending_.append(buf, n);
      offset_ += static_cast<long>(n);
    }
    std::fclose(f);
    size_t p = 0;
    for (size_t q; (q = pending_.find('\n', p)) != std::string::npos; p = q + 1) {
      const auto j = nlohmann::json::parse(pending_.substr(p, q - p), nullptr, false);
      if (j.is_object() && !j.contains("event") && j.contains("step") && j["step"].is_number_integer())
        best_ = std::max(best_, j["step"].get<int64_t>());
    }
    pending_.erase(0, p);  // a line still being written waits for its end
    return best_;
  }

 private:
  std::string path_;
  long offset_ = 0;
  std::string pending_;
  int64_t best_ = -1;
};

/// Which state differs between two checkpoint directories of the same step.
std::vector<std::string> differing_state(const std::string& a, const std::string& b, std::vector<std::string>* same) {
  std::vector<std::string> diff;
  auto note = [&](const std::string& what, bool equal) { (equal ? *same : diff).push_back(what); };
  auto tensors_equal = [](const std::string& x, const std::string& y) {
    if (fsutil::path_exists(x) != fsutil::path_exists(y)) return false;
    if (!fsutil::path_exists(x)) return true;
    const auto tx = ckpt::load_tensor_file(x), ty = ckpt::load_tensor_file(y);
    if (tx.size() != ty.size()) return false;
    for (size_t i = 0; i < tx.size(); ++i)
      if (tx[i].first != ty[i].first || !tx[i].second.sizes().equals(ty[i].second.sizes()) ||
          tx[i].second.scalar_type() != ty[i].second.scalar_type() || !torch::equal(tx[i].second, ty[i].second))
        return false;
    return true;
  };
  note("weights", tensors_equal(a + "/model.pt", b + "/model.pt"));
  note("optimizer", tensors_equal(a + "/optim.pt", b + "/optim.pt"));
  if (fsutil::path_exists(a + "/ema.pt") || fsutil::path_exists(b + "/ema.pt"))
    note("EMA", tensors_equal(a + "/ema.pt", b + "/ema.pt"));
  bool rng = true;
  for (const auto& name : fsutil::list_names(a))
    if (name.rfind("rng-rank", 0) == 0) rng = rng && tensors_equal(a + "/" + name, b + "/" + name);
  note("RNG", rng);
  const auto sa = nlohmann::json::parse(fsutil::read_file(a + "/state.json"), nullptr, false),
             sb = nlohmann::json::parse(fsutil::read_file(b + "/state.json"), nullptr, false);
  auto same_keys = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys)
      if (sa.value(k, nlohmann::json()) != sb.value(k, nlohmann::json())) return false;
    return true;
  };
  note("scaler", same_keys({"grad_scaler"}));
  if (sa.contains("micro_batch") || sb.contains("micro_batch")) note("micro-batch split", same_keys({"micro_batch"}));
  note("data position", same_keys({"epoch", "cursor"}));
  note("train state", same_keys({"step", "skipped_steps", "eval_pending"}));
  if (sa.contains("monitor") || sb.contains("monitor")) note("verdicts", same_keys({"monitor"}));
  if (fsutil::path_exists(a + "/swa.pt") || fsutil::path_exists(b + "/swa.pt"))
    note("SWA", tensors_equal(a + "/swa.pt", b + "/swa.pt") && same_keys({"swa"}));
  return diff;
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

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  DLRUN_CHECK(n > 0, ExitCode::kRuntime, "check-resume: cannot find its own binary (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

std::string launcher_path(const CheckResumeOptions& o, const std::string& self) {
  if (!o.launcher.empty()) return o.launcher;
  if (const char* env = std::getenv("DLRUN_LAUNCH"); env && *env) return env;
  const std::string beside = fsutil::parent_of(fsutil::parent_of(self)) + "/scripts/dlrun-launch";
  return fsutil::path_exists(beside) ? beside : "dlrun-launch";
}

struct Segment {
  std::string signal;    ///< "SIGTERM", "SIGUSR1", "SIGKILL", or "" for the last segment
  int64_t at_step = -1;  ///< the logged step when the signal was sent (-1: the segment ended first)
  int status = 0;        ///< waitpid's
  std::string outcome;
};

class Checker {
 public:
  explicit Checker(const CheckResumeOptions& o) : o_(o), self_(self_exe()) {
    for (const auto& ov : o.config.overrides) common_.push_back(ov);
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
    a.insert(a.end(), {"train", o_.config.path});
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
  Segment interrupt(const std::string& run, const std::string& log, int sig, int64_t target, double timeout_s) {
    StepTail tail(run + "/metrics.jsonl");
    Child c(argv(run), log);
    const double deadline = mono_now() + timeout_s;
    Segment s;
    s.signal = sig == SIGKILL ? "SIGKILL" : sig == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
    while (!c.poll()) {
      DLRUN_CHECK(mono_now() < deadline, ExitCode::kRuntime, "check-resume: {} ran past {:.0f} s (log: {})", run,
                  timeout_s, log);
      const int64_t step = tail.highest();
      if (step >= target) {
        c.signal(sig);
        s.at_step = step;
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

void run_check(const CheckResumeOptions& o) {
  const Config cfg = load_validated(o.config);  // a bad config is refused here, before anything runs
  (void)cfg;
  DLRUN_CHECK_INPUT(o.steps >= 2, "--steps must be at least 2 (interruptions fall between the first and the last)");
  DLRUN_CHECK_INPUT(o.interruptions >= 1 && o.interruptions < o.steps,
                    "--interruptions must be between 1 and --steps - 1 ({}), got {}", o.steps - 1, o.interruptions);
  const uint64_t seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}() & 0xffffff;
  std::string work = o.work_dir;
  if (work.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/dlrun-check-resume-XXXXXX";
    DLRUN_CHECK(::mkdtemp(tmpl.data()) != nullptr, ExitCode::kRuntime, "check-resume: mkdtemp: {}",
                std::strerror(errno));
    work = tmpl;
  } else {
    DLRUN_CHECK_INPUT(!fsutil::path_exists(work + "/uninterrupted") && !fsutil::path_exists(work + "/interrupted"),
                      "--work-dir {}: it holds an earlier check (uninterrupted/, interrupted/); give an empty one", work);
    fsutil::make_dirs(work);
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // the launcher's workers are reaped here (reap_descendants)
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
  std::vector<Segment> segments;
  int n = 0;
  for (int64_t target : targets) {
    const int sig = kinds[static_cast<size_t>(n) % kinds.size()];
    const std::string log = fmt::format("{}/interrupted-{}.log", work, ++n);
    Segment s = ck.interrupt(b, log, sig, target, timeout);
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
    for (const char* avg : {"ema", "swa"}) {
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
    const auto delivered = std::count_if(segments.begin(), segments.end(), [](const Segment& g) { return g.at_step >= 0; });
    verdict = fmt::format("identical: {} steps' losses and the final params_sha256 {} match after {} interruption(s)",
                          la.size(), sha_of(sa), delivered);
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
    std::vector<std::string> same, diff;
    if (before) diff = differing_state(ca.at(*before), cb.at(*before), &same);
    if (before && !diff.empty()) {
      report["compared_checkpoint_step"] = *before;
      where = fmt::format("; at step {}, the last checkpoint both runs wrote before it, these differ: {} (equal: {})",
                          *before, fmt::join(diff, ", "), fmt::join(same, ", "));
    } else if (after) {
      same.clear();
      diff = differing_state(ca.at(*after), cb.at(*after), &same);
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
  if (o.json) std::printf("%s\n", report.dump().c_str());
  else std::printf("%s\n", verdict.c_str());
  if (identical && !o.keep && o.work_dir.empty()) fsutil::remove_tree(work);
  else log::info("check-resume: the runs are kept in {}", work);
  if (!identical) throw Error(ExitCode::kRuntime, "check-resume: the interrupted run differs from the uninterrupted one");
}

}  // namespace

void setup_check_resume(CLI::App& app) {
  auto* cmd = app.add_subcommand("check-resume",
                                 "prove that a config resumes exactly: N steps uninterrupted vs with K random "
                                 "interruptions (SIGTERM, SIGUSR1, SIGKILL), compared step by step");
  auto o = std::make_shared<CheckResumeOptions>();
  add_config_args(cmd, o->config);
  cmd->add_option("--steps", o->steps, "optimizer steps of each run")->required()->check(CLI::Range(2, 100000000));
  cmd->add_option("--interruptions", o->interruptions, "interruptions of the second run, at random steps")
      ->capture_default_str();
  cmd->add_option("--nproc", o->nproc, "ranks: more than 1 runs through scripts/dlrun-launch --standalone")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of the interruption steps and signals (default: drawn, and printed)");
  cmd->add_option("--work-dir", o->work_dir, "where both runs go (default: a new temporary directory)");
  cmd->add_option("--launcher", o->launcher, "the launcher for --nproc > 1 (default: $DLRUN_LAUNCH, else "
                                            "scripts/dlrun-launch beside the build, else dlrun-launch on PATH)");
  cmd->add_flag("--keep", o->keep, "keep the work directory when the runs are identical too");
  cmd->add_flag("--json", o->json, "print the report as JSON");
  cmd->callback([o] { run_check(*o); });
}

}  // namespace dlrun::cli
