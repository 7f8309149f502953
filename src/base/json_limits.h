// JSON from outside (checkpoint manifests and state, cloud metadata answers) parsed with its
// nesting capped. nlohmann parses iteratively but copies, compares and dumps recursively, so a
// document nested tens of thousands deep would overflow the stack later; no file dlrun reads
// nests more than a few levels. No LibTorch: part of dlrun_base.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace dlrun {

/// nlohmann::json::parse of `text`, refusing nesting deeper than `max_depth`. Throws a
/// std::exception (nlohmann's parse error, or std::runtime_error for the depth) on bad input.
nlohmann::json parse_json_capped(const std::string& text, int max_depth);

/// A count, size, offset or index read from outside: the value when it is a JSON integer that
/// fits, else nullopt. Never converts a float (converting 4e74 to an integer type is undefined
/// behaviour: the fuzzers found it twice).
std::optional<int64_t> json_int64(const nlohmann::json& v);
std::optional<uint64_t> json_uint64(const nlohmann::json& v);

/// obj[key] as an integer, or `fallback` when `obj` has no `key`. Anything else there (a float,
/// a string, a value past int64) is dlrun::Error, exit 2: "`what`: `key` must be an integer".
int64_t json_int_or(const nlohmann::json& obj, const char* key, int64_t fallback, const std::string& what);

}  // namespace dlrun
