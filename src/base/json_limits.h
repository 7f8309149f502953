// JSON from outside (checkpoint manifests and state, cloud metadata answers) parsed with its
// nesting capped. nlohmann parses iteratively but copies, compares and dumps recursively, so a
// document nested tens of thousands deep would overflow the stack later; no file dlrun reads
// nests more than a few levels. No LibTorch: part of dlrun_base.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace dlrun {

/// nlohmann::json::parse of `text`, refusing nesting deeper than `max_depth`. Throws a
/// std::exception (nlohmann's parse error, or std::runtime_error for the depth) on bad input.
nlohmann::json parse_json_capped(const std::string& text, int max_depth);

}  // namespace dlrun
