// Reading whole data files into memory, gzipped or not, with errors that name the file.
#pragma once

#include <string>
#include <vector>

namespace dlrun::data {

/// All bytes of `path`, decompressed when it is gzip (zlib reads plain files as they are).
/// Throws dlrun::Error (exit 2) naming the file when it is missing, unreadable or a
/// truncated/corrupt gzip stream.
std::vector<unsigned char> read_file_bytes(const std::string& path);

/// `dir/name.gz` if it exists, else `dir/name` if it exists, else throws (exit 2) naming both.
std::string find_data_file(const std::string& dir, const std::string& name);

}  // namespace dlrun::data
