// DLRUN_FAULT, the crash tests' switch: parsed in one place, inert when unset or unknown, and
// an abort exactly at the named point (checked in a forked child, as the process dies).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <functional>

#include "base/fault.h"
#include "support/env.h"

using namespace dlrun;
using dlrun::testing::ScopedEnv;

namespace {
/// The signal that ended a child running `fn`, or 0 when it exited normally.
int dies_by(const std::function<void()>& fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGTERM, SIG_DFL);
    fn();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}
}  // namespace

TEST_CASE("DLRUN_FAULT is split into a name and an argument", "[base][fault]") {
  {
    ScopedEnv e("DLRUN_FAULT", "abort_at_step:12");
    CHECK(fault::current().name == "abort_at_step");
    CHECK(fault::current().arg == "12");
  }
  {
    ScopedEnv e("DLRUN_FAULT", "ckpt:manifest");
    CHECK(fault::current().name == "ckpt");
    CHECK(fault::current().arg == "manifest");
  }
  {
    ScopedEnv e("DLRUN_FAULT", "explode:now");  // unknown: ignored (and reported once)
    CHECK(fault::current().name.empty());
  }
  ScopedEnv e("DLRUN_FAULT", nullptr);
  CHECK(fault::current().name.empty());
}

TEST_CASE("faults fire exactly where named", "[base][fault]") {
  {
    ScopedEnv e("DLRUN_FAULT", "ckpt:rename");
    CHECK(dies_by([] { fault::at_checkpoint_point("manifest"); }) == 0);
    CHECK(dies_by([] { fault::at_checkpoint_point("rename"); }) == SIGABRT);
  }
  {
    ScopedEnv e("DLRUN_FAULT", "abort_at_step:3");
    CHECK(dies_by([] { fault::after_step(2); }) == 0);
    CHECK(dies_by([] { fault::after_step(3); }) == SIGABRT);
  }
  {
    ScopedEnv e("DLRUN_FAULT", "signal_at_step:5");
    CHECK(dies_by([] { fault::after_step(5); }) == SIGTERM);
  }
  {
    ScopedEnv e("DLRUN_FAULT", "signal_during:eval");
    CHECK(dies_by([] { fault::during("save"); }) == 0);
    CHECK(dies_by([] { fault::during("eval"); }) == SIGTERM);
  }
  ScopedEnv e("DLRUN_FAULT", nullptr);
  CHECK(dies_by([] { fault::after_step(3); fault::at_checkpoint_point("rename"); }) == 0);
}

TEST_CASE("disk_error fails the writes of a checkpoint being written, from step N (to M)", "[base][fault]") {
  const std::string in20 = "/run/checkpoints/step-00000020.tmp/model.pt";
  const std::string in30 = "/run/checkpoints/step-00000030.tmp/model.pt";
  const std::string in10 = "/run/checkpoints/step-00000010.tmp/model.pt";
  {
    ScopedEnv e("DLRUN_FAULT", "disk_error:ENOSPC:20");
    CHECK(fault::write_error(in20) == ENOSPC);
    CHECK(fault::write_error(in30) == ENOSPC);
    CHECK(fault::write_error(in10) == 0);
    CHECK(fault::write_error("/run/summary.json.tmp") == 0);           // not a checkpoint file
    CHECK(fault::write_error("/run/checkpoints/LATEST.tmp") == 0);      // the commit's last step is not hit
    CHECK(fault::write_error("/run/checkpoints/step-00000020/x") == 0);  // committed: never written again
  }
  {
    ScopedEnv e("DLRUN_FAULT", "disk_error:EIO:20-25");
    CHECK(fault::write_error(in20) == EIO);
    CHECK(fault::write_error(in30) == 0);
  }
  {
    ScopedEnv e("DLRUN_FAULT", "disk_error:EROFS");
    CHECK(fault::write_error(in10) == EROFS);
  }
  {
    ScopedEnv e("DLRUN_FAULT", "disk_error:EPERM");  // not one of the three: inert
    CHECK(fault::write_error(in10) == 0);
  }
  ScopedEnv e("DLRUN_FAULT", nullptr);
  CHECK(fault::write_error(in10) == 0);
}
