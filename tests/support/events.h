// Events as a part reports them, kept for a test to read (the checkpointer's, the meter's).
#pragma once

#include <string>
#include <vector>

#include "metrics/sink.h"

namespace dlrun::testing {

/// A sink that appends every event it is given to `*out`.
struct EventLog : metrics::Sink {
  std::vector<metrics::Event>* out;
  explicit EventLog(std::vector<metrics::Event>* o) : out(o) {}
  void write(const metrics::Event& e) override { out->push_back(e); }
};

/// The events of `kind`, in order.
inline std::vector<metrics::Event> of_kind(const std::vector<metrics::Event>& events, const std::string& kind) {
  std::vector<metrics::Event> out;
  for (const auto& e : events)
    if (e.kind == kind) out.push_back(e);
  return out;
}

}  // namespace dlrun::testing
