// Retention: after each commit, delete old checkpoints beyond `keep_last`, keeping every
// step that is a multiple of `keep_every`. Safety first: the newest checkpoint that fully
// verifies (SHA-256, or the one this process has just written and hashed) and the one LATEST
// names are never removed; checkpoints that fail verification and partial or set-aside
// directories are left for the user to inspect (`dlrun ckpt list`); nothing newer than the
// newest verified checkpoint is touched.
#include <algorithm>
#include <cstdio>

#include "base/log.h"
#include "checkpoint/checkpoint.h"
#include "base/fsutil.h"
#include "checkpoint/layout.h"

namespace dlrun::ckpt {

void apply_retention(const std::string& checkpoints_dir, int64_t keep_last, int64_t keep_every,
                     const std::string& just_committed, const std::vector<std::string>& in_use) {
  if (keep_last <= 0) return;  // keep all
  std::vector<Entry> committed;
  for (auto& e : detail::scan(checkpoints_dir))
    if (!e.partial) committed.push_back(std::move(e));

  // The newest verified checkpoint: the one just written when we are told (anything newer is
  // another timeline's, e.g. after --resume PATH, or corrupt, and is left alone without being
  // read), else the newest that verifies fully.
  int newest = -1;
  for (int i = static_cast<int>(committed.size()) - 1; i >= 0 && !just_committed.empty() && newest < 0; --i)
    if (committed[i].path == just_committed) newest = i;
  for (int i = static_cast<int>(committed.size()) - 1; i >= 0 && just_committed.empty() && newest < 0; --i)
    if (verify(committed[i].path).ok) newest = i;
  if (newest < 0) return;

  const auto latest = read_latest(checkpoints_dir);
  int64_t kept = 0;
  for (int i = newest; i >= 0; --i) {
    const Entry& e = committed[i];
    if (i != newest) {
      const auto v = detail::verify_dir(e.path, /*hashes=*/false);
      if (!v.ok) {
        log::warn("{}: not removed by retention: {}", e.path, v.reason);
        continue;
      }
    }
    if (kept < keep_last) {
      ++kept;
      continue;
    }
    if (keep_every > 0 && e.step % keep_every == 0) continue;
    if (latest && *latest == e.name) continue;
    if (std::find(in_use.begin(), in_use.end(), e.path) != in_use.end()) continue;
    // Manifest first: a crash mid-removal leaves a directory that fails verification, never
    // one that verifies with files missing.
    std::remove((e.path + "/" + detail::kManifest).c_str());
    fsutil::fsync_dir(e.path);
    fsutil::remove_tree(e.path);
    fsutil::fsync_dir(checkpoints_dir);
    log::debug("retention: removed {}", e.path);
  }
}

}  // namespace dlrun::ckpt
