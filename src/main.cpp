// dlrun executable: everything lives in the dlrun_core library so tests can link it.
#include "cli/app.h"
#include "preempt/preempt.h"

namespace {

// Runs before the initialisers of LibTorch and every other shared library (ELF .preinit_array,
// executables only): from here on a SIGTERM only sets the stop flag, which `dlrun train` turns
// into exit 75 during start-up; other commands restore the default action (cli::main).
void early_signals(int, char**, char**) { dlrun::preempt::install_early_signal_handlers(); }

}  // namespace

__attribute__((section(".preinit_array"), used)) static void (*const dlrun_preinit)(int, char**, char**) =
    early_signals;

int main(int argc, char** argv) {
  dlrun::preempt::die_with_launcher();  // a worker of scripts/dlrun-launch dies with it (docs/distributed.md)
  return dlrun::cli::main(argc, argv);
}
