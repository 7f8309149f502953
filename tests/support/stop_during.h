// A stop that comes while a credential fetch is under way: the credential tests call
// CredentialProvider::get(&stop) and another thread sets `stop` once the test's condition says
// the fetch has begun (a fake service holds the request, a helper program has started), so the
// outcome does not depend on the machine's speed.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <thread>

#include "base/clock.h"
#include "remote/credentials.h"
#include "remote/s3_error.h"

namespace dlrun::testing {

struct StopOutcome {
  std::string code = "(none)";  ///< the S3Error's code ("(none)": get() returned)
  std::string message;          ///< what() of what get() threw
  double seconds = 0;           ///< how long get() took
};

/// p.get(&stop), with `stop` set by another thread once `begun()` holds.
inline StopOutcome get_with_stop(remote::CredentialProvider& p, const std::function<bool()>& begun) {
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    while (!begun()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    stop = true;
  });
  StopOutcome out;
  const double start = mono_now();
  try {
    p.get(&stop);
  } catch (const remote::S3Error& e) {
    out.code = e.code();
    out.message = e.what();
  } catch (const std::exception& e) {
    out.message = e.what();
  }
  out.seconds = mono_now() - start;
  stopper.join();
  return out;
}

}  // namespace dlrun::testing
