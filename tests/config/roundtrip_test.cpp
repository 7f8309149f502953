// `dlrun config show` output (to_yaml) reads back to the same Config: load -> to_yaml ->
// load_text -> to_yaml is a fixed point, with and without doc comments, for strings that
// need quoting and floats that need care.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "config/schema.h"
#include "config/tree.h"
#include "support/env.h"
#include "support/errors.h"
#include "support/names.h"
#include "support/scratch_dir.h"

using dlrun::Config;
namespace config = dlrun::config;

namespace {

Config minimal() {
  Config c;
  c.model.name = "mlp";
  c.data.name = "synthetic";
  return c;
}

// to_yaml(c) loads back, and printing that again gives the same text.
Config round_trip(const Config& c, bool docs) {
  std::string once = config::to_yaml(c, docs);
  INFO("yaml:\n" << once);
  Config back = config::load_text(once, "show.yaml");
  CHECK(config::to_yaml(back, docs) == once);
  CHECK(config::to_yaml(back, !docs) == config::to_yaml(c, !docs));
  return back;
}

}  // namespace

TEST_CASE("to_yaml round-trips the defaults and the shipped configs", "[config][show]") {
  for (bool docs : {true, false}) {
    round_trip(minimal(), docs);
    for (const char* rel : {"configs/quickstart.yaml", "configs/synthetic/convnet.yaml"}) {
      INFO(rel);
      Config c = config::load(std::string(DLRUN_SOURCE_DIR) + "/" + rel);
      round_trip(c, docs);
    }
  }
}

TEST_CASE("to_yaml round-trips a config with every section changed", "[config][show]") {
  const std::string yaml =
      "run: {name: exp, dir: /tmp/x y, seed: 4294967295, device: 'cuda:1', threads: 3, deterministic: true}\n"
      "model: {name: resnet50, num_classes: 1000, in_channels: 3, stem: cifar, hidden: [], dropout: 0.25,\n"
      "        width: 64, channels_last: true}\n"
      "data:\n"
      "  name: image_folder\n  root: /data/imagenet\n  batch_size: 1024\n  augment: [flip, resized_crop, erase]\n"
      "  mean: [0.485, 0.456, 0.406]\n  std: [0.229, 0.224, 0.225]\n  limit_train: 1000000000000\n"
      "  resized_crop_scale: [0.35, 1]\n  synthetic_shape: [3, 224, 224]\n  pin_memory: false\n"
      "optim: {name: adamw, lr: 3e-4, eps: 1e-8, betas: [0.9, 0.95], weight_decay: 0.05, no_decay_norm_bias: true}\n"
      "sched: {name: multistep, milestones: [30, 60, 90.5], gamma: 0.2, warmup_epochs: 0.5, final_div_factor: 1e12}\n"
      "train: {epochs: 90, grad_accum: 4, clip_grad_norm: 1.0, label_smoothing: 0.1, eval_at_end: false}\n"
      "amp: {enabled: true, dtype: bf16, init_scale: 65536.0}\n"
      "dist: {backend: nccl, timeout_s: 1800, bucket_mb: 0.5}\n"
      "checkpoint: {dir: ckpts, every_steps: 500, every_minutes: 0.1, keep_last: 0, async: false}\n"
      "preemption: {watch: file, endpoint: /tmp/notice, poll_s: 0.01}\n"
      "log: {every_steps: 1, tensorboard: false, progress: lines}\n";
  Config c = config::load_text(yaml, "full.yaml");
  for (bool docs : {true, false}) {
    Config back = round_trip(c, docs);
    CHECK(back.run.dir == "/tmp/x y");
    CHECK(back.run.seed == 4294967295);
    CHECK(back.data.limit_train == 1000000000000);
    CHECK(back.optim.lr == 3e-4);
    CHECK(back.optim.eps == 1e-8);
    CHECK(back.model.hidden.empty());
    CHECK(back.sched.milestones == std::vector<double>{30, 60, 90.5});
    CHECK(back.data.augment == std::vector<std::string>{"flip", "resized_crop", "erase"});
  }
}

