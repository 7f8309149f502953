// Verification of damaged checkpoints (truncated, bit-flipped, missing file, missing manifest,
// partial .tmp) and what resume sees: latest_verified skips to the previous valid checkpoint,
// reports each skipped one, and deletes nothing.
#include <catch2/catch.hpp>


#include "checkpoint/checkpoint.h"
#include "base/fsutil.h"
#include "support/files.h"
#include "support/scratch_dir.h"
#include "support/snapshot.h"

namespace ckpt = dlrun::ckpt;
using dlrun::testing::sample_snapshot;
using dlrun::testing::ScratchDir;

namespace {

struct Skip {
  std::string path, reason;
};

/// Commit steps 1 and 2, damage step 2 with `damage`, then check verify's reason and that
/// resume falls back to step 1 without deleting anything.
void check_damage(const std::function<void(const std::string&)>& damage, const std::string& reason) {
  ScratchDir tmp;
  const auto one = ckpt::commit(sample_snapshot(1), tmp.str());
  const auto two = ckpt::commit(sample_snapshot(2), tmp.str());
  REQUIRE(ckpt::verify(two).ok);
  damage(two);
  const auto v = ckpt::verify(two);
  CHECK_FALSE(v.ok);
  CHECK_THAT(v.reason, Catch::Contains(reason));

  std::vector<Skip> skipped;
  const auto chosen = ckpt::latest_verified(
      tmp.str(), [&](const std::string& p, const std::string& r) { skipped.push_back({p, r}); });
  REQUIRE(chosen);
  CHECK(*chosen == one);
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].path == two);
  CHECK(skipped[0].reason == v.reason);
  CHECK(dlrun::fsutil::path_exists(two));  // reported, never deleted
  CHECK(ckpt::verify(one).ok);
}

}  // namespace

TEST_CASE("a truncated file fails verification with both sizes", "[ckpt]") {
  check_damage([](const std::string& d) { dlrun::testing::truncate_by(d + "/optim.pt", 10); },
               "optim.pt: size ");
  ScratchDir tmp;
  const auto d = ckpt::commit(sample_snapshot(1), tmp.str());
  const auto size = dlrun::testing::file_size(d + "/optim.pt");
  dlrun::testing::truncate_by(d + "/optim.pt", 10);
  CHECK_THAT(ckpt::verify(d).reason,
             Catch::Contains(fmt::format("optim.pt: size {} != {} in manifest", size - 10, size)));
}

TEST_CASE("one flipped bit fails verification by SHA-256", "[ckpt]") {
  check_damage([](const std::string& d) { dlrun::testing::flip_byte(d + "/model.pt", 100); },
               "model.pt: SHA-256 mismatch (file changed or corrupt)");
}

TEST_CASE("a missing listed file fails verification", "[ckpt]") {
  check_damage([](const std::string& d) { dlrun::testing::remove_file(d + "/rng-rank00000.pt"); },
               "rng-rank00000.pt: missing");
}

TEST_CASE("a missing manifest fails verification as a partial write", "[ckpt]") {
  check_damage([](const std::string& d) { dlrun::testing::remove_file(d + "/manifest.json"); },
               "missing manifest.json (partial write?)");
}

TEST_CASE("an unparseable manifest fails verification", "[ckpt]") {
  check_damage([](const std::string& d) { dlrun::testing::write_text(d + "/manifest.json", "{\"files\": ["); },
               "manifest.json: not valid JSON");
}

TEST_CASE("a manifest that does not list model.pt fails verification", "[ckpt]") {
  check_damage(
      [](const std::string& d) {
        auto m = nlohmann::json::parse(dlrun::testing::read_text(d + "/manifest.json"));
        m["files"].erase(0);
        dlrun::testing::write_text(d + "/manifest.json", m.dump());
      },
      "manifest.json does not list model.pt");
}

TEST_CASE("a leftover .tmp directory is partial: listed, skipped by resume, kept", "[ckpt]") {
  ScratchDir tmp;
  const auto one = ckpt::commit(sample_snapshot(1), tmp.str());
  // A writer killed just before its rename: a complete-looking copy still named .tmp.
  const auto three = ckpt::commit(sample_snapshot(3), tmp.str());
  REQUIRE(::rename(three.c_str(), (tmp / "step-00000003.tmp").c_str()) == 0);
  CHECK_THAT(ckpt::verify(tmp / "step-00000003.tmp").reason, Catch::Contains("partial"));

  std::vector<Skip> skipped;
  const auto chosen = ckpt::latest_verified(
      tmp.str(), [&](const std::string& p, const std::string& r) { skipped.push_back({p, r}); });
  CHECK(chosen == std::optional<std::string>(one));
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].path == tmp / "step-00000003.tmp");

  const auto entries = ckpt::list(tmp.str());
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].name == "step-00000001");
  CHECK(entries[0].verified.ok);
  CHECK(entries[0].bytes > 0);
  CHECK(entries[1].name == "step-00000003.tmp");
  CHECK(entries[1].partial);
  CHECK(entries[1].step == 3);
  CHECK_FALSE(entries[1].verified.ok);
  CHECK(dlrun::fsutil::path_exists(tmp / "step-00000003.tmp"));
}

TEST_CASE("list is ordered by step and ignores unrelated entries", "[ckpt]") {
  ScratchDir tmp;
  ckpt::commit(sample_snapshot(10), tmp.str());
  ckpt::commit(sample_snapshot(2), tmp.str());
  dlrun::fsutil::make_dirs(tmp / "notes");
  dlrun::fsutil::make_dirs(tmp / "step-abc");
  const auto entries = ckpt::list(tmp.str());
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].step == 2);
  CHECK(entries[1].step == 10);
  CHECK(entries[1].verified.ok);
  CHECK(entries[1].mtime > 1e9);
}

TEST_CASE("no valid checkpoint: latest_verified is empty", "[ckpt]") {
  ScratchDir tmp;
  CHECK_FALSE(ckpt::latest_verified(tmp.str()));
  CHECK_FALSE(ckpt::latest_verified(tmp / "does-not-exist"));
  const auto one = ckpt::commit(sample_snapshot(1), tmp.str());
  dlrun::testing::remove_file(one + "/model.pt");
  int skips = 0;
  CHECK_FALSE(ckpt::latest_verified(tmp.str(), [&](const std::string&, const std::string&) { ++skips; }));
  CHECK(skips == 1);
}

TEST_CASE("verify of a missing directory says so", "[ckpt]") {
  ScratchDir tmp;
  const auto v = ckpt::verify(tmp / "step-00000001");
  CHECK_FALSE(v.ok);
  CHECK_THAT(v.reason, Catch::Contains("not found"));
}

TEST_CASE("resolve maps run, checkpoints and checkpoint directories", "[ckpt]") {
  ScratchDir tmp;
  const std::string dir = tmp / "checkpoints";
  ckpt::commit(sample_snapshot(1), dir);
  const auto two = ckpt::commit(sample_snapshot(2), dir);
  CHECK(ckpt::checkpoints_dir_of(tmp.str()) == dir);
  CHECK(ckpt::checkpoints_dir_of(dir) == dir);
  CHECK(ckpt::resolve(tmp.str()) == two);
  CHECK(ckpt::resolve(dir) == two);
  CHECK(ckpt::resolve(dir + "/step-00000001") == dir + "/step-00000001");
  CHECK_THROWS_WITH(ckpt::resolve(tmp / "nope"), Catch::Contains("nope: no such directory"));
}
