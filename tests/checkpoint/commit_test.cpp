// The commit protocol and loading: a committed checkpoint verifies, loads back bit-exactly,
// re-committing a step replaces it without ever losing it, and a stale step-N.tmp/ of the
// same step is cleaned while other partial directories are left alone.
#include <catch2/catch.hpp>


#include "base/error.h"
#include "base/fsutil.h"
#include "base/sha256.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/tensor_file.h"
#include "support/files.h"
#include "support/scratch_dir.h"
#include "support/snapshot.h"

namespace ckpt = dlrun::ckpt;
using dlrun::testing::read_text;
using dlrun::testing::sample_snapshot;
using dlrun::testing::same_tensors;
using dlrun::testing::ScratchDir;

TEST_CASE("dir_name pads the step to eight digits", "[ckpt]") {
  CHECK(ckpt::dir_name(1200) == "step-00001200");
  CHECK(ckpt::dir_name(123456789) == "step-123456789");
}

TEST_CASE("commit writes every file, a manifest and LATEST, and the result verifies", "[ckpt]") {
  ScratchDir tmp;
  const std::string dir = tmp / "checkpoints";
  const auto path = ckpt::commit(sample_snapshot(7, 2), dir);
  CHECK(path == dir + "/step-00000007");
  for (const char* f : {"model.pt", "optim.pt", "rng-rank00000.pt", "state.json", "config.yaml", "manifest.json"})
    CHECK(dlrun::fsutil::is_regular_file(path + "/" + f));
  CHECK(read_text(dir + "/LATEST") == "step-00000007\n");
  CHECK(ckpt::read_latest(dir) == std::optional<std::string>("step-00000007"));
  CHECK_FALSE(dlrun::fsutil::path_exists(path + ".tmp"));

  const auto v = ckpt::verify(path);
  INFO(v.reason);
  REQUIRE(v.ok);
  CHECK(v.step == 7);
  CHECK(v.epoch == 2);
  CHECK(v.manifest["config_hash"] == "0123abcd");
  CHECK(v.manifest["world_size"] == 1);
  CHECK(v.manifest["files"].size() == 5);
  CHECK(v.manifest["files"][0]["name"] == "model.pt");
  CHECK(v.manifest["files"][0]["sha256"].get<std::string>().size() == 64);
}

TEST_CASE("load returns exactly what was committed", "[ckpt]") {
  ScratchDir tmp;
  const auto snap = sample_snapshot(3, 1);
  const auto path = ckpt::commit(snap, tmp.str());
  const auto back = ckpt::load(path);
  CHECK(back.step == 3);
  CHECK(back.epoch == 1);
  CHECK(back.config_yaml == snap.config_yaml);
  CHECK(back.config_hash == snap.config_hash);
  CHECK(back.state == snap.state);
  REQUIRE(back.tensor_files.size() == snap.tensor_files.size());
  for (const auto& [stem, tensors] : snap.tensor_files) {
    INFO(stem);
    REQUIRE(back.tensor_files.count(stem) == 1);
    CHECK(same_tensors(back.tensor_files.at(stem), tensors));
  }
  // Saved contiguous: the transposed view comes back as a contiguous copy of the same values.
  const auto& model = back.tensor_files.at("model");
  CHECK(model[1].first == "conv.weight_t");
  CHECK(model[1].second.is_contiguous());
}

TEST_CASE("load of a checkpoint that does not verify is bad input naming the path", "[ckpt]") {
  ScratchDir tmp;
  const auto path = ckpt::commit(sample_snapshot(1), tmp.str());
  dlrun::testing::remove_file(path + "/state.json");
  try {
    ckpt::load(path);
    FAIL("load did not throw");
  } catch (const dlrun::Error& e) {
    CHECK(e.code() == dlrun::ExitCode::kBadInput);
    CHECK_THAT(e.message(), Catch::Contains(path) && Catch::Contains("state.json: missing"));
  }
}

TEST_CASE("re-committing an existing step replaces it completely", "[ckpt]") {
  ScratchDir tmp;
  auto first = sample_snapshot(5);
  const auto path = ckpt::commit(first, tmp.str());
  auto second = sample_snapshot(5);
  second.tensor_files["model"] = dlrun::testing::sample_model(99);
  second.state["note"] = "second";
  CHECK(ckpt::commit(second, tmp.str()) == path);
  REQUIRE(ckpt::verify(path).ok);
  const auto back = ckpt::load(path);
  CHECK(back.state["note"] == "second");
  CHECK(same_tensors(back.tensor_files.at("model"), dlrun::testing::sample_model(99)));
  // Nothing left over: no step-5.tmp/, no step-5.old-*/.
  std::vector<std::string> dirs;
  for (const auto& name : dlrun::fsutil::list_names(tmp.str()))
    if (dlrun::fsutil::is_directory(tmp / name)) dirs.push_back(name);
  CHECK(dirs == std::vector<std::string>{"step-00000005"});
}

