// What changed between two configs, key by key, for the warning a resume prints when the
// config differs from the checkpoint's ("optim.lr: 0.05 -> 0.1").
#pragma once

#include <string>
#include <vector>

#include "config/options.h"

namespace dlrun::config {

struct Change {
  std::string key;     ///< dotted key, "optim.lr"
  std::string before;  ///< value as config text
  std::string after;
};

/// Every key whose value differs, in schema order.
std::vector<Change> changes(const Config& before, const Config& after);

/// Whether changing `key` makes a resumed run stop being an exact continuation of the
/// interrupted one even though training could go on: run.seed (data order, augmentation and
/// dropout draws follow it). Keys like the learning rate change results by intent.
bool breaks_exact_resume(const std::string& key);

/// Whether changing `key` cannot change the numbers a run produces: where files go, how
/// often to log or save, notice sources, the display.
bool is_bookkeeping(const std::string& key);

}  // namespace dlrun::config
