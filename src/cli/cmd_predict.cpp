// `dlrun predict CONFIG.yaml --checkpoint PATH|auto|best [key=value ...] IMAGES... [--top-k K]
//                [--json] [--batch N] [--run-dir DIR]`
// The top-k classes of image files (JPEG or PNG; files, folders searched recursively, or glob
// patterns), with their probabilities, as text or one JSON object per line. The weights are
// read as `dlrun eval` reads them; the class names, input side and normalization come from what
// the run recorded with its weights (a checkpoint's state.json "dataset", a safetensors
// export's metadata), else from the config's dataset when its files are here. Each image goes
// through the evaluation transform of the config (resize, center crop, normalize).
#include <CLI/CLI.hpp>
#include <glob.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/error.h"
#include "base/strings.h"
#include "base/json_limits.h"
#include "base/log.h"
#include "cli/app.h"
#include "cli/config_args.h"
#include "cli/weights_arg.h"
#include "data/image_decode.h"
#include "data/transforms.h"
#include "models/weights.h"
#include "train/components.h"
#include "train/step/device.h"

namespace fs = std::filesystem;

namespace dlrun::cli {
namespace {

struct PredictOptions {
  std::string config;
  std::vector<std::string> args;  ///< key=value overrides and image paths, in any order
  std::string checkpoint;
  std::string run_dir;
  int64_t top_k = 5;
  int64_t batch = 32;
  bool json = false;
};

/// What an image must be turned into, and what the outputs mean.
struct InputSpec {
  std::vector<std::string> classes;  ///< names by index ("" where unknown)
  int64_t channels = 1, side = 0;
  std::vector<double> mean, std;
  std::string source;  ///< where the above came from, for the log
};

InputSpec input_spec(const Config& cfg, const ckpt::WeightsRead& w) {
  InputSpec s;
  nlohmann::json d = w.dataset;
  if (d.is_object()) {
    s.source = "recorded with the weights";
  } else {  // weights without the record (a torch export, an older checkpoint): the config's dataset
    try {
      const train::Datasets ds = train::open_datasets(cfg, train::Purpose::kEval);
      d = train::dataset_record(cfg, ds.info);
      s.source = "the config's dataset";
    } catch (const Error& e) {
      fail_input("{} does not record the class names and normalization of its data, and the config's dataset cannot "
                 "be opened here to find them ({}); give a checkpoint or a safetensors export of a run of this "
                 "dlrun, or make the data available",
                 w.path, e.message());
    }
  }
  try {
    s.classes = d.at("classes").get<std::vector<std::string>>();
    // Integers in range, never a float's conversion: the record may come from a downloaded file.
    s.channels = json_int_or(d, "channels", 0, w.path + ": its record of the data");
    s.side = json_int_or(d, "image_size", 0, w.path + ": its record of the data");
    DLRUN_CHECK_INPUT(d.contains("channels") && d.contains("image_size") && (s.channels == 1 || s.channels == 3) &&
                          s.side >= 1 && s.side <= 16384,
                      "{}: its record of the data is malformed (channels {} must be 1 or 3, image_size {} in [1, "
                      "16384])",
                      w.path, s.channels, s.side);
    s.mean = d.at("mean").get<std::vector<double>>();
    s.std = d.at("std").get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    fail_input("{}: its record of the data is malformed ({})", w.path, e.what());
  }
  // The config's own statistics win, as they do in training.
  if (!cfg.data.mean.empty()) s.mean = cfg.data.mean;
  if (!cfg.data.std.empty()) s.std = cfg.data.std;
  if (cfg.data.image_size > 0) s.side = cfg.data.image_size;
  DLRUN_CHECK_INPUT(s.channels == cfg.model.in_channels && s.side > 0,
                    "{}: the weights were trained on {} channel(s), the config's model.in_channels is {}", w.path,
                    s.channels, cfg.model.in_channels);
  return s;
}

/// The image files `arg` names: a file, a folder (searched recursively, sorted), or a glob.
void collect(const std::string& arg, std::vector<std::string>& out) {
  std::error_code ec;
  if (fs::is_directory(arg, ec)) {
    std::vector<std::string> found;
    for (auto it = fs::recursive_directory_iterator(arg, fs::directory_options::skip_permission_denied, ec);
         it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (ec) break;
      if (it->is_regular_file(ec) && data::is_image_name(it->path().string())) found.push_back(it->path().string());
    }
    DLRUN_CHECK_INPUT(!found.empty(), "{}: a folder with no .jpg, .jpeg or .png file", arg);
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
    return;
  }
  if (fs::exists(arg, ec)) {
    out.push_back(arg);
    return;
  }
  DLRUN_CHECK_INPUT(arg.find_first_of("*?[") != std::string::npos, "{}: no such file or folder", arg);
  glob_t g{};
  const int rc = ::glob(arg.c_str(), 0, nullptr, &g);
  std::vector<std::string> found;
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i)
    if (data::is_image_name(g.gl_pathv[i]) && fs::is_regular_file(g.gl_pathv[i], ec)) found.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  DLRUN_CHECK_INPUT(!found.empty(), "{}: the pattern matches no .jpg, .jpeg or .png file", arg);
  out.insert(out.end(), found.begin(), found.end());
}

void predict(const PredictOptions& o) {
  ConfigArgs ca;
  std::vector<std::string> args = o.args;
  // The config is optional: a first argument that is no YAML file is an image (or an override).
  if (is_yaml_name(o.config)) ca.path = o.config;
  else if (!o.config.empty()) args.insert(args.begin(), o.config);
  std::vector<std::string> images;
  std::vector<std::string> paths;
  for (const auto& a : args) (is_override(a) ? ca.overrides : paths).push_back(a);
  DLRUN_CHECK_INPUT(!paths.empty(), "no images given: name image files, folders or glob patterns{}",
                    ca.path.empty() ? " (after the experiment YAML, or alone: the config then comes from --checkpoint)"
                                    : " after the config");
  if (ca.path.empty()) ca.path = config_of_checkpoint(o.checkpoint, o.run_dir, "predict");
  const Config cfg = load_validated(ca);
  for (const auto& p : paths) collect(p, images);

  const ckpt::WeightsRead w = read_checkpoint_arg(cfg, o.checkpoint, o.run_dir);
  const InputSpec spec = input_spec(cfg, w);
  const torch::Device device = train::place(cfg).device;
  auto model = models::build(cfg.model, cfg.run.seed, spec.side);
  models::LoadOptions lo;
  lo.allow_folded = true;
  lo.in_channels = cfg.model.in_channels;
  models::load_weights(*model, w.tensors, w.path, lo);
  model->to(device);
  model->eval();
  log::info("predict: {} image(s) with {} ({}), {} classes, input {}x{}x{} (class names and normalization {})",
            images.size(), w.path, w.kind, cfg.model.num_classes, spec.channels, spec.side, spec.side, spec.source);

  DataOptions d = cfg.data;
  d.image_size = spec.side;
  d.mean = spec.mean;
  d.std = spec.std;
  data::DatasetInfo info;
  info.channels = spec.channels;
  info.num_classes = cfg.model.num_classes;
  info.mean = spec.mean;
  info.std = spec.std;
  const data::Pipeline pipe = data::make_pipeline(d, info, /*train=*/false);
  const int64_t k = std::min<int64_t>(o.top_k, cfg.model.num_classes);
  const int64_t per = spec.channels * spec.side * spec.side;
  torch::NoGradGuard no_grad;
  for (size_t start = 0; start < images.size(); start += static_cast<size_t>(o.batch)) {
    const size_t n = std::min(images.size() - start, static_cast<size_t>(o.batch));
    auto x = torch::empty({static_cast<int64_t>(n), spec.channels, spec.side, spec.side});
    for (size_t i = 0; i < n; ++i)
      data::transform_encoded(data::read_image_file(images[start + i]), images[start + i], pipe, cfg.run.seed, 0, 0,
                              /*roi=*/false, x.data_ptr<float>() + static_cast<int64_t>(i) * per);
    const auto probs = torch::softmax(model->forward(x.to(device)).to(torch::kCPU, torch::kFloat64), 1);
    const auto [p, idx] = probs.topk(k, 1);
    for (size_t i = 0; i < n; ++i) {
      nlohmann::json top = nlohmann::json::array();
      std::string text;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t c = idx[static_cast<int64_t>(i)][j].item<int64_t>();
        const double prob = p[static_cast<int64_t>(i)][j].item<double>();
        const std::string name = c < static_cast<int64_t>(spec.classes.size()) ? spec.classes[c] : std::to_string(c);
        top.push_back({{"class", name}, {"index", c}, {"probability", prob}});
        text += fmt::format("{}{} {:.4f}", j ? ", " : "", name, prob);
      }
      if (o.json)
        std::printf("%s\n", nlohmann::json({{"image", images[start + i]}, {"top", top}}).dump().c_str());
      else
        std::printf("%s: %s\n", images[start + i].c_str(), text.c_str());
    }
    std::fflush(stdout);
  }
}

}  // namespace

void setup_predict(CLI::App& app) {
  auto* cmd = app.add_subcommand("predict", "top-k classes of image files, with their probabilities");
  auto o = std::make_shared<PredictOptions>();
  cmd->add_option("config", o->config,
                  "experiment YAML file (the model, the evaluation transform); optional: without it, the config.yaml "
                  "of the checkpoint or run directory --checkpoint names");
  cmd->add_option("args", o->args, "dotted.key=value overrides, and image files, folders or glob patterns");
  cmd->add_option("--checkpoint", o->checkpoint, kCheckpointHelp)->required();
  cmd->add_option("--run-dir", o->run_dir, "run directory for --checkpoint auto|best");
  cmd->add_option("--top-k", o->top_k, "classes per image (at most model.num_classes)")->check(CLI::Range(1, 1000));
  cmd->add_option("--batch", o->batch, "images per forward pass")->check(CLI::Range(1, 4096));
  cmd->add_flag("--json", o->json, "one JSON object per image: {image, top: [{class, index, probability}]}");
  cmd->callback([o] { predict(*o); });
}

}  // namespace dlrun::cli
