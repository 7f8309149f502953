// Retention (keep_last / keep_every, never the newest verified checkpoint, never partial or
// corrupt ones) and the background writer (commits in order, measures, rethrows failures).
#include <catch2/catch.hpp>


#include "base/error.h"
#include "checkpoint/checkpoint.h"
#include "base/fsutil.h"
#include "support/files.h"
#include "support/scratch_dir.h"
#include "support/snapshot.h"

namespace ckpt = dlrun::ckpt;
using dlrun::testing::sample_snapshot;
using dlrun::testing::ScratchDir;

namespace {
std::vector<std::string> names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : ckpt::list(dir)) out.push_back(e.name);
  return out;
}
}  // namespace

TEST_CASE("retention keeps the newest keep_last plus multiples of keep_every", "[ckpt]") {
  ScratchDir tmp;
  for (int s = 1; s <= 7; ++s) ckpt::commit(sample_snapshot(s), tmp.str());
  ckpt::apply_retention(tmp.str(), 2, 3);
  CHECK(names(tmp.str()) ==
        std::vector<std::string>{"step-00000003", "step-00000006", "step-00000007"});
  ckpt::apply_retention(tmp.str(), 1, 0);
  CHECK(names(tmp.str()) == std::vector<std::string>{"step-00000007"});
}

TEST_CASE("retention with keep_last 0 keeps everything", "[ckpt]") {
  ScratchDir tmp;
  for (int s = 1; s <= 3; ++s) ckpt::commit(sample_snapshot(s), tmp.str());
  ckpt::apply_retention(tmp.str(), 0, 0);
  CHECK(names(tmp.str()).size() == 3);
}

TEST_CASE("retention never removes the newest verified checkpoint, corrupt or partial ones", "[ckpt]") {
  ScratchDir tmp;
  for (int s = 1; s <= 4; ++s) ckpt::commit(sample_snapshot(s), tmp.str());
  dlrun::fsutil::make_dirs(tmp / "step-00000005.tmp");
  dlrun::testing::flip_byte(tmp / "step-00000004/model.pt", 64);  // newest is corrupt
  dlrun::testing::remove_file(tmp / "step-00000001/manifest.json");                 // oldest is broken
  ckpt::apply_retention(tmp.str(), 1, 0);
  // step 3 is the newest that verifies: kept; 4 (corrupt), 1 (broken), 5.tmp untouched; 2 removed.
  CHECK(names(tmp.str()) == std::vector<std::string>{"step-00000001", "step-00000003", "step-00000004",
                                                      "step-00000005.tmp"});
  CHECK(ckpt::latest_verified(tmp.str()) == std::optional<std::string>(tmp / "step-00000003"));
}

TEST_CASE("retention keeps the checkpoint LATEST names", "[ckpt]") {
  ScratchDir tmp;
  for (int s : {5, 6, 7}) ckpt::commit(sample_snapshot(s), tmp.str());
  ckpt::commit(sample_snapshot(2), tmp.str());  // LATEST -> step 2 (e.g. re-saved after resume)
  ckpt::apply_retention(tmp.str(), 1, 0);
  CHECK(names(tmp.str()) == std::vector<std::string>{"step-00000002", "step-00000007"});
}

TEST_CASE("async writer commits every save in order and applies retention", "[ckpt]") {
  ScratchDir tmp;
  dlrun::CheckpointOptions opts;
  opts.async = true;
  opts.keep_last = 2;
  {
    ckpt::Writer w(tmp.str(), opts);
    CHECK(w.last().step == -1);
    for (int s = 1; s <= 4; ++s) w.save(sample_snapshot(s));
    w.wait();
    const auto st = w.last();
    CHECK(st.step == 4);
    CHECK(st.path == tmp / "step-00000004");
    CHECK(st.write_s > 0);
    CHECK(st.wait_s >= 0);
    w.save(sample_snapshot(5));
  }  // destructor waits for step 5
  CHECK(names(tmp.str()) == std::vector<std::string>{"step-00000004", "step-00000005"});
  CHECK(ckpt::read_latest(tmp.str()) == std::optional<std::string>("step-00000005"));
  CHECK(ckpt::verify(tmp / "step-00000005").ok);
}

TEST_CASE("synchronous writer commits inline", "[ckpt]") {
  ScratchDir tmp;
  dlrun::CheckpointOptions opts;
  opts.async = false;
  opts.keep_last = 0;
  ckpt::Writer w(tmp.str(), opts);
  w.save(sample_snapshot(1));
  CHECK(ckpt::verify(tmp / "step-00000001").ok);  // already there, no wait()
  CHECK(w.last().step == 1);
}

TEST_CASE("async writer rethrows a failed write from wait() and from the next save()", "[ckpt]") {
  ScratchDir tmp;
  dlrun::testing::write_text(tmp / "file", "x");
  dlrun::CheckpointOptions opts;
  opts.async = true;
  ckpt::Writer w(tmp / "file/checkpoints", opts);  // cannot create a directory under a file
  w.save(sample_snapshot(1));
  CHECK_THROWS_AS(w.wait(), dlrun::Error);
  w.wait();  // reported once
  w.save(sample_snapshot(2));
  CHECK_THROWS_WITH(w.save(sample_snapshot(3)), Catch::Contains("file/checkpoints"));
  CHECK(w.last().step == -1);
}
