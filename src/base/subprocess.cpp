// Running a helper program (see subprocess.h). posix_spawn, not fork: it is safe from any thread
// of a process that holds LibTorch's and libcurl's threads, and it reports a program that could
// not be executed as an error code instead of a child that exits 127.
#include "base/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "base/clock.h"
#include "base/error.h"

extern char** environ;

namespace dlrun {
namespace {

constexpr int kSliceMs = 100;  // how often the cancel flag and the clock are looked at

/// The child's file descriptors and signals: output to `out_fd`, input and error /dev/null,
/// every other descriptor closed, default signal actions, nothing blocked, its own group.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  explicit SpawnSetup(int out_fd) {
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD}) sigaddset(&defaults, s);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
};

/// Why to stop waiting for the child now, if there is a reason.
std::optional<ProgramResult::End> reason_to_stop(const ProgramLimits& limits, double deadline) {
  if (limits.cancel && limits.cancel->load()) return ProgramResult::End::kCancelled;
  if (mono_now() >= deadline) return ProgramResult::End::kTimedOut;
  return std::nullopt;
}

}  // namespace

ProgramResult run_program(const std::vector<std::string>& argv, const ProgramLimits& limits) {
  DLRUN_CHECK(!argv.empty(), ExitCode::kRuntime, "run_program without a program");
  ProgramResult r;
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    r.error = fmt::format("cannot make a pipe: {}", std::strerror(errno));
    return r;
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = 0;
  {
    SpawnSetup setup(pipe_fds[1]);
    rc = ::posix_spawnp(&pid, args[0], &setup.actions, &setup.attr, args.data(), environ);
  }
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    r.error = std::strerror(rc);
    return r;
  }
  const double deadline = mono_now() + limits.timeout_s;
  std::optional<ProgramResult::End> stopped;
  // Its output, to the end of the pipe.
  char buf[4096];
  while (!(stopped = reason_to_stop(limits, deadline))) {
    pollfd p{pipe_fds[0], POLLIN, 0};
    if (::poll(&p, 1, kSliceMs) <= 0) continue;  // nothing yet (or EINTR): look at the clock again
    const ssize_t n = ::read(pipe_fds[0], buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // the end of its output
    if (r.output.size() + size_t(n) > limits.max_output) {
      stopped = ProgramResult::End::kTooMuch;
      break;
    }
    r.output.append(buf, size_t(n));
  }
  ::close(pipe_fds[0]);
  // Its end: it may have closed its output and still run.
  int status = 0;
  for (;;) {
    if (!stopped) stopped = reason_to_stop(limits, deadline);
    if (stopped) ::kill(-pid, SIGKILL);  // its group: what it started too
    const pid_t w = ::waitpid(pid, &status, stopped ? 0 : WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {  // ECHILD: someone else collected it
      r.end = stopped ? *stopped : ProgramResult::End::kLost;
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (stopped) {
    r.end = *stopped;
  } else if (WIFEXITED(status)) {
    r.end = ProgramResult::End::kExited;
    r.status = WEXITSTATUS(status);
  } else {
    r.end = ProgramResult::End::kSignalled;
    r.status = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
  return r;
}

}  // namespace dlrun