TEST_CASE("strings that YAML would misread are quoted and read back unchanged", "[config][show]") {
  const std::vector<std::string> tricky = {
      "a b", "yes", "no", "on", "off", "true", "False", "null", "Null", "~", "123", "-5", "1e3", "0x1F", ".inf",
      "", " leading", "trailing ", "cuda:", "a: b", "a:b", "#hash", "a #b", "[x]", "{x}", "a,b", "*star",
      "&anchor", "!tag", "%pct", "@at", "`tick", "|pipe", ">gt", "'single'", "\"double\"", "back\\slash",
      "tab\there", "new\nline", "bell\a", "-", "- item", "? q", "unicode é ü", "C:\\path", "/abs/path.yaml",
      "runs/exp-1_v2.0", "${not interpolated}", "$${x}", "a$${b}${c}", "$5", "a$", "$"};
  for (const auto& s : tricky) {
    for (bool docs : {true, false}) {
      INFO("string: [" << s << "] docs: " << docs);
      Config c = minimal();
      c.run.name = s;
      c.run.dir = s;
      c.preemption.endpoint = s;
      std::string text = config::to_yaml(c, docs);
      INFO("yaml:\n" << text);
      Config back = config::load_text(text, "show.yaml");
      CHECK(back.run.name == s);
      CHECK(back.run.dir == s);
      CHECK(back.preemption.endpoint == s);
      CHECK(config::to_yaml(back, docs) == text);
    }
  }
}

TEST_CASE("floats print the shortest text that reads back exactly, always as floats", "[config][show]") {
  const std::vector<double> values = {1e-8, 0.1, 65536.0, 1.0 / 3.0, 1e16, 1e-300, 2.5e+300, 123456789.125, 5e-324,
                                      0.0, 3.0, 1e4, 0.30000000000000004};
  for (double v : values) {
    INFO("value: " << v);
    Config c = minimal();
    c.optim.eps = v > 0 ? std::min(v, 1.0) : 1e-8;
    c.amp.init_scale = std::clamp(v, 1.0, 1e12);
    c.data.mean = {v, -v};
    Config back = config::load_text(config::to_yaml(c, false), "show.yaml");
    CHECK(back.optim.eps == c.optim.eps);
    CHECK(back.amp.init_scale == c.amp.init_scale);
    CHECK(back.data.mean == c.data.mean);
  }
  Config c = minimal();
  c.optim.eps = 1e-8;
  c.optim.lr = 0.1;
  c.amp.init_scale = 65536.0;
  std::string text = config::to_yaml(c, false);
  CHECK_THAT(text, Catch::Matchers::Contains("  eps: 1e-08\n"));
  CHECK_THAT(text, Catch::Matchers::Contains("  lr: 0.1\n"));
  CHECK_THAT(text, Catch::Matchers::Contains("  init_scale: 65536.0\n"));
  CHECK_THAT(text, Catch::Matchers::Contains("  momentum: 0.9\n"));
  CHECK_THAT(text, Catch::Matchers::Contains("  betas: [0.9, 0.999]\n"));
  CHECK_THAT(text, Catch::Matchers::Contains("  hidden: [512, 256]\n"));
  CHECK_THAT(text, Catch::Matchers::Contains("  dir: null\n"));
  CHECK_THAT(text, Catch::Matchers::Contains("  augment: []\n"));
}

TEST_CASE("config show lists every key of the schema once, with its doc", "[config][show]") {
  Config c = minimal();
  auto tree = config::parse_yaml(config::to_yaml(c, true), "show.yaml");
  size_t n = 0;
  for (const auto& key : config::all_keys()) {
    INFO(key);
    auto dot = key.find('.');
    auto sec = tree->get(key.substr(0, dot));
    REQUIRE(sec);
    CHECK(sec->get(key.substr(dot + 1)));
    ++n;
  }
  size_t printed = 0;
  for (const auto& [name, sec] : tree->map) printed += sec->map.size();
  CHECK(printed == n);
  // Every field line carries its doc; without docs there is no comment at all.
  Config d = minimal();
  for (const auto& s : config::describe(d))
    for (const auto& f : s.fields) CHECK_THAT(config::to_yaml(c, true), Catch::Matchers::Contains("# " + f.doc));
  CHECK(config::to_yaml(c, false).find('#') == std::string::npos);
  // Choices the doc does not spell out are appended, and required fields say so.
  CHECK_THAT(config::to_yaml(c, true),
             Catch::Matchers::Contains("# model architecture: " + dlrun::testing::joined_names("model.name", " | ") +
                                       " (required)\n"));
  CHECK_THAT(config::to_yaml(c, true), Catch::Matchers::Contains("# optimizer: sgd | adamw | rmsprop | rmsprop_tf | lamb | lars\n"));
  CHECK_THAT(config::to_yaml(c, true), Catch::Matchers::Contains("# terminal display: auto (a bar on a TTY, else lines), bar, lines or none\n"));
}
