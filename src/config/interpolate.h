// `${env:NAME}` and `${env:NAME,default}` in config values: the one interpolation a config
// file and an override may use, resolved after the files and the overrides are merged, so a
// base file, the experiment file and the command line may all use it. `$${` is a literal `${`.
#pragma once

#include <string>

#include "config/tree.h"

namespace dlrun::config {

/// `s` with each ${env:...} replaced. An unset variable without a default, an unterminated
/// `${` or another kind of interpolation is an error (exit 2) at `loc` and `key`.
std::string interpolate(const std::string& s, const SourceLoc& loc, const std::string& key);

/// Interpolates every scalar of `t` (copying the nodes it changes: trees share children);
/// `key` is t's dotted key ("" at the root), for errors.
void interpolate_tree(Tree& t, const std::string& key);

}  // namespace dlrun::config
