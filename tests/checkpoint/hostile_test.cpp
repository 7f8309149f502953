// Checkpoints and disks that misbehave: manifests from a newer dlrun or nested without end,
// symbolic links and FIFOs inside a checkpoint directory or in place of one, files much larger
// than the manifest says, state that hashes correctly but holds the wrong kinds of value, and
// writes that fail half-way (ENOSPC, EIO, EROFS injected with DLRUN_FAULT=disk_error). Each is
// refused or reported by name, and no committed checkpoint is ever touched.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include <caffe2/serialize/inline_container.h>
#include <nlohmann/json.hpp>

#include "base/fsutil.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/tensor_file.h"
#include "support/env.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/scratch_dir.h"
#include "support/snapshot.h"

namespace ckpt = dlrun::ckpt;
using dlrun::testing::require_error;
using dlrun::testing::sample_snapshot;
using dlrun::testing::ScopedEnv;
using dlrun::testing::ScratchDir;

namespace {

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(dlrun::testing::read_text(path)); }

void write_json(const std::string& path, const nlohmann::json& j) { dlrun::testing::write_text(path, j.dump(2)); }

/// Names and contents of every file under `dir`, to show a failure changed nothing.
std::map<std::string, std::string> tree(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& name : dlrun::fsutil::list_names(dir)) {
    const std::string p = dir + "/" + name;
    if (dlrun::fsutil::is_directory(p))
      for (const auto& [k, v] : tree(p)) out[name + "/" + k] = v;
    else
      out[name] = dlrun::testing::read_text(p);
  }
  return out;
}

}  // namespace

TEST_CASE("a checkpoint from a newer format version is refused with what to do", "[ckpt][hostile]") {
  ScratchDir tmp;
  const auto d = ckpt::commit(sample_snapshot(1), tmp.str());
  auto m = read_json(d + "/manifest.json");
  CHECK(m["format_version"] == 1);
  m["format_version"] = 2;
  write_json(d + "/manifest.json", m);
  CHECK_THAT(ckpt::verify(d).reason, Catch::Contains("format version 2 was written by a newer dlrun"));
  require_error([&] { ckpt::load(d); }, {d, "newer dlrun", "upgrade dlrun"});
  m["format_version"] = "one";
  write_json(d + "/manifest.json", m);
  CHECK_THAT(ckpt::verify(d).reason, Catch::Contains("is not a version number"));
  m["format_version"] = 1;
  m["format"] = "something-else";
  write_json(d + "/manifest.json", m);
  CHECK_THAT(ckpt::verify(d).reason, Catch::Contains("is not a dlrun checkpoint"));
}

TEST_CASE("a manifest nested without end or far too large is not valid", "[ckpt][hostile]") {
  ScratchDir tmp;
  const auto d = ckpt::commit(sample_snapshot(1), tmp.str());
  std::string deep = R"({"step": 1, "files": [], "x": )";
  for (int i = 0; i < 50000; ++i) deep += "[";
  for (int i = 0; i < 50000; ++i) deep += "]";
  dlrun::testing::write_text(d + "/manifest.json", deep + "}");
  CHECK_THAT(ckpt::verify(d).reason, Catch::Contains("nested more than 64 levels deep"));
  dlrun::testing::write_text(d + "/manifest.json", std::string(2u << 20, ' '));
  CHECK_THAT(ckpt::verify(d).reason, Catch::Contains("more than a manifest can be"));
}

TEST_CASE("symbolic links and FIFOs inside a checkpoint are refused", "[ckpt][hostile]") {
  ScratchDir tmp, outside;
  const auto d = ckpt::commit(sample_snapshot(1), tmp.str());
  SECTION("a listed file replaced by a link to an identical copy outside") {
    const std::string copy = outside / "model.pt";
    dlrun::testing::write_text(copy, dlrun::testing::read_text(d + "/model.pt"));
    dlrun::testing::remove_file(d + "/model.pt");
    REQUIRE(::symlink(copy.c_str(), (d + "/model.pt").c_str()) == 0);
    CHECK_THAT(ckpt::verify(d).reason, Catch::Contains("model.pt: a symbolic link"));
    require_error([&] { ckpt::load(d); }, {"model.pt: a symbolic link"});
  }
  SECTION("the manifest as a link") {
    const std::string copy = outside / "manifest.json";
    dlrun::testing::write_text(copy, dlrun::testing::read_text(d + "/manifest.json"));
    dlrun::testing::remove_file(d + "/manifest.json");
    REQUIRE(::symlink(copy.c_str(), (d + "/manifest.json").c_str()) == 0);
    CHECK_THAT(ckpt::verify(d).reason, Catch::Contains("manifest.json: a symbolic link"));
  }
  SECTION("a FIFO in place of a listed file would block a reader") {
    dlrun::testing::remove_file(d + "/state.json");
    REQUIRE(::mkfifo((d + "/state.json").c_str(), 0600) == 0);
    CHECK_THAT(ckpt::verify(d).reason, Catch::Contains("state.json: not a regular file"));
    require_error([&] { ckpt::load(d); }, {"state.json: not a regular file"});
  }
  SECTION("a directory in place of a listed file") {
    dlrun::testing::remove_file(d + "/state.json");
    dlrun::fsutil::make_dirs(d + "/state.json");
    CHECK_THAT(ckpt::verify(d).reason, Catch::Contains("state.json: a directory where a file is expected"));
  }
}

