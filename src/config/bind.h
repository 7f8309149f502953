// Strict typed binding: the merged tree of a config written into a Config through the schema
// (schema.h). Every key must exist, every value must have its field's type, range and choices
// (numbers are YAML 1.2 decimal literals; an integer is written as one), and required keys
// must be set; each error names the value's file, dotted key and line:column, with a "did you
// mean" hint where a key or choice is close.
#pragma once

#include <string>

#include "config/options.h"
#include "config/tree.h"

namespace dlrun::config {

/// The Config that `root` (sections of keys) describes, the rest at its defaults;
/// Config::origin records where each key was set. `file` names the config in errors about a
/// missing required value. Throws dlrun::Error (exit 2) at the first bad key or value.
Config bind_tree(const Tree& root, const std::string& file);

}  // namespace dlrun::config