namespace {
/// Names in `dir` that start with `prefix`.
std::vector<std::string> named(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& n : dlrun::fsutil::list_names(dir))
    if (n.rfind(prefix, 0) == 0) out.push_back(n);
  return out;
}
}  // namespace

TEST_CASE("commit sets a stale .tmp of the same step aside and leaves other partial dirs", "[ckpt]") {
  ScratchDir tmp;
  dlrun::fsutil::make_dirs(tmp / "step-00000004.tmp");
  dlrun::testing::write_text(tmp / "step-00000004.tmp/model.pt", "half a file");
  dlrun::fsutil::make_dirs(tmp / "step-00000009.tmp");
  ckpt::commit(sample_snapshot(4), tmp.str());
  CHECK(ckpt::verify(tmp / "step-00000004").ok);
  CHECK_FALSE(dlrun::fsutil::path_exists(tmp / "step-00000004.tmp"));
  CHECK(dlrun::fsutil::path_exists(tmp / "step-00000009.tmp"));
  const auto aside = named(tmp.str(), "step-00000004.tmp.partial-");
  REQUIRE(aside.size() == 1);  // the partial write survives, under a name resume ignores
  CHECK(dlrun::testing::read_text(tmp / (aside[0] + "/model.pt")) == "half a file");
  bool listed = false;
  for (const auto& e : ckpt::list(tmp.str()))
    if (e.name == aside[0]) listed = e.partial && e.verified.reason.find("set aside") != std::string::npos;
  CHECK(listed);
}

TEST_CASE("saving a step again sets a corrupt copy aside and replaces a valid one", "[ckpt]") {
  ScratchDir tmp;
  ckpt::commit(sample_snapshot(6), tmp.str());
  dlrun::testing::flip_byte(tmp / "step-00000006/model.pt", 120);  // a bad disk block
  REQUIRE_FALSE(ckpt::verify(tmp / "step-00000006").ok);
  ckpt::commit(sample_snapshot(6), tmp.str());
  CHECK(ckpt::verify(tmp / "step-00000006").ok);
  const auto corrupt = named(tmp.str(), "step-00000006.corrupt-");
  REQUIRE(corrupt.size() == 1);  // the corrupt copy survives for inspection
  CHECK_FALSE(ckpt::verify(tmp / corrupt[0]).ok);
  CHECK(ckpt::latest_verified(tmp.str()) == std::optional<std::string>(tmp / "step-00000006"));
  // A valid copy of the step is superseded: no duplicate is kept.
  ckpt::commit(sample_snapshot(6), tmp.str());
  CHECK(named(tmp.str(), "step-00000006").size() == 2);  // step-00000006 and the corrupt one
}

TEST_CASE("a committed checkpoint is hashed once on save and once on load", "[ckpt]") {
  ScratchDir tmp;
  dlrun::CheckpointOptions opts;
  opts.keep_last = 2;
  opts.async = false;
  uint64_t bytes = 0;
  {
    ckpt::Writer w(tmp.str(), opts);
    w.save(sample_snapshot(1));
    const uint64_t before = dlrun::Sha256::bytes_hashed();
    w.save(sample_snapshot(2));  // commit, then retention (which must not read step 2 again)
    for (const auto& n : dlrun::fsutil::list_names(tmp / "step-00000002"))
      if (n != "manifest.json") bytes += dlrun::testing::file_size(tmp / ("step-00000002/" + n));
    CHECK(dlrun::Sha256::bytes_hashed() - before == bytes);
  }
  const uint64_t before = dlrun::Sha256::bytes_hashed();
  const auto loaded = ckpt::load_newest(tmp.str());
  REQUIRE(loaded);
  CHECK(loaded->path == tmp / "step-00000002");
  CHECK(dlrun::Sha256::bytes_hashed() - before == bytes);  // verified while read: once
}

TEST_CASE("load_newest skips what does not load, reports it, deletes nothing", "[ckpt]") {
  ScratchDir tmp;
  ckpt::commit(sample_snapshot(1), tmp.str());
  ckpt::commit(sample_snapshot(2), tmp.str());
  dlrun::fsutil::make_dirs(tmp / "step-00000003.tmp");
  dlrun::testing::flip_byte(tmp / "step-00000002/optim.pt", 64);
  std::vector<std::string> skipped;
  const auto loaded = ckpt::load_newest(tmp.str(), [&](const std::string& p, const std::string& why) {
    skipped.push_back(dlrun::fsutil::base_name(p) + ": " + why);
  });
  REQUIRE(loaded);
  CHECK(loaded->snapshot.step == 1);
  REQUIRE(skipped.size() == 2);
  CHECK_THAT(skipped[0], Catch::Contains("step-00000003.tmp: partial"));
  CHECK_THAT(skipped[1], Catch::Contains("step-00000002: ") && Catch::Contains("optim.pt: SHA-256 mismatch"));
  CHECK(dlrun::fsutil::is_directory(tmp / "step-00000002"));
  CHECK_FALSE(ckpt::load_newest(tmp / "nothing-here"));
}

