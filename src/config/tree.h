// A YAML document as a tree that remembers where every value came from.
//
// yaml-cpp's nodes lose the file name once merged across `base:` files, so the loader
// converts each file into this tree first: scalars, ordered maps and lists, each with its
// SourceLoc. Inheritance merges trees; overrides write into the tree; binding to the typed
// options (bind.cpp) reads it and reports errors at the value's own location.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace dlrun::config {

struct Tree {
  enum class Type { kNull, kScalar, kMap, kList };
  Type type = Type::kNull;
  std::string scalar;          ///< the text of a scalar
  bool quoted = false;         ///< scalar was quoted in YAML ("3" is a string, 3 is a number)
  std::vector<std::pair<std::string, std::shared_ptr<Tree>>> map;  ///< in file order
  std::vector<std::shared_ptr<Tree>> list;
  SourceLoc loc;               ///< where this value was written
  std::vector<std::pair<std::string, SourceLoc>> key_locs;  ///< where each map key was written

  /// The child under `key`, or nullptr.
  std::shared_ptr<Tree> get(const std::string& key) const;
  /// Insert or replace `key`.
  void set(const std::string& key, std::shared_ptr<Tree> value, SourceLoc key_loc);
  /// Remove `key` if present.
  void erase(const std::string& key);
  /// Where the key itself was written (falls back to the map's location).
  SourceLoc key_loc(const std::string& key) const;
};

/// Parse YAML text into a Tree; `file` names the source in errors. Malformed YAML,
/// duplicate keys and non-string keys are errors (exit 2) with line:column.
std::shared_ptr<Tree> parse_yaml(const std::string& text, const std::string& file);

/// Read and parse a file (missing/unreadable file: exit 2 naming it).
std::shared_ptr<Tree> parse_yaml_file(const std::string& path);

/// Deep merge: maps merge key by key, a null `over` leaves a map `base` as it is, and
/// everything else in `over` replaces `base`.
std::shared_ptr<Tree> merge(const std::shared_ptr<Tree>& base, const std::shared_ptr<Tree>& over);

/// Throws the config error at `loc`: dlrun::Error, exit 2, naming the dotted `key`.
[[noreturn]] void fail_at(const SourceLoc& loc, const std::string& key, const std::string& message,
                          const std::string& hint = {});

/// A value as an error message quotes it: 'text' (the start of a long one), null, a mapping,
/// a list.
std::string describe_value(const Tree& t);

}  // namespace dlrun::config
