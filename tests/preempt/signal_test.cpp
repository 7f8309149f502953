// Signals set the stop flag and record which signal and when; a second signal exits at
// once with 128+signo unless it repeats the first or the stop is committed (checked in a
// forked child, since it ends the process).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "base/clock.h"
#include "preempt/preempt.h"

using namespace dlrun;

namespace {

/// Installs the handlers and clears the flag; undoes both at the end of the test.
struct Installed {
  Installed() {
    preempt::reset();
    preempt::install_signal_handlers();
  }
  ~Installed() {
    preempt::uninstall_signal_handlers();
    preempt::reset();
  }
};

/// Forks; the child runs `fn` and then _exit(0). Returns the child's wait status.
template <typename F>
int in_child(F fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    fn();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("SIGTERM sets the stop flag and records the signal", "[preempt][signals]") {
  Installed guard;
  CHECK_FALSE(preempt::stop_requested());
  CHECK(preempt::stop_reason().empty());
  const double before = wall_now();
  std::raise(SIGTERM);
  CHECK(preempt::stop_requested());
  CHECK(preempt::stop_reason() == "SIGTERM");
  CHECK(preempt::stop_signal() == SIGTERM);
  CHECK(preempt::stop_time() >= before - 1);
  CHECK(preempt::stop_time() <= wall_now() + 1);
}

TEST_CASE("SIGUSR1 and SIGINT are recorded by name", "[preempt][signals]") {
  {
    Installed guard;
    std::raise(SIGUSR1);
    CHECK(preempt::stop_requested());
    CHECK(preempt::stop_reason() == "SIGUSR1");
  }
  {
    Installed guard;
    std::raise(SIGINT);
    CHECK(preempt::stop_requested());
    CHECK(preempt::stop_reason() == "SIGINT");
    CHECK(preempt::stop_signal() == SIGINT);
  }
}

TEST_CASE("request_stop records its reason, the first cause wins, reset clears", "[preempt]") {
  Installed guard;
  preempt::request_stop("aws notice: action=terminate");
  CHECK(preempt::stop_requested());
  CHECK(preempt::stop_signal() == 0);
  const double t = preempt::stop_time();
  CHECK(t > 0);
  std::raise(SIGTERM);  // the first signal after a notice still only sets the flag
  preempt::request_stop("later");
  CHECK(preempt::stop_reason() == "aws notice: action=terminate");
  CHECK(preempt::stop_time() == t);
  preempt::reset();
  CHECK_FALSE(preempt::stop_requested());
  CHECK(preempt::stop_reason().empty());
  CHECK(preempt::stop_time() == 0);
}

TEST_CASE("a second signal exits at once with 128+signo", "[preempt][signals]") {
  int status = in_child([] {
    preempt::install_signal_handlers();
    std::raise(SIGTERM);
    if (!preempt::stop_requested()) ::_exit(3);  // the first one must not exit
    ::usleep(static_cast<useconds_t>(preempt::kSameRequestS * 1e6) + 50000);
    std::raise(SIGTERM);
    ::_exit(4);  // not reached
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGTERM);

  status = in_child([] {
    preempt::install_signal_handlers();
    std::raise(SIGUSR1);
    preempt::set_stop_phase(preempt::StopPhase::kWriting);
    ::usleep(static_cast<useconds_t>(preempt::kSameRequestS * 1e6) + 50000);
    std::raise(SIGINT);
    ::_exit(4);
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGINT);
}

TEST_CASE("the same signal twice within kSameRequestS is one request", "[preempt][signals]") {
  // systemd (KillMode=control-group), Slurm and a forwarding launcher deliver one SIGTERM twice.
  const int status = in_child([] {
    preempt::install_signal_handlers();
    std::raise(SIGTERM);
    std::raise(SIGTERM);
    std::raise(SIGUSR1);
    if (!preempt::stop_requested() || preempt::stop_signal() != SIGTERM) ::_exit(3);
    ::_exit(preempt::signals_ignored() == 2 ? 0 : 5);
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("after the stop's commit a further signal changes nothing", "[preempt][signals]") {
  const int status = in_child([] {
    preempt::install_signal_handlers();
    std::raise(SIGTERM);
    preempt::set_stop_phase(preempt::StopPhase::kCommitted);
    ::usleep(static_cast<useconds_t>(preempt::kSameRequestS * 1e6) + 50000);
    std::raise(SIGTERM);
    std::raise(SIGINT);
    ::_exit(preempt::signals_ignored() == 2 ? 0 : 5);
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a notice's own time is the stop time when it is earlier", "[preempt]") {
  Installed guard;
  const double now = wall_now();
  preempt::request_stop("aws notice", now - 50);
  CHECK(preempt::stop_time() == Approx(now - 50).margin(1e-3));
  preempt::reset();
  preempt::request_stop("aws notice", now + 500);  // not in the future
  CHECK(preempt::stop_time() <= wall_now());
  CHECK(preempt::stop_time() >= now - 1);
}

TEST_CASE("uninstall restores the default disposition", "[preempt][signals]") {
  int status = in_child([] {
    preempt::install_signal_handlers();
    preempt::uninstall_signal_handlers();
    std::raise(SIGTERM);
  });
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
}