TEST_CASE("a linked step directory is not this run's: not listed, not resumed, not deleted", "[ckpt][hostile]") {
  ScratchDir run, elsewhere;
  ckpt::commit(sample_snapshot(1), run.str());
  const auto foreign = ckpt::commit(sample_snapshot(9), elsewhere.str());
  const auto before = tree(elsewhere.str());
  REQUIRE(::symlink(foreign.c_str(), (run / "step-00000009").c_str()) == 0);
  for (const auto& e : ckpt::list(run.str())) CHECK(e.step == 1);
  const auto chosen = ckpt::latest_verified(run.str());
  REQUIRE(chosen);
  CHECK(ckpt::verify(*chosen).step == 1);
  for (int64_t step : {2, 3, 4}) {
    ckpt::commit(sample_snapshot(step), run.str());
    ckpt::apply_retention(run.str(), 1, 0, run / ckpt::dir_name(step), {});
  }
  CHECK(tree(elsewhere.str()) == before);  // retention never deleted through the link
}

TEST_CASE("a file far larger than the manifest says is refused by its size", "[ckpt][hostile]") {
  ScratchDir tmp;
  const auto d = ckpt::commit(sample_snapshot(1), tmp.str());
  dlrun::testing::write_text(d + "/optim.pt", std::string(8u << 20, 'x'));
  require_error([&] { ckpt::load(d); }, {"optim.pt: size 8388608 != "});
}

TEST_CASE("a damaged tensor file is bad input, whatever LibTorch's reader throws", "[ckpt][hostile]") {
  const auto good = ckpt::tensors_to_bytes(sample_snapshot(1).tensor_files.at("model"));
  for (size_t cut : {size_t{0}, size_t{1}, size_t{30}, good.size() / 2, good.size() - 22, good.size() - 1}) {
    INFO("cut to " << cut << " of " << good.size());
    std::vector<char> bytes(good.begin(), good.begin() + static_cast<long>(cut));
    require_error([&] { ckpt::tensors_from_bytes(bytes, "model.pt"); }, {"model.pt"});
  }
  for (size_t at = 0; at < good.size(); at += 37) {
    std::vector<char> bytes = good;
    bytes[at] = static_cast<char>(bytes[at] ^ 0x5a);
    try {
      ckpt::tensors_from_bytes(bytes, "model.pt");  // a flip in tensor data is only found by the hash
    } catch (const dlrun::Error& e) {
      CHECK(e.code() == dlrun::ExitCode::kBadInput);
    }
  }
}

TEST_CASE("a save that fails half-way leaves no partial directory and every commit intact", "[ckpt][hostile]") {
  for (const char* err : {"ENOSPC", "EIO", "EROFS"}) {
    INFO(err);
    ScratchDir tmp;
    const auto one = ckpt::commit(sample_snapshot(1), tmp.str());
    const auto before = tree(tmp.str());
    {
      ScopedEnv e("DLRUN_FAULT", (std::string("disk_error:") + err + ":2").c_str());
      require_error([&] { ckpt::commit(sample_snapshot(2), tmp.str()); }, {"step-00000002.tmp", std::strerror(
                        std::string(err) == "ENOSPC" ? ENOSPC : std::string(err) == "EIO" ? EIO : EROFS)},
                    dlrun::ExitCode::kRuntime);
    }
    CHECK(tree(tmp.str()) == before);  // no step-2.tmp, LATEST still names step 1
    CHECK(ckpt::verify(one).ok);
    CHECK(ckpt::commit(sample_snapshot(2), tmp.str()) == tmp / "step-00000002");  // the disk is back
  }
}

TEST_CASE("an async write that fails is rethrown once, after the next snapshot is queued", "[ckpt][hostile]") {
  ScratchDir tmp;
  dlrun::CheckpointOptions opts;
  opts.async = true;
  opts.keep_last = 0;
  ScopedEnv e("DLRUN_FAULT", "disk_error:ENOSPC:2-2");
  ckpt::Writer w(tmp.str(), opts);
  w.save(sample_snapshot(1));
  w.save(sample_snapshot(2));  // fails in the background
  CHECK_THROWS_WITH(w.save(sample_snapshot(3)), Catch::Contains("step-00000002.tmp"));
  w.wait();  // step 3 was queued all the same and is committed
  CHECK(w.last().step == 3);
  CHECK(ckpt::verify(tmp / "step-00000003").ok);
  CHECK_FALSE(dlrun::fsutil::path_exists(tmp / "step-00000002.tmp"));
  CHECK_FALSE(dlrun::fsutil::path_exists(tmp / "step-00000002"));
}

