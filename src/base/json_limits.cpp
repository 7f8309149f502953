// parse_json_capped: see json_limits.h.
#include "base/json_limits.h"

#include <stdexcept>

namespace dlrun {

nlohmann::json parse_json_capped(const std::string& text, int max_depth) {
  return nlohmann::json::parse(text, [max_depth](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > max_depth)
      throw std::runtime_error("nested more than " + std::to_string(max_depth) + " levels deep");
    return true;
  });
}

}  // namespace dlrun
