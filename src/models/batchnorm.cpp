// set_batchnorm_sync (see batchnorm.h).
#include "models/batchnorm.h"

namespace dlrun::models {

int set_batchnorm_sync(torch::nn::Module& model, const std::shared_ptr<BatchNormSync>& sync) {
  int n = 0;
  for (const auto& m : model.modules(/*include_self=*/true))
    if (auto* bn = dynamic_cast<BatchNorm2dImpl*>(m.get())) {
      bn->sync = sync;
      ++n;
    }
  return n;
}

}  // namespace dlrun::models
