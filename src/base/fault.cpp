// DLRUN_FAULT parsing and the actions it triggers (see fault.h).
#include "base/fault.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace dlrun::fault {
namespace {

bool known(const std::string& name) {
  return name == "abort_at_step" || name == "signal_at_step" || name == "ckpt" || name == "signal_during" ||
         name == "upload" || name == "slow_batch";
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "dlrun: DLRUN_FAULT: %s: aborting\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace

Spec current() {
  const char* v = std::getenv("DLRUN_FAULT");
  if (v == nullptr || *v == '\0') return {};
  // DLRUN_FAULT_RANK=R: only the process whose RANK is R (torchrun's variable) is hit.
  if (const char* only = std::getenv("DLRUN_FAULT_RANK"); only && *only) {
    const char* rank = std::getenv("RANK");
    if (std::string(only) != (rank && *rank ? rank : "0")) return {};
  }
  // DLRUN_FAULT_RESTART=N: only in the N-th restart of the group (TORCHELASTIC_RESTART_COUNT).
  if (const char* only = std::getenv("DLRUN_FAULT_RESTART"); only && *only) {
    const char* count = std::getenv("TORCHELASTIC_RESTART_COUNT");
    if (std::string(only) != (count && *count ? count : "0")) return {};
  }
  std::string s(v);
  const auto colon = s.find(':');
  Spec spec{s.substr(0, colon), colon == std::string::npos ? std::string() : s.substr(colon + 1)};
  if (!known(spec.name)) {
    static std::once_flag once;
    std::call_once(once, [&] { std::fprintf(stderr, "dlrun: warning: DLRUN_FAULT=%s is not a known fault (ignored)\n", v); });
    return {};
  }
  return spec;
}

void at_checkpoint_point(const char* point) {
  const Spec s = current();
  if (s.name == "ckpt" && point != nullptr && s.arg == point) die("ckpt:" + s.arg + " reached");
}

void at_upload_point(const char* point) {
  const Spec s = current();
  if (s.name == "upload" && point != nullptr && s.arg == point) die("upload:" + s.arg + " reached");
}

void during(const char* phase) {
  const Spec s = current();
  if (s.name == "signal_during" && phase != nullptr && s.arg == phase) std::raise(SIGTERM);
}

void slow_batch() {
  const Spec s = current();
  if (s.name != "slow_batch") return;
  const long long ms = std::strtoll(s.arg.c_str(), nullptr, 10);
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

void after_step(int64_t step) {
  const Spec s = current();
  if (s.name.empty() || s.arg.empty()) return;
  const bool at = std::strtoll(s.arg.c_str(), nullptr, 10) == step;
  if (!at) return;
  if (s.name == "abort_at_step") die("after step " + s.arg);
  if (s.name == "signal_at_step") std::raise(SIGTERM);
}

}  // namespace dlrun::fault
