// A deadline for a call that may block on a peer that cannot answer (docs/distributed.md, "When a
// host is lost"). A stopped process's listening socket still accepts connections (the kernel
// completes the handshake), so a store client connected to a frozen rank 0 (SIGSTOP, a hung
// host) waits in its first read for as long as its own timeout allows -- dist.timeout_s, or
// without end. On the loss path every store call goes through within(): the call runs on a
// thread of its own, and the caller gets its result, its exception, or DeadlineExceeded after
// `seconds`; the thread of a call that never returns is left behind (it holds its own
// references to what it uses) and ends with the process.
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

namespace dlrun::dist {

/// A call given to within() did not return in time.
class DeadlineExceeded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// `call()`'s result (or its exception) if it returns within `seconds`, else DeadlineExceeded
/// naming `what`. `call` is copied onto the thread: capture by value what it needs.
template <typename F>
auto within(double seconds, const std::string& what, F call) -> std::invoke_result_t<F> {
  using T = std::invoke_result_t<F>;
  auto done = std::make_shared<std::promise<T>>();
  auto result = done->get_future();
  std::thread([done, call = std::move(call)]() mutable {
    try {
      if constexpr (std::is_void_v<T>) {
        call();
        done->set_value();
      } else {
        done->set_value(call());
      }
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  }).detach();
  if (result.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready)
    throw DeadlineExceeded(fmt::format("{}: no answer within {:.0f} s", what, seconds));
  return result.get();
}

}  // namespace dlrun::dist
