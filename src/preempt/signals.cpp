// The stop flag and the signal handlers that set it (docs/design.md, "Preemption"). A handler only stores
// into lock-free atomics (async-signal-safe); the training loop polls stop_requested() at
// step boundaries, saves and exits 75. A second signal means "now": _exit(128 + signo) -- unless
// it is the same request delivered twice (within kSameRequestS of the first: systemd, Slurm and
// a forwarding launcher all do that), or the stop's checkpoint is already committed.
#include "preempt/preempt.h"

#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <string>
#include <mutex>

#include "base/env.h"

namespace dlrun::preempt {
namespace {

static_assert(std::atomic<int>::is_always_lock_free, "signal handlers need lock-free atomics");
static_assert(std::atomic<int64_t>::is_always_lock_free, "signal handlers need lock-free atomics");
static_assert(std::atomic<bool>::is_always_lock_free, "signal handlers need lock-free atomics");

constexpr int kSignals[] = {SIGTERM, SIGUSR1, SIGINT};
constexpr int kByRequest = -1;  // g_first value when request_stop() came first

std::atomic<bool> g_stop{false};
std::atomic<int> g_first{0};          // 0: none; a signal number; or kByRequest
std::atomic<int> g_signals{0};        // signals received since reset()
std::atomic<int64_t> g_stop_ns{0};    // wall time of the first request, ns since epoch
std::atomic<int64_t> g_signal_ns{0};  // monotonic time of the first signal, ns
std::atomic<int64_t> g_signal_wall_ns{0};  // its wall time
std::atomic<int> g_phase{0};          // StopPhase
std::atomic<int> g_ignored{0};        // later signals taken for the first one, or after the commit
std::mutex g_reason_mutex;            // guards g_reason (never touched by the handler)
std::string g_reason;

int64_t wall_ns() {  // clock_gettime is async-signal-safe
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void on_signal(int signo) {
  const int64_t now = wall_ns(), mono = mono_ns();
  int64_t none = 0;
  if (g_signal_ns.compare_exchange_strong(none, mono)) g_signal_wall_ns.store(now);  // the first signal's
  if (g_signals.fetch_add(1) > 0) {
    const bool same_request = mono - g_signal_ns.load() < static_cast<int64_t>(kSameRequestS * 1e9);
    if (same_request || g_phase.load() == static_cast<int>(StopPhase::kCommitted)) {
      g_ignored.fetch_add(1);
      return;
    }
    ::_exit(128 + signo);
  }
  int expected = 0;
  if (g_first.compare_exchange_strong(expected, signo)) g_stop_ns.store(now);
  g_stop.store(true);
}

const char* signal_name(int signo) {
  switch (signo) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: return "signal";
  }
}

}  // namespace

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals) sigaddset(&sa.sa_mask, s);  // handlers never interleave
  sa.sa_flags = SA_RESTART;  // blocking reads in data loaders are not interrupted
  for (int s : kSignals) ::sigaction(s, &sa, nullptr);
}

void uninstall_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals) ::sigaction(s, &sa, nullptr);
}

void install_early_signal_handlers() {
  sigset_t ours;
  sigemptyset(&ours);
  for (int s : kSignals) sigaddset(&ours, s);
  ::sigprocmask(SIG_UNBLOCK, &ours, nullptr);  // one thread yet: the process mask
  install_signal_handlers();
}

void release_early_signal_handlers() {
  uninstall_signal_handlers();
  const int first = g_first.load();
  if (first > 0) ::raise(first);  // the default action: the process ends by that signal
}

bool die_with_launcher() {
  const std::string v = env("DLRUN_LAUNCHER_PID");
  if (v.empty()) return false;
  char* end = nullptr;
  const long launcher = std::strtol(v.c_str(), &end, 10);
  if (*end != '\0' || launcher <= 1) return false;
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) return false;
  if (::getppid() != static_cast<pid_t>(launcher)) ::raise(SIGKILL);  // the launcher died before prctl
  return true;
}

bool stop_requested() { return g_stop.load(); }

void request_stop(const std::string& reason, double notice_time) {
  {
    std::lock_guard<std::mutex> lock(g_reason_mutex);
    if (g_first.load() == 0) {
      g_reason = reason;
      int64_t now = wall_ns();
      if (notice_time > 0 && notice_time * 1e9 < static_cast<double>(now)) now = static_cast<int64_t>(notice_time * 1e9);
      int expected = 0;
      if (g_first.compare_exchange_strong(expected, kByRequest)) g_stop_ns.store(now);
    }
  }
  g_stop.store(true);
}

std::string stop_reason() {
  const int first = g_first.load();
  if (first == 0) return "";
  if (first > 0) return signal_name(first);
  std::lock_guard<std::mutex> lock(g_reason_mutex);
  return g_reason;
}

int stop_signal() {
  const int first = g_first.load();
  return first > 0 ? first : 0;
}

double stop_time() { return double(g_stop_ns.load()) / 1e9; }

void set_stop_phase(StopPhase phase) { g_phase.store(static_cast<int>(phase)); }

int signals_ignored() { return g_ignored.load(); }

double signal_time() { return double(g_signal_wall_ns.load()) / 1e9; }

void reset() {
  std::lock_guard<std::mutex> lock(g_reason_mutex);
  g_stop.store(false);
  g_first.store(0);
  g_signals.store(0);
  g_stop_ns.store(0);
  g_signal_ns.store(0);
  g_signal_wall_ns.store(0);
  g_phase.store(0);
  g_ignored.store(0);
  g_reason.clear();
}

}  // namespace dlrun::preempt
