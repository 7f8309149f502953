// Precompiled header of dlrun_core: the heavy LibTorch includes, parsed once per build.
#pragma once
#include <torch/torch.h>
