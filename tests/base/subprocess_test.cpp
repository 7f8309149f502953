// Running a helper program (src/base/subprocess.h), with real programs: /bin/sh scripts written
// to a scratch directory. What each must show: the output and exit status come back, standard
// error and input are not connected, and a time limit, a cancel or too much output end the
// program and what it started, promptly.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/subprocess.h"
#include "support/files.h"
#include "support/scratch_dir.h"

using namespace dlrun;
using End = ProgramResult::End;

namespace {

std::string script(const dlrun::testing::ScratchDir& dir, const std::string& name, const std::string& body) {
  const std::string path = dir.write(name, "#!/bin/sh\n" + body);
  ::chmod(path.c_str(), 0755);
  return path;
}

/// Whether process `pid` is gone (or a zombie) within `seconds`.
bool ends_within(pid_t pid, double seconds) {
  for (const double until = mono_now() + seconds; mono_now() < until;) {
    const std::string stat = dlrun::testing::read_text("/proc/" + std::to_string(pid) + "/stat");
    if (stat.empty() || stat.find(") Z") != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

TEST_CASE("a program's output and exit status; its error stream and input are not connected", "[base][subprocess]") {
  dlrun::testing::ScratchDir tmp;
  const auto ok = run_program({script(tmp, "ok.sh", "echo out; echo SECRET-ON-STDERR >&2; cat; echo \"$1|$2\"\n"),
                               "a b", "$HOME"});
  CHECK(ok.end == End::kExited);
  CHECK(ok.status == 0);
  CHECK(ok.output == "out\na b|$HOME\n");  // `cat` read nothing: input is /dev/null
  const auto three = run_program({script(tmp, "three.sh", "echo partial; exit 3\n")});
  CHECK(three.end == End::kExited);
  CHECK(three.status == 3);
  const auto sig = run_program({script(tmp, "sig.sh", "kill -TERM $$\n")});
  CHECK(sig.end == End::kSignalled);
  CHECK(sig.status == SIGTERM);
  // Found through PATH; only its output pipe besides 0, 1, 2.
  const auto fds = run_program({"sh", "-c", "ls /proc/$$/fd"});
  CHECK(fds.end == End::kExited);
  CHECK(fds.output == "0\n1\n2\n");
}

TEST_CASE("a program that cannot be started is said so, not run through a shell", "[base][subprocess]") {
  dlrun::testing::ScratchDir tmp;
  const auto missing = run_program({tmp / "no-such-program"});
  CHECK(missing.end == End::kNotStarted);
  CHECK_FALSE(missing.error.empty());
  const std::string plain = tmp.write("not-executable.sh", "#!/bin/sh\necho hi\n");
  CHECK(run_program({plain}).end == End::kNotStarted);
  CHECK(run_program({"echo hi; touch " + tmp / "ran"}).end == End::kNotStarted);  // one word, not a command line
  CHECK(dlrun::testing::read_text(tmp / "ran").empty());
  CHECK_THROWS_AS(run_program({}), Error);
}

TEST_CASE("a time limit, a cancel or too much output end the program and its children", "[base][subprocess]") {
  dlrun::testing::ScratchDir tmp;
  const std::string pid_file = tmp / "child.pid";
  const std::string slow = script(tmp, "slow.sh", "sleep 30 &\necho $! > " + pid_file + "\nsleep 30\n");
  ProgramLimits limits;
  limits.timeout_s = 0.5;
  double start = mono_now();
  CHECK(run_program({slow}, limits).end == End::kTimedOut);
  CHECK(mono_now() - start < 10);
  const pid_t child = std::stoi(dlrun::testing::read_text(pid_file));
  CHECK(ends_within(child, 10));  // the process group went too
  // Output closed, still running: not waited for past the limit.
  start = mono_now();
  CHECK(run_program({script(tmp, "closed.sh", "exec >&-\nsleep 30\n")}, limits).end == End::kTimedOut);
  CHECK(mono_now() - start < 10);
  // Cancelled by another thread.
  std::atomic<bool> cancel{false};
  ProgramLimits cancellable;
  cancellable.cancel = &cancel;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel = true;
  });
  start = mono_now();
  CHECK(run_program({script(tmp, "wait.sh", "sleep 30\n")}, cancellable).end == End::kCancelled);
  canceller.join();
  CHECK(mono_now() - start < 10);
  // More output than allowed.
  ProgramLimits small;
  small.max_output = 1000;
  const auto chatty = run_program({"yes"}, small);
  CHECK(chatty.end == End::kTooMuch);
  CHECK(chatty.output.size() <= 1000);
}
