// File helpers of the tests: write and read whole files, and damage them the way crashes and
// bad disks do (a flipped bit, a truncated tail, a missing file).
#pragma once

#include <cstdint>
#include <string>

namespace dlrun::testing {

void write_text(const std::string& path, const std::string& text);
std::string read_text(const std::string& path);
uint64_t file_size(const std::string& path);  ///< 0 when missing
void flip_byte(const std::string& path, int64_t offset);
void truncate_by(const std::string& path, uint64_t bytes);
void remove_file(const std::string& path);

}  // namespace dlrun::testing
