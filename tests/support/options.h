// Small model settings shared by the training tests.
#pragma once

#include "config/options.h"

namespace dlrun::test {

/// An MLP with one hidden layer of 16 and 3 classes: a few hundred parameters, fast on a CPU.
inline ModelOptions small_mlp() {
  ModelOptions m;
  m.name = "mlp";
  m.hidden = {16};
  m.num_classes = 3;
  return m;
}

}  // namespace dlrun::test
