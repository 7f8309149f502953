// Names and scanning shared by the checkpoint sources: the file names of a checkpoint
// directory, parsing "step-N[.suffix]" directory names, the manifest check shared by verify()
// and load(), and verification with or without hashing (retention counts checkpoints with the
// cheap size check). Private to src/checkpoint.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace dlrun::ckpt::detail {

inline constexpr const char* kManifest = kManifestFile;
inline constexpr const char* kState = kStateFile;
inline constexpr const char* kConfig = kConfigFile;
inline constexpr const char* kModel = kModelFile;
inline constexpr const char* kLatest = kLatestFile;
inline constexpr int kFormatVersion = 1;
/// A manifest lists a handful of files; anything larger is not one.
inline constexpr int64_t kMaxManifestBytes = 1 << 20;

/// The checkpoint name a pointer file (LATEST, BEST; local or remote) holds: its text without
/// surrounding white space, or nullopt when that is empty or not a plain name (a '/').
std::optional<std::string> pointer_name(const std::string& text);

/// "step-00001200" -> step 1200, suffix ""; "step-00001200.tmp" -> suffix ".tmp".
/// False for names that are not checkpoint directories.
bool parse_dir_name(const std::string& name, int64_t* step, std::string* suffix);

/// Checkpoint directories under `checkpoints_dir` (committed and partial), oldest first,
/// with path/name/step/partial/bytes/mtime filled but not verified.
std::vector<Entry> scan(const std::string& checkpoints_dir);

/// The directory's manifest, read and checked for shape (not the files it lists): on
/// success r.ok is true and r.manifest/step/epoch are set; else r.reason says why.
VerifyResult read_manifest(const std::string& ckpt_dir);

/// The reason a file listed in the manifest (`entry`: name, bytes, sha256) does not match
/// `size` bytes hashing to `sha256`, or "" when it matches.
std::string file_mismatch(const nlohmann::json& entry, uint64_t size, const std::string& sha256);

/// Why a checkpoint entry with this lstat() is not a regular file ("" when it is).
std::string not_a_plain_file(const struct stat& st, const std::string& name);

/// Why the manifest's "format" / "format_version" cannot be read by this dlrun ("" when fine);
/// `*newer` tells whether the reason is a version newer than this dlrun reads.
std::string format_problem(const nlohmann::json& manifest, bool* newer = nullptr);

/// How deep a manifest or state.json may nest (base/json_limits.h).
inline constexpr int kMaxJsonDepth = 64;

/// verify(); with `hashes` false only presence and sizes are checked (no reading of data).
VerifyResult verify_dir(const std::string& ckpt_dir, bool hashes);

}  // namespace dlrun::ckpt::detail
