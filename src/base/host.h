// This machine's name, as the run lock, TensorBoard's event file names and the rendezvous
// messages write it. One definition, so that they all name the host the same way.
#pragma once

#include <string>

namespace dlrun {

/// gethostname(); `unknown` when the kernel gives no name (an error, or an empty one).
std::string hostname(const std::string& unknown);

}  // namespace dlrun
