// Fuzz target: loading a checkpoint -- manifest.json checks, the torch tensor-file reader
// (torch.save's zip + pickle format, as model.pt and optim.pt are written) and state.json.
//
// Input: manifest.json, "CKPTSPLIT", model.pt, "CKPTSPLIT", state.json. The three files are
// written into a checkpoint directory. A fuzzer cannot forge SHA-256s, so the harness goes
// two ways: the full load (read_set: manifest, sizes, hashes; fails early on random input),
// and the manifest check plus the parse of the file contents as load() does after hashing.
#include <sys/stat.h>

#include <cstdint>
#include <string>

#include "base/error.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "common.h"

namespace ckpt = dlrun::ckpt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto [manifest, rest] = dlrun::fuzz::split(in, "CKPTSPLIT");
  const auto [model, state] = dlrun::fuzz::split(rest, "CKPTSPLIT");
  const std::string dir = dlrun::fuzz::scratch() + "/step-00000001";
  ::mkdir(dir.c_str(), 0755);
  dlrun::fuzz::write(dir + "/manifest.json", manifest);
  dlrun::fuzz::write(dir + "/model.pt", model);
  dlrun::fuzz::write(dir + "/state.json", state);

  (void)ckpt::verify(dir);  // never throws: a reason
  try {
    ckpt::load(dir);
  } catch (const dlrun::Error&) {
  }
  const ckpt::VerifyResult v = ckpt::detail::read_manifest(dir);
  if (!v.ok) return 0;
  ckpt::FileSet set;
  set.name = "step-00000001";
  set.manifest = v.manifest;
  set.files.emplace_back("model.pt", std::vector<char>(model.begin(), model.end()));
  set.files.emplace_back("state.json", std::vector<char>(state.begin(), state.end()));
  try {
    ckpt::parse(set, dir);
  } catch (const dlrun::Error&) {
  }
  return 0;
}
