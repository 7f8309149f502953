// Writers of the data tests' input files: raw or gzipped bytes.
#pragma once

#include <catch2/catch.hpp>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/options.h"
#include "support/scratch_dir.h"


namespace dlrun::testing::data {

namespace fs = std::filesystem;
using dlrun::testing::ScratchDir;

inline void write_file(const fs::path& p, const std::vector<uint8_t>& bytes, bool gz = false) {
  fs::create_directories(p.parent_path());
  if (gz) {
    gzFile f = gzopen(p.string().c_str(), "wb");
    REQUIRE(f != nullptr);
    if (!bytes.empty()) REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
    gzclose(f);
    return;
  }
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

/// Appends `v` big-endian (the idx format's integers).
inline void be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

/// Options reading an idx dataset (MNIST's format) from the scratch directory `d`.
inline DataOptions idx_opts(const ScratchDir& d) {
  DataOptions o;
  o.name = "mnist";
  o.root = d.str();
  return o;
}

inline std::vector<uint8_t> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace dlrun::testing::data
