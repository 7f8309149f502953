// Reading weights by what the bytes are (see weights_file.h).
#include "checkpoint/weights_file.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/fsutil.h"
#include "base/json_limits.h"
#include "checkpoint/averages.h"
#include "checkpoint/layout.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/tensor_file.h"

namespace dlrun::ckpt {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

constexpr const char* kOnnxKind = "an ONNX model";
constexpr const char* kAccepted =
    "give a checkpoint directory, a run directory, or a weights file from `dlrun export` "
    "(safetensors, or --format torch)";

}  // namespace

std::string sniff_kind(const std::string& head) {
  if (head.empty()) return "an empty file";
  // An ONNX ModelProto: field 1 (ir_version, a varint: 0x08) first, as every exporter writes it,
  // and a producer's name (field 2: 0x12, then its length) or a graph soon after.
  if (head.size() > 4 && static_cast<unsigned char>(head[0]) == 0x08 &&
      (head.find("dlrun") != std::string::npos || head.find("pytorch") != std::string::npos ||
       head.find("onnx") != std::string::npos))
    return kOnnxKind;
  if (looks_like_safetensors(head)) return "a safetensors file";
  if (starts_with(head, "PK\x03\x04")) return "a zip archive (torch.save)";
  if (starts_with(head, "\xff\xd8\xff")) return "a JPEG image";
  if (starts_with(head, "\x89PNG")) return "a PNG image";
  if (head.size() > 262 && head.compare(257, 5, "ustar") == 0) return "a tar archive (a WebDataset shard?)";
  if (starts_with(head, "\x80\x02") || starts_with(head, "\x80\x04")) return "a legacy (non-zip) torch.save pickle";
  const auto first = head.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (head[first] == '{' || head[first] == '['))
    return "a JSON file";
  const bool text = std::all_of(head.begin(), head.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 || c == '\n' || c == '\r' || c == '\t';
  });
  return text ? "a YAML or text file" : "a file of unknown kind";
}

std::string best_checkpoint(const std::string& run_dir) {
  const std::string dir = checkpoints_dir_of(run_dir);
  const auto name = read_best(dir);
  DLRUN_CHECK_INPUT(name.has_value(), "{}: no BEST (the run kept no best checkpoint: set checkpoint.keep_best)", dir);
  return dir + "/" + *name;
}

WeightsRead read_weights(const std::string& path,
                         const std::function<void(const std::string&, const std::string&)>& on_skip) {
  WeightsRead r;
  if (fsutil::is_directory(path)) {
    std::string dir = path;
    Snapshot snap;
    if (fsutil::path_exists(path + "/" + detail::kManifest)) {
      snap = load(path);
    } else {
      const std::string checkpoints = checkpoints_dir_of(path);
      auto newest = load_preferred(checkpoints, on_skip);
      DLRUN_CHECK_INPUT(newest.has_value(),
                        "{}: a directory with no checkpoint that verifies (looked in {}); {}", path, checkpoints,
                        kAccepted);
      dir = newest->path;
      snap = std::move(newest->snapshot);
    }
    r.path = dir;
    r.kind = "checkpoint";
    r.step = snap.step;
    r.dataset = snap.state.value("dataset", nlohmann::json());
    r.tensors = std::move(snap.tensor_files["model"]);
    std::vector<std::string> stems;
    for (const auto& [stem, tensors] : snap.tensor_files) stems.push_back(stem);
    for (const auto& a : averages_in(snap.state, stems))
      if (a.ready) r.averages.push_back({a.name, a.what, std::move(snap.tensor_files[a.name])});
    DLRUN_CHECK_INPUT(!r.tensors.empty(), "{}: the checkpoint has no model weights (model.pt)", dir);
    return r;
  }
  DLRUN_CHECK_INPUT(fsutil::path_exists(path), "{}: no such file or directory; {}", path, kAccepted);
  r.path = path;
  uint64_t size = 0;
  const std::string head = fsutil::read_head(path, 512, &size);  // what the file is, before reading it
  if (looks_like_safetensors(head, size)) {
    r.kind = "safetensors file";
    r.tensors = read_safetensors(path, &r.metadata);  // tensor by tensor: never the whole file at once
    if (const auto d = r.metadata.find("dlrun_dataset"); d != r.metadata.end())
      r.dataset = nlohmann::json::parse(d->second, nullptr, /*allow_exceptions=*/false);
    if (r.dataset.is_discarded()) r.dataset = nullptr;
    DLRUN_CHECK_INPUT(!r.tensors.empty(), "{}: a {} with no tensors", path, r.kind);
    return r;
  }
  if (starts_with(head, "PK\x03\x04")) {
    r.kind = "torch file";
    r.tensors = tensors_from_bytes(fsutil::read_bytes(path), path);  // one copy of the file in memory
    // A checkpoint's other tensor files are zip dicts too: name them rather than fail on keys.
    const bool optim = !r.tensors.empty() && std::all_of(r.tensors.begin(), r.tensors.end(), [](const auto& t) {
      for (const char* leaf : {".momentum_buffer", ".exp_avg", ".exp_avg_sq"})
        if (t.first.size() > std::strlen(leaf) && t.first.compare(t.first.size() - std::strlen(leaf), std::string::npos, leaf) == 0)
          return true;
      return false;
    });
    DLRUN_CHECK_INPUT(!optim, "{}: this is a checkpoint's optimizer state (optim.pt), not model weights; give the "
                              "checkpoint directory, or its model.pt", path);
  } else if (starts_with(head, "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19")) {  // torch's legacy magic
    throw Error(ExitCode::kBadInput, path + ": a legacy torch.save file (torch < 1.6), which only Python reads",
                "re-save it once with a current torch: python -c \"import torch,sys; "
                "torch.save(torch.load(sys.argv[1]), sys.argv[2])\" OLD NEW");
  } else if (sniff_kind(head) == kOnnxKind) {
    throw Error(ExitCode::kBadInput, path + ": an ONNX model; dlrun evaluates and predicts from its own weights, not ONNX",
                "give the checkpoint (or run directory) it was exported from, or run the ONNX file in onnxruntime "
                "(docs/training.md, \"ONNX\")");
  } else {
    fail_input("{}: {}, not model weights; {}", path, sniff_kind(head), kAccepted);
  }
  DLRUN_CHECK_INPUT(!r.tensors.empty(), "{}: a {} with no tensors", path, r.kind);
  return r;
}

}  // namespace dlrun::ckpt
