// Durable file-system primitives, for the checkpoint commit protocol (docs/design.md) and the
// atomic run-directory files (summary.json, config.yaml): every file is written with open/write/fsync/close,
// directories are fsynced after entries change, and renames are followed by an fsync of the
// parent. No LibTorch: part of dlrun_base.
//
// The durable writes are plain POSIX: the protocol needs explicit fsyncs of files and
// directories, which std::filesystem does not offer. The path helpers below them (exists, list,
// mkdir -p, rm -rf, dirname) are std::filesystem.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlrun::fsutil {

/// Create or truncate `path`, write all of `data`, fsync and close. Throws dlrun::Error
/// (exit 1) naming the file on any failure.
void write_file_durable(const std::string& path, std::string_view data);
/// Write `path` atomically: `path`.tmp, fsync, rename over `path`, fsync the parent.
void write_file_atomic(const std::string& path, std::string_view data);
/// write_file_atomic of JSON (indented, invalid UTF-8 replaced): summary.json.
void write_json_atomic(const std::string& path, const nlohmann::json& j);
/// Whole file into memory. Throws dlrun::Error (exit 2) naming the file.
std::string read_file(const std::string& path);
/// The same, as bytes (what LibTorch's pickle reader takes).
std::vector<char> read_bytes(const std::string& path);
/// The first `n` bytes of a file (fewer when it is shorter), and its size in `*size`: what it
/// is, told without reading all of it. Throws dlrun::Error (exit 2) naming the file.
std::string read_head(const std::string& path, size_t n, uint64_t* size);
/// fsync a directory so that entries created/renamed in it are durable.
void fsync_dir(const std::string& dir);
/// rename(2) then fsync the parent directory of `to`.
void rename_durable(const std::string& from, const std::string& to);
/// Atomically swap two existing directory entries (renameat2 RENAME_EXCHANGE). Returns false
/// when the file system does not support it (the caller falls back); throws on other errors.
bool exchange_paths(const std::string& a, const std::string& b);
/// mkdir -p; throws dlrun::Error (exit 1) naming the directory on failure.
void make_dirs(const std::string& dir);
/// Remove a directory tree (or a file); throws dlrun::Error (exit 1) on failure. Missing is fine.
void remove_tree(const std::string& path);
/// Whether `path` exists (any type) / is a directory / is a regular file.
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
bool is_regular_file(const std::string& path);
/// Names in a directory (no "." / ".."), unsorted; empty when it cannot be read.
std::vector<std::string> list_names(const std::string& dir);
/// Parent directory of a path ("." when there is none).
std::string parent_of(const std::string& path);
/// What comes before the last '/' of `path`, as written ("" when it has none; also for an
/// s3:// key or a brace pattern, which parent_of would normalise).
std::string dir_part(const std::string& path);
/// Last path component, ignoring trailing slashes.
std::string base_name(const std::string& path);

}  // namespace dlrun::fsutil
