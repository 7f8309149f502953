// DLRUN_FAULT parsing and the actions it triggers (see fault.h).
#include "base/fault.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "base/env.h"

namespace dlrun::fault {
namespace {

bool known(const std::string& name) {
  return name == "abort_at_step" || name == "signal_at_step" || name == "ckpt" || name == "signal_during" ||
         name == "upload" || name == "slow_batch" || name == "disk_error" || name == "nonfinite_loss_at_step" ||
         name == "oom_at_step" || name == "oom_above" ||
         name == "fused_mismatch" || name == "forget_on_resume";
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "dlrun: DLRUN_FAULT: %s: aborting\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace

Spec current() {
  const std::string s = env("DLRUN_FAULT");
  if (s.empty()) return {};
  // DLRUN_FAULT_RANK=R: only the process whose RANK is R (torchrun's variable) is hit.
  if (const std::string only = env("DLRUN_FAULT_RANK"); !only.empty()) {
    const std::string rank = env("RANK");
    if (only != (rank.empty() ? "0" : rank)) return {};
  }
  // DLRUN_FAULT_RESTART=N: only in the N-th restart of the group (TORCHELASTIC_RESTART_COUNT).
  if (const std::string only = env("DLRUN_FAULT_RESTART"); !only.empty()) {
    const std::string count = env("TORCHELASTIC_RESTART_COUNT");
    if (only != (count.empty() ? "0" : count)) return {};
  }
  const auto colon = s.find(':');
  Spec spec{s.substr(0, colon), colon == std::string::npos ? std::string() : s.substr(colon + 1)};
  if (!known(spec.name)) {
    static std::once_flag once;
    std::call_once(once, [&] { std::fprintf(stderr, "dlrun: warning: DLRUN_FAULT=%s is not a known fault (ignored)\n", s.c_str()); });
    return {};
  }
  return spec;
}

bool forget_on_resume(const std::string& part) {
  const Spec s = current();
  return s.name == "forget_on_resume" && s.arg == part;
}

bool nonfinite_loss(int64_t step) {
  const Spec s = current();
  return s.name == "nonfinite_loss_at_step" && !s.arg.empty() && std::strtoll(s.arg.c_str(), nullptr, 10) == step;
}

bool out_of_memory(int64_t step, int attempt, int64_t samples) {
  const Spec s = current();
  if (s.arg.empty()) return false;
  const long long n = std::strtoll(s.arg.c_str(), nullptr, 10);
  if (s.name == "oom_at_step") return attempt == 0 && n == step;
  if (s.name == "oom_above") return samples > n;
  return false;
}

void at_checkpoint_point(const char* point) {
  const Spec s = current();
  if (s.name == "ckpt" && point != nullptr && s.arg == point) die("ckpt:" + s.arg + " reached");
}

void at_upload_point(const char* point) {
  const Spec s = current();
  if (s.name == "upload" && point != nullptr && s.arg == point) die("upload:" + s.arg + " reached");
}

int write_error(const std::string& path) {
  const Spec s = current();
  if (s.name != "disk_error") return 0;
  // ERR, ERR:N (steps >= N) or ERR:N-M (steps N..M: the disk recovers after M).
  const auto colon = s.arg.find(':');
  const std::string err = s.arg.substr(0, colon);
  long long from = 0, to = -1;
  if (colon != std::string::npos) {
    char* end = nullptr;
    from = std::strtoll(s.arg.c_str() + colon + 1, &end, 10);
    if (end && *end == '-') to = std::strtoll(end + 1, nullptr, 10);
  }
  int code = 0;
  if (err == "ENOSPC") code = ENOSPC;
  else if (err == "EIO") code = EIO;
  else if (err == "EROFS") code = EROFS;
  if (code == 0) return 0;
  // ".../step-00000020.tmp/model.pt": the step of the checkpoint being written.
  const auto at = path.rfind("/step-");
  const auto tmp = path.find(".tmp/", at == std::string::npos ? 0 : at);
  if (at == std::string::npos || tmp == std::string::npos) return 0;
  const long long step = std::strtoll(path.c_str() + at + 6, nullptr, 10);
  return step >= from && (to < 0 || step <= to) ? code : 0;
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
