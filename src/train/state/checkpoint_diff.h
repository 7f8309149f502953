// Which parts of the training state differ between two checkpoints of the same step, part by
// part as the one list of parts says (parts.h: part_layouts): `dlrun check-resume` names what an
// inexact resume lost this way.
#pragma once

#include <string>
#include <vector>

namespace dlrun::train {

struct PartsCompared {
  std::vector<std::string> differ;  ///< labels of the parts that differ ("RNG", "data position")
  std::vector<std::string> same;    ///< labels of those that are equal
};

/// Compare the checkpoint directories `a` and `b` (committed, of the same step): each part's
/// tensor files (names, dtypes, shapes and bits) and state.json keys. A part that neither
/// checkpoint has, and is optional (an average the run did not keep), is left out.
PartsCompared compare_checkpoints(const std::string& a, const std::string& b);

}  // namespace dlrun::train
