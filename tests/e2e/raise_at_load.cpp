// Test helper for tests/e2e/test_run_dir.py, loaded with LD_PRELOAD: raises the signal named by
// DLRUN_RAISE_AT_LOAD (SIGTERM or SIGUSR1) from a shared library's initialiser, that is before
// dlrun's main() runs, while LibTorch's own initialisers run beside it: the moment a scheduler's
// SIGTERM lands when it comes right after the start.
#include <csignal>
#include <cstdlib>
#include <cstring>

__attribute__((constructor)) static void dlrun_raise_at_load() {
  const char* name = std::getenv("DLRUN_RAISE_AT_LOAD");
  if (name == nullptr) return;
  if (std::strcmp(name, "SIGTERM") == 0) std::raise(SIGTERM);
  if (std::strcmp(name, "SIGUSR1") == 0) std::raise(SIGUSR1);
}
