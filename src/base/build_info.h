// Facts about this build (version, git revision, compilers), defined in a generated
// build_info.cpp so that a new commit recompiles one file, not every user of these.
#pragma once

namespace dlrun::build {
const char* version();                ///< "0.1.0"
const char* git_revision();           ///< `git describe --always --dirty` at configure time
const char* build_type();             ///< CMAKE_BUILD_TYPE
const char* cxx_compiler();           ///< "GNU 12.2.0"
const char* cuda_compiler_version();  ///< nvcc version, "" without CUDA sources
}  // namespace dlrun::build
