// model.init: a fresh run's weights from a file (see init_weights.h).
#include "train/state/init_weights.h"

#include <fmt/ranges.h>

#include "base/error.h"
#include "base/log.h"
#include "checkpoint/weights_file.h"
#include "models/weights.h"

namespace dlrun::train {

nlohmann::json load_init_weights(const Config& c, models::Model& model) {
  if (c.model.init.empty()) return nullptr;
  ckpt::WeightsRead w;
  models::LoadReport r;
  try {
    w = ckpt::read_weights(c.model.init);
    models::LoadOptions o;
    o.strict = c.model.init_strict;
    o.reinit_head_on_mismatch = true;
    o.in_channels = c.model.in_channels;
    r = models::load_weights(model, w.tensors, w.path, o);
  } catch (const Error& e) {
    if (e.code() != ExitCode::kBadInput) throw;
    c.refuse("model.init", e.message(), e.hint());
  }
  log0::info("model.init: {} ({}{}): {}", w.path, w.kind, w.step >= 0 ? fmt::format(", step {}", w.step) : "",
             r.summary());
  if (!r.reinitialised.empty())
    log0::info("model.init: the classification head ({}) is re-initialised: the file's has another number of "
               "classes than model.num_classes={}",
               fmt::join(r.reinitialised, ", "), c.model.num_classes);
  return {{"path", w.path}, {"kind", w.kind}, {"loaded", r.loaded.size()}, {"missing", r.missing},
          {"unexpected", r.unexpected}, {"reinitialised", r.reinitialised}};
}

}  // namespace dlrun::train
