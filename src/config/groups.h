// Key groups: a section's keys that share a prefix may be written as one mapping, so
// `train.ema: {decay: 0.999}` in a file and `train.ema.decay=0.999` on the command line both
// mean `train.ema_decay`. A group is any prefix `g` with keys `g_*` and no key `g` itself in
// its section (the schema, schema.cpp), so a new key joins its group by its name.
#pragma once

#include <string>

#include "config/tree.h"

namespace dlrun::config {

/// Whether `section` has keys named `group`_* and no key named `group` itself.
bool is_group(const std::string& section, const std::string& group);

/// Rewrites each group mapping of one file's sections into the flat keys it stands for, before
/// files and overrides are merged (so a later file or the command line overrides either form).
/// A key given both ways in one file is an error (exit 2).
void flatten_groups(Tree& root);

}  // namespace dlrun::config
