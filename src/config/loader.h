// Loading an experiment file into a Config: `base:` inheritance, `${env:...}`
// interpolation, Hydra-style `dotted.key=value` overrides, and strict typed binding.
//
// Every error is a dlrun::Error with exit code 2 naming the file, the dotted key and the
// YAML line:column, with a "did you mean" hint where a known key or value is close.
#pragma once

#include <string>
#include <vector>

#include "config/options.h"

namespace dlrun::config {

/// Load `path`, apply `overrides` ("optim.lr=0.1", "data.augment=[flip,crop]", "run.dir=null").
/// Does not run the cross-field validation: see validate.h.
Config load(const std::string& path, const std::vector<std::string>& overrides = {});

/// Same, from YAML text (`file` names it in errors; `base:` resolves relative to it).
Config load_text(const std::string& text, const std::string& file,
                 const std::vector<std::string>& overrides = {});

/// The resolved config as YAML that `load` reads back to the same Config. With `docs`,
/// every field carries its one-line doc as a comment.
std::string to_yaml(const Config& cfg, bool docs = true);

/// Closest candidate to `word` by edit distance, or "" when none is close enough.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace dlrun::config
