// The checkpoint code's file-system primitives are base/fsutil.h; this brings them into
// dlrun::ckpt::detail, where the checkpoint sources and tests name them.
#pragma once

#include "base/fsutil.h"

namespace dlrun::ckpt::detail {
using namespace dlrun::fsutil;
}  // namespace dlrun::ckpt::detail
