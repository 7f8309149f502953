// `dlrun ckpt push`: the committed local checkpoints a remote store lacks, uploaded after the
// fact (docs/checkpoints.md, "When uploads fail"). A run whose uploads failed for good -- expired
// credentials, a revoked permission, a store down for longer than the retries -- keeps its
// checkpoints locally; this catches the store up without training again.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace dlrun::ckpt {

class RemoteStore;

/// What a push found and did.
struct PushResult {
  int64_t remote_newest = -1;  ///< the newest complete checkpoint in the store before (-1: none)
  int64_t local_newest = -1;   ///< the newest committed local one (-1: none)
  std::vector<Entry> pushed;   ///< uploaded, oldest first (the last is the store's LATEST now)
  std::vector<Entry> skipped;  ///< newer than the store's but not verifying locally: not sent
};

/// Upload every committed local checkpoint of `checkpoints_dir` newer than the newest complete
/// one in `store`, oldest first (each upload ends with the remote LATEST, so LATEST names the
/// newest), each verified first: one that does not verify is left out (`skipped`, with the reason)
/// and never sent. Partial directories are not checkpoints. `on_upload`
/// (may be empty) is told of each before it starts. Throws remote::S3Error from the store.
PushResult push_newer(RemoteStore& store, const std::string& checkpoints_dir,
                      const std::function<void(const Entry&)>& on_upload = {});

}  // namespace dlrun::ckpt