TEST_CASE("commit fails with a runtime error naming the directory when it cannot write", "[ckpt]") {
  ScratchDir tmp;
  dlrun::testing::write_text(tmp / "file", "not a directory");
  try {
    ckpt::commit(sample_snapshot(1), tmp / "file/checkpoints");
    FAIL("commit did not throw");
  } catch (const dlrun::Error& e) {
    CHECK(e.code() == dlrun::ExitCode::kRuntime);
    CHECK_THAT(e.message(), Catch::Contains("file/checkpoints"));
  }
}

TEST_CASE("tensor files are dicts of tensors; other content is rejected", "[ckpt]") {
  ScratchDir tmp;
  const auto model = dlrun::testing::sample_model(2);
  ckpt::write_tensor_file(tmp / "m.pt", model);
  CHECK(same_tensors(ckpt::load_tensor_file(tmp / "m.pt"), model));
  const auto list_bytes = torch::pickle_save(c10::IValue(c10::List<int64_t>({1, 2})));
  CHECK_THROWS_AS(ckpt::tensors_from_bytes(list_bytes, "x.pt"), dlrun::Error);
  c10::Dict<std::string, int64_t> not_tensors;
  not_tensors.insert("a", 1);
  CHECK_THROWS_WITH(ckpt::tensors_from_bytes(torch::pickle_save(c10::IValue(not_tensors)), "y.pt"),
                    Catch::Contains("y.pt: entry 'a' is not a tensor"));
  dlrun::testing::write_text(tmp / "junk.pt", "junk");
  CHECK_THROWS_WITH(ckpt::load_tensor_file(tmp / "junk.pt"), Catch::Contains("junk.pt"));
}

TEST_CASE("host_copy detaches into owned contiguous CPU tensors", "[ckpt]") {
  auto w = torch::ones({2, 3}, torch::requires_grad());
  ckpt::TensorDict src = {{"w", w}, {"t", torch::arange(6).reshape({2, 3}).t()}};
  const auto copy = ckpt::host_copy(src);
  CHECK_FALSE(copy[0].second.requires_grad());
  CHECK(copy[1].second.is_contiguous());
  CHECK(torch::equal(copy[1].second, src[1].second));
  w.data().fill_(5);
  CHECK(copy[0].second.sum().item<float>() == 6.0f);  // unaffected by later training
}

TEST_CASE("retention after a save reads nothing newer than the checkpoint just written", "[ckpt]") {
  ScratchDir tmp;
  for (int64_t step : {1, 2, 3, 9}) ckpt::commit(sample_snapshot(step), tmp.str());
  dlrun::testing::flip_byte(tmp / "step-00000009/model.pt", 50);  // e.g. the corrupt one a resume skipped
  const uint64_t before = dlrun::Sha256::bytes_hashed();
  ckpt::apply_retention(tmp.str(), 2, 0, tmp / "step-00000003");
  CHECK(dlrun::Sha256::bytes_hashed() == before);  // step 9 was not re-hashed
  CHECK(dlrun::fsutil::is_directory(tmp / "step-00000009"));  // newer: left alone
  CHECK(dlrun::fsutil::is_directory(tmp / "step-00000003"));
  CHECK(dlrun::fsutil::is_directory(tmp / "step-00000002"));
  CHECK_FALSE(dlrun::fsutil::path_exists(tmp / "step-00000001"));  // beyond keep_last 2
}

TEST_CASE("resume does not report the directories dlrun set aside itself", "[ckpt]") {
  ScratchDir tmp;
  ckpt::commit(sample_snapshot(1), tmp.str());
  dlrun::fsutil::make_dirs(tmp / "step-00000005.corrupt-1700000000");
  dlrun::fsutil::make_dirs(tmp / "step-00000004.tmp.partial-1700000000");
  dlrun::fsutil::make_dirs(tmp / "step-00000003.tmp");
  std::vector<std::string> skipped;
  const auto loaded = ckpt::load_newest(tmp.str(), [&](const std::string& p, const std::string&) {
    skipped.push_back(dlrun::fsutil::base_name(p));
  });
  REQUIRE(loaded);
  CHECK(loaded->snapshot.step == 1);
  CHECK(skipped == std::vector<std::string>{"step-00000003.tmp"});
}

TEST_CASE("fault points are listed in commit order", "[ckpt]") {
  CHECK(ckpt::fault_points() == std::vector<std::string>{"file", "files", "manifest", "rename", "latest"});
}

TEST_CASE("a file set finds a file by its name", "[checkpoint]") {
  const ckpt::FileSet set = ckpt::serialize(dlrun::testing::sample_snapshot(7));
  REQUIRE(set.find(ckpt::kModelFile) != nullptr);
  CHECK_FALSE(set.find(ckpt::kModelFile)->empty());
  REQUIRE(set.find(ckpt::kConfigFile) != nullptr);
  CHECK(std::string(set.find(ckpt::kConfigFile)->begin(), set.find(ckpt::kConfigFile)->end()) ==
        dlrun::testing::sample_snapshot(7).config_yaml);
  CHECK(set.find(ckpt::kManifestFile) != nullptr);
  CHECK(set.find("nothing.pt") == nullptr);
}
