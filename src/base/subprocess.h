// Running a helper program and reading what it prints, for the credential_process of an AWS
// profile (remote/process_credentials.cpp): no shell (the words are the program and its
// arguments), nothing on its standard input, its standard error discarded, its output read up
// to a cap, and a time limit and a cancel flag that end it (and anything it started in its own
// process group) at once. What it printed is returned to the caller only: it may be a secret.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

namespace dlrun {

/// How long a program may run and how much it may print.
struct ProgramLimits {
  double timeout_s = 60;                     ///< then it is killed (SIGKILL, its process group)
  size_t max_output = 64 * 1024;             ///< standard output beyond this: killed
  const std::atomic<bool>* cancel = nullptr; ///< set by another thread: killed within 0.1 s
};

/// How a program ended, and its standard output.
struct ProgramResult {
  enum class End {
    kExited,      ///< it exited: `status` is its exit status
    kSignalled,   ///< a signal ended it: `status` is the signal
    kTimedOut,    ///< it ran past ProgramLimits::timeout_s and was killed
    kTooMuch,     ///< it printed more than ProgramLimits::max_output and was killed
    kCancelled,   ///< ProgramLimits::cancel was set and it was killed
    kNotStarted,  ///< it could not be started: `error` says why (no such file, not executable)
    kLost,        ///< it ended but its exit status could not be collected (another reaper)
  };
  End end = End::kNotStarted;
  int status = 0;
  std::string output;  ///< standard output (complete only when it exited)
  std::string error;   ///< why it did not start (kNotStarted)
};

/// Runs argv[0] with arguments argv[1..] (argv[0] searched in PATH when it holds no '/'), with
/// this process's environment, standard input and error on /dev/null, in a process group of
/// its own, no descriptor of this process but its output pipe. Waits for it to end. Never
/// throws for what the program does; throws dlrun::Error (exit 1) when argv is empty.
ProgramResult run_program(const std::vector<std::string>& argv, const ProgramLimits& limits = {});

}  // namespace dlrun
