// POSIX tar, as WebDataset shards use it: reading the member table of an untrusted file (ustar,
// GNU long names and base-256 sizes, pax `path`/`size` records) and writing plain ustar. A shard
// is never extracted to disk; its members are read in place at the offsets found here. Every
// malformed or hostile header (bad checksum, a size past the end of the file or above the member
// limit, a path that is absolute or climbs with "..", a link) is refused with exit 2 naming the
// shard and the member.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dlrun::data {

struct TarMember {
  std::string name;     ///< the member's path inside the tar
  uint64_t offset = 0;  ///< where its data starts in the file
  uint64_t size = 0;
};

/// Members larger than this are refused: no training sample comes near it, and a header may
/// claim any size (a 10 GB member in a 1 MB shard).
constexpr uint64_t kMaxTarMember = uint64_t(1) << 30;

/// Reads exactly `n` bytes at `offset` into `buf` (throws when it cannot).
using ReadAt = std::function<void(uint64_t offset, size_t n, char* buf)>;

/// The regular-file members of a tar of `file_size` bytes, in file order. Directories are
/// skipped; everything else listed above throws dlrun::Error (exit 2) naming `name`.
std::vector<TarMember> scan_tar(const ReadAt& read, uint64_t file_size, const std::string& name);
/// The same, for a tar held in memory.
std::vector<TarMember> scan_tar(const std::string& bytes, const std::string& name);

/// Splits a member name into its WebDataset sample key and extension at the first '.' of its
/// last path component: "a/b/n01.x.jpg" -> {"a/b/n01", "x.jpg"}. No '.': {name, ""}.
std::pair<std::string, std::string> split_key(const std::string& member);

/// Appends ustar members to a file (names up to 255 bytes, split into prefix/name).
class TarWriter {
 public:
  explicit TarWriter(std::function<void(const char*, size_t)> sink) : sink_(std::move(sink)) {}
  void add(const std::string& name, const void* data, size_t n);
  /// The two zero blocks that end an archive.
  void finish();
  uint64_t bytes() const { return bytes_; }

 private:
  std::function<void(const char*, size_t)> sink_;
  uint64_t bytes_ = 0;
  void put(const char* p, size_t n);
};

}  // namespace dlrun::data
