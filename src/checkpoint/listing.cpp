// Finding checkpoints: scanning a checkpoints directory (committed step-N/ and leftover
// step-N.tmp/), picking the newest one that verifies for resume (skipping, reporting and
// never deleting the rest), reading LATEST, and turning a user's PATH into a checkpoint.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/fsutil.h"
#include "base/strings.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"

namespace dlrun::ckpt {
namespace detail {

std::optional<std::string> pointer_name(const std::string& text) {
  std::string s = trim(text);
  if (s.empty() || s.find('/') != std::string::npos) return std::nullopt;
  return s;
}

bool parse_dir_name(const std::string& name, int64_t* step, std::string* suffix) {
  if (name.rfind("step-", 0) != 0) return false;
  size_t i = 5;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == 5 || i - 5 > 18) return false;
  if (i < name.size() && name[i] != '.') return false;
  *step = std::stoll(name.substr(5, i - 5));
  *suffix = name.substr(i);
  return true;
}

std::vector<Entry> scan(const std::string& checkpoints_dir) {
  std::vector<Entry> out;
  for (const auto& name : fsutil::list_names(checkpoints_dir)) {
    Entry e;
    std::string suffix;
    e.name = name;
    e.path = checkpoints_dir + "/" + name;
    if (!parse_dir_name(e.name, &e.step, &suffix)) continue;
    // Real directories only: a symbolic link named like a checkpoint is not one of this run's,
    // and retention must never delete through it.
    struct stat st {};
    if (::lstat(e.path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    e.partial = !suffix.empty();
    if (::stat(e.path.c_str(), &st) == 0) e.mtime = static_cast<double>(st.st_mtime);
    for (const auto& f : fsutil::list_names(e.path))
      if (::stat((e.path + "/" + f).c_str(), &st) == 0 && S_ISREG(st.st_mode)) e.bytes += static_cast<uint64_t>(st.st_size);
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    if (a.step != b.step) return a.step < b.step;
    if (a.partial != b.partial) return !a.partial;  // committed before its leftovers
    return a.name < b.name;
  });
  return out;
}

}  // namespace detail

namespace {

std::string partial_reason(const Entry& e) {
  auto has = [&](const char* part) { return e.name.find(part) != std::string::npos; };
  if (e.name.size() > 4 && e.name.compare(e.name.size() - 4, 4, ".tmp") == 0)
    return "partial: never committed (interrupted writer); ignored by resume, not deleted";
  if (has(".partial-"))
    return "set aside: an interrupted write of this step, found when it was saved again; not deleted";
  if (has(".corrupt-"))
    return "set aside: failed verification when this step was saved again; not deleted";
  if (has(".abandoned-"))
    return "set aside: newer than the checkpoint a run was resumed from (an abandoned timeline); not deleted";
  return "partial: not a committed checkpoint directory; ignored by resume, not deleted";
}

void fill_verification(Entry& e) {
  if (e.partial) {
    e.verified.ok = false;
    e.verified.reason = partial_reason(e);
    return;
  }
  e.verified = verify(e.path);
  if (e.verified.ok && e.verified.manifest.contains("created_unix") &&
      e.verified.manifest["created_unix"].is_number())
    e.mtime = e.verified.manifest["created_unix"].get<double>();
}

}  // namespace

std::vector<Entry> list(const std::string& checkpoints_dir) {
  auto entries = detail::scan(checkpoints_dir);
  for (auto& e : entries) fill_verification(e);
  return entries;
}

std::optional<std::string> latest_verified(
    const std::string& checkpoints_dir, const std::function<void(const std::string&, const std::string&)>& on_skip) {
  auto entries = detail::scan(checkpoints_dir);
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    fill_verification(*it);
    if (it->verified.ok) return it->path;
    if (on_skip) on_skip(it->path, it->verified.reason);
  }
  return std::nullopt;
}

namespace {

/// The checkpoint name a pointer file (LATEST, BEST) holds, or nullopt.
std::optional<std::string> read_pointer(const std::string& checkpoints_dir, const char* file) {
  const std::string path = checkpoints_dir + "/" + file;
  if (!fsutil::is_regular_file(path)) return std::nullopt;
  return detail::pointer_name(fsutil::read_file(path));
}

}  // namespace

std::optional<std::string> read_latest(const std::string& checkpoints_dir) {
  return read_pointer(checkpoints_dir, detail::kLatest);
}

std::optional<std::string> read_best(const std::string& checkpoints_dir) { return read_pointer(checkpoints_dir, kBestFile); }

void write_best(const std::string& checkpoints_dir, const std::string& name) {
  fsutil::write_file_atomic(checkpoints_dir + "/" + kBestFile, name + "\n");
}

std::vector<std::string> set_aside_after(const std::string& checkpoints_dir, int64_t step, const std::string& stamp) {
  std::vector<std::string> moved;
  std::string newest_left;
  for (const auto& e : detail::scan(checkpoints_dir)) {
    if (e.partial) continue;
    if (e.step <= step) {
      newest_left = e.name;
      continue;
    }
    const std::string to = e.path + ".abandoned-" + stamp;
    fsutil::rename_durable(e.path, to);
    moved.push_back(to);
  }
  const auto latest = read_latest(checkpoints_dir);
  int64_t latest_step = -1;
  std::string suffix;
  if (latest && (!detail::parse_dir_name(*latest, &latest_step, &suffix) || latest_step > step)) {
    const std::string path = checkpoints_dir + "/" + detail::kLatest;
    if (newest_left.empty()) {
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) fail_runtime("{}: cannot remove: {}", path, std::strerror(errno));
      fsutil::fsync_dir(checkpoints_dir);
    } else {
      fsutil::write_file_atomic(path, newest_left + "\n");
    }
  }
  return moved;
}

std::string checkpoints_dir_of(const std::string& path) {
  DLRUN_CHECK_INPUT(fsutil::is_directory(path), "{}: no such directory", path);
  if (fsutil::is_directory(path + "/checkpoints")) return path + "/checkpoints";
  return path;
}

std::string resolve(const std::string& path) {
  int64_t step = 0;
  std::string suffix;
  if (fsutil::path_exists(path + "/" + detail::kManifest) || detail::parse_dir_name(fsutil::base_name(path), &step, &suffix))
    return path;
  const std::string dir = checkpoints_dir_of(path);
  if (auto latest = read_latest(dir)) return dir + "/" + *latest;
  if (auto newest = latest_verified(dir)) return *newest;
  fail_input("{}: no checkpoint found (no LATEST and no committed step-N/ directory)", path);
}

}  // namespace dlrun::ckpt
