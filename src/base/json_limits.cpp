// parse_json_capped: see json_limits.h.
#include "base/json_limits.h"

#include "base/error.h"

#include <stdexcept>

namespace dlrun {

nlohmann::json parse_json_capped(const std::string& text, int max_depth) {
  return nlohmann::json::parse(text, [max_depth](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > max_depth)
      throw std::runtime_error("nested more than " + std::to_string(max_depth) + " levels deep");
    return true;
  });
}

std::optional<int64_t> json_int64(const nlohmann::json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return v.get<int64_t>();
}

int64_t json_int_or(const nlohmann::json& obj, const char* key, int64_t fallback, const std::string& what) {
  if (!obj.is_object() || !obj.contains(key)) return fallback;
  const auto i = json_int64(obj.at(key));
  DLRUN_CHECK_INPUT(i.has_value(), "{}: {} must be an integer, got {}", what, key, obj.at(key).dump().substr(0, 40));
  return *i;
}

std::optional<uint64_t> json_uint64(const nlohmann::json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  return v.get<uint64_t>();
}

}  // namespace dlrun
