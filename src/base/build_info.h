// Facts about this build (version, git revision, compilers), defined in a generated
// build_info.cpp so that a new commit recompiles one file, not every user of these.
#pragma once

#include <string>

namespace dlrun::build {
const char* version();                ///< "0.1.0"
const char* git_revision();           ///< `git describe --always --dirty` at configure time
const char* build_type();             ///< CMAKE_BUILD_TYPE
const char* cxx_compiler();           ///< "GNU 12.2.0"
const char* cuda_compiler_version();  ///< nvcc version, "" without CUDA sources
const char* torch_version();          ///< the LibTorch dlrun was built against: "2.11.0"
/// The one version string, everywhere dlrun names itself (--version, config.yaml,
/// summary.json, checkpoints): "dlrun 0.1.0 (git abc123, torch 2.11.0, Release)".
std::string version_line();
}  // namespace dlrun::build
