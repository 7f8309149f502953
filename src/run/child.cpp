// A supervised child process (see child.h).
#include "run/child.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "base/clock.h"
#include "base/error.h"

namespace dlrun::train {

Child::Child(const std::vector<std::string>& argv, const std::string& log) {
  std::vector<char*> args;  // made before fork(): the child only calls async-signal-safe functions
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  DLRUN_CHECK(pid_ >= 0, ExitCode::kRuntime, "cannot start {}: fork failed: {}", argv.at(0), std::strerror(errno));
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the supervisor killed: its children end with it
    if (::getppid() != parent) ::_exit(126);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) ::_exit(126);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execvp(args[0], args.data());
    static const char kMsg[] = "dlrun: cannot run the command\n";
    (void)!::write(2, kMsg, sizeof kMsg - 1);
    ::_exit(127);
  }
  ::setpgid(pid_, pid_);  // (also in the parent: no race with the first signal)
}

Child::~Child() {
  if (pid_ > 0 && !status_) {
    ::killpg(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::optional<int> Child::poll() {
  if (status_) return status_;
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) == pid_) status_ = st;
  return status_;
}

void Child::signal(int sig) { sig == SIGKILL ? ::killpg(pid_, SIGKILL) : ::kill(pid_, sig); }

void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

void reap_descendants(double timeout_s) {
  const double deadline = mono_now() + timeout_s;
  while (true) {
    const pid_t pid = ::waitpid(-1, nullptr, WNOHANG);
    if (pid < 0 && errno == ECHILD) return;
    if (pid > 0) continue;
    DLRUN_CHECK(mono_now() < deadline, ExitCode::kRuntime,
                "processes of an ended segment are still running after {:.0f} s", timeout_s);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string describe_status(int st) {
  if (WIFEXITED(st)) return fmt::format("exit {}", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return fmt::format("killed by signal {}", WTERMSIG(st));
  return "ended";
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  DLRUN_CHECK(n > 0, ExitCode::kRuntime, "cannot find dlrun's own binary (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace dlrun::train
