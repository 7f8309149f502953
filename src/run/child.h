// A supervised child process: a command run in a process group of its own with its output in a
// log file, polled, signalled, and killed with its group when it is dropped. `dlrun
// check-resume` runs its training segments this way (train/check_resume.h); the launcher's
// workers it adopts are reaped by reap_descendants. Linux only (prctl).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dlrun::train {

class Child {
 public:
  /// Starts `argv` (argv[0] looked up on PATH), stdout and stderr appended to `log`. The child
  /// ends with this process (PR_SET_PDEATHSIG): a supervisor killed does not leave it running.
  Child(const std::vector<std::string>& argv, const std::string& log);
  /// A child still running is killed with its process group, and reaped.
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  /// The exit status once it has ended (waitpid's), else nullopt. Never blocks.
  std::optional<int> poll();
  /// `sig` to the child; SIGKILL to its whole process group (as losing the machine would).
  void signal(int sig);

 private:
  int pid_ = -1;
  std::optional<int> status_;
};

/// Make this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER), so that
/// reap_descendants() can wait for them.
void become_subreaper();

/// Waits up to `timeout_s` until every process this one adopted has ended (a launcher's
/// workers outlive a SIGKILL of the launcher by a moment); exit 1 past it.
void reap_descendants(double timeout_s);

/// "exit N", "killed by signal N": a waitpid status for a person.
std::string describe_status(int status);

/// The path of this process's own executable (/proc/self/exe).
std::string self_exe();

}  // namespace dlrun::train