TEST_CASE("a pickle whose memo index would make LibTorch allocate gigabytes is refused first", "[ckpt][hostile]") {
  // PROTO 2, EMPTY_DICT, LONG_BINPUT 2^31 - 1, STOP: LibTorch's unpickler would resize its memo
  // table to 2^31 entries (32 GB) before noticing anything.
  auto archive = [](const std::string& pickle) {
    std::vector<char> out;
    {
      caffe2::serialize::PyTorchStreamWriter w([&](const void* p, size_t n) {
        out.insert(out.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
        return n;
      });
      w.writeRecord("data.pkl", pickle.data(), pickle.size());
    }
    return out;
  };
  require_error([&] { ckpt::tensors_from_bytes(archive(std::string("\x80\x02}r\xff\xff\xff\x7f.", 9)), "model.pt"); },
                {"model.pt", "memo index 2147483647"});
  require_error([&] { ckpt::tensors_from_bytes(archive(std::string("\x80\x02}X\xff\xff\xff\x7f", 8)), "model.pt"); },
                {"model.pt", "truncated"});
  require_error([&] { ckpt::tensors_from_bytes(archive(std::string("\x80\x02\xf0.", 4)), "model.pt"); },
                {"model.pt", "unsupported pickle opcode 0xf0"});
  // A real tensor file passes the walk unchanged.
  CHECK(ckpt::tensors_from_bytes(ckpt::tensors_to_bytes(sample_snapshot(1).tensor_files.at("model")), "model.pt")
            .size() == sample_snapshot(1).tensor_files.at("model").size());
}

TEST_CASE("fuzz regression: an archive whose directory points past its end is read within bounds", "[ckpt][hostile]") {
  // fuzz/corpus/checkpoint/regression-truncated-archive: manifest, model.pt and state.json
  // separated by "CKPTSPLIT" (fuzz/checkpoint_fuzz.cpp). Its model.pt made LibTorch's in-memory
  // zip reader copy 65535 bytes past the buffer (ASan: heap-buffer-overflow).
  const std::string in = dlrun::testing::read_text(std::string(DLRUN_SOURCE_DIR) +
                                                   "/fuzz/corpus/checkpoint/regression-truncated-archive");
  const auto a = in.find("CKPTSPLIT"), b = in.find("CKPTSPLIT", a + 9);
  REQUIRE(a != std::string::npos);
  const std::string model = in.substr(a + 9, b == std::string::npos ? std::string::npos : b - a - 9);
  require_error([&] { ckpt::tensors_from_bytes(std::vector<char>(model.begin(), model.end()), "model.pt"); },
                {"model.pt", "not a readable torch file"});
}

TEST_CASE("fuzz regression: a record whose stated size exceeds the file is refused before LibTorch allocates it",
          "[ckpt][hostile]") {
  // fuzz_weights (CI, 2026-11-26): LibTorch's zip reader allocates the size a record's directory
  // entry states before reading it, in its constructor already for the version record; a
  // deflated entry may state any size, so a small file asked for 4 GB.
  const auto good = ckpt::tensors_to_bytes(sample_snapshot(1).tensor_files.at("model"));
  auto entry = [&](const std::vector<char>& bytes, const std::string& name) {
    for (size_t p = 0; p + 46 < bytes.size(); ++p)
      if (std::memcmp(bytes.data() + p, "PK\x01\x02", 4) == 0 &&
          std::string(bytes.data() + p + 46, std::min<size_t>(name.size(), bytes.size() - p - 46)) == name)
        return p;
    FAIL("no directory entry " << name);
    return size_t{0};
  };
  auto put32 = [](std::vector<char>& b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  };
  for (const std::string name : {"archive/version", "archive/data.pkl"}) {
    INFO(name);
    std::vector<char> bytes = good;
    const size_t p = entry(bytes, name);
    bytes[p + 10] = 8;                   // method: deflate, so miniz accepts any uncompressed size
    put32(bytes, p + 24, 0xffffffffu);   // uncompressed size
    require_error([&] { ckpt::tensors_from_bytes(bytes, "model.pt"); },
                  {"model.pt", "record " + name + " claims 4294967295 bytes"});
  }
  std::vector<char> bytes = good;
  const std::string z64("PK\x06\x06", 4);
  const size_t at = std::string(bytes.begin(), bytes.end()).rfind(z64);
  REQUIRE(at != std::string::npos);
  put32(bytes, at + 48, 0x7fffffffu);  // the directory's offset, in the zip64 end record torch writes
  require_error([&] { ckpt::tensors_from_bytes(bytes, "model.pt"); }, {"model.pt", "zip directory"});
}
