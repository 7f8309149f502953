// Uploading the local checkpoints a remote store lacks (see push.h).
#include "checkpoint/push.h"

#include <algorithm>

#include "checkpoint/remote_store.h"

namespace dlrun::ckpt {

PushResult push_newer(RemoteStore& store, const std::string& checkpoints_dir,
                      const std::function<void(const Entry&)>& on_upload) {
  PushResult out;
  for (const auto& r : store.list())
    if (r.complete) out.remote_newest = std::max(out.remote_newest, r.step);
  std::vector<Entry> newer;
  const auto local = list(checkpoints_dir);  // oldest first
  for (const auto& e : local)
    if (!e.partial && e.verified.ok) out.local_newest = std::max(out.local_newest, e.step);
  for (const auto& e : local) {
    if (e.partial || e.step <= out.remote_newest) continue;  // (an older one is not the store's concern)
    if (e.verified.ok)
      newer.push_back(e);
    else
      out.skipped.push_back(e);
  }
  for (const auto& e : newer) {
    if (on_upload) on_upload(e);
    store.upload(e.path);
    out.pushed.push_back(e);
  }
  return out;
}

}  // namespace dlrun::ckpt
