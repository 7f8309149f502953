// Cross-field validation (validate.cpp): each rule fails with exit code 2 at the key whose
// value is wrong, located where that value was written (file:line, base file or command
// line), and legal-but-odd settings come back as warnings.
#include <catch2/catch.hpp>

#include <filesystem>

#include "config/validate.h"
#include "support/env.h"
#include "support/errors.h"
#include "support/scratch_dir.h"

using dlrun::Config;
using dlrun::testing::Expect;
using dlrun::testing::expect_error;
using dlrun::testing::ScratchDir;
namespace config = dlrun::config;

namespace {

const std::string kMin = "model: {name: mlp}\ndata: {name: synthetic}\n";

// Load (must succeed) then validate (must fail as `e` says).
void expect_invalid(const std::string& yaml, Expect e, const std::vector<std::string>& overrides = {},
                    int world_size = 1) {
  if (e.file.empty()) e.file = "mem.yaml";
  INFO("yaml:\n" << yaml);
  Config c = config::load_text(yaml, "mem.yaml", overrides);
  expect_error([&] { config::validate(c, {world_size}); }, e);
}

}  // namespace

TEST_CASE("valid configs pass validation", "[config][validate]") {
  CHECK(config::validate(config::load_text(kMin, "mem.yaml")).empty());
  CHECK(config::validate(config::load_text(kMin + "run: {device: cuda:3}\n", "mem.yaml")).empty());
  Config c = config::load_text(kMin + "train: {grad_accum: 3}\n", "mem.yaml", {"data.batch_size=96"});
  CHECK(config::validate(c, {4}).empty());  // 96 = 4 ranks x 3 accumulation steps x 8
  ScratchDir d;
  std::filesystem::create_directories(d.path("images"));
  CHECK(config::validate(config::load_text("model: {name: convnet}\ndata: {name: image_folder, image_size: 32, root: " +
                                               d.path("images") + "}\n",
                                           "mem.yaml"))
            .empty());
}

TEST_CASE("the global batch must split over ranks and accumulation steps", "[config][validate]") {
  expect_invalid("model: {name: mlp}\ndata:\n  name: synthetic\n  batch_size: 100\ntrain: {grad_accum: 3}\n",
                 {"data.batch_size", "", 4, 15,
                  "global batch size 100 is not divisible by world size 1 x train.grad_accum 3 = 3\nuse a multiple of 3"});
  expect_invalid("model: {name: mlp}\ndata:\n  name: synthetic\n  batch_size: 100\n",
                 {"data.batch_size", "", 4, 15, "world size 8 x train.grad_accum 1 = 8"}, {}, 8);
  // The default batch size (128) has no line: the error names the file only.
  expect_invalid(kMin + "train: {grad_accum: 3}\n", {"data.batch_size", "", 0, 0, "global batch size 128"});
}

TEST_CASE("datasets other than synthetic need an existing data directory", "[config][validate]") {
  expect_invalid("model: {name: mlp}\ndata: {name: mnist}\n", {"data.root", "", 0, 0, "data.name=mnist needs data.root"});
  expect_invalid("model: {name: mlp}\ndata: {name: image_folder}\n", {"data.root", "", 0, 0, "needs data.root"});
  // The directory itself is checked where the data is opened (train, eval, config validate),
  // not by validate(): `config show` and `info CONFIG` describe a config without its data.
  Config c = config::load_text("model: {name: mlp}\ndata:\n  name: cifar10\n  root: /nonexistent/dlrun/cifar\n",
                               "mem.yaml");
  CHECK(config::validate(c).empty());
  expect_error([&] { config::check_data_present(c); },
               {"data.root", "mem.yaml", 4, 9, "data directory does not exist: /nonexistent/dlrun/cifar"});
  c = config::load_text("model: {name: mlp}\ndata: {name: fashion_mnist}\n", "mem.yaml", {"data.root=/nonexistent/fm"});
  expect_error([&] { config::check_data_present(c); },
               {"data.root", "command line 'data.root=/nonexistent/fm'", 0, 0, "does not exist: /nonexistent/fm"});
}

TEST_CASE("an image_folder needs data.image_size: its images vary in size", "[config][validate]") {
  expect_invalid("model: {name: mlp}\ndata: {name: image_folder, root: /x}\n",
                 {"data.image_size", "", 0, 0, "the images of an image_folder vary in size"});
}

TEST_CASE("per-channel statistics must match model.in_channels", "[config][validate]") {
  expect_invalid("model: {name: mlp, in_channels: 3}\ndata:\n  name: synthetic\n  synthetic_shape: [3, 8, 8]\n"
                 "  mean: [0.5, 0.5]\n",
                 {"data.mean", "", 5, 9, "2 values for 3 channels (model.in_channels)"});
  expect_invalid("model: {name: mlp}\ndata:\n  name: synthetic\n  std: [0.2, 0.3, 0.4]\n",
                 {"data.std", "", 4, 8, "3 values for 1 channels"});
  expect_invalid("model: {name: mlp}\ndata:\n  name: synthetic\n  std: [0]\n", {"data.std", "", 4, 8, "must be > 0"});
  expect_invalid("model: {name: mlp, in_channels: 3}\ndata: {name: synthetic}\n",
                 {"data.synthetic_shape", "", 0, 0, "1 channels, but model.in_channels is 3"});
  expect_invalid("model: {name: mlp}\ndata:\n  name: synthetic\n  synthetic_shape: [28, 28]\n",
                 {"data.synthetic_shape", "", 4, 20, "expected [C, H, W], got 2 values"});
  expect_invalid("model: {name: mlp}\ndata:\n  name: synthetic\n  resized_crop_scale: [0.9, 0.1]\n",
                 {"data.resized_crop_scale", "", 4, 23, "0 < min <= max <= 1"});
}

TEST_CASE("model and optimizer shape rules", "[config][validate]") {
  expect_invalid("model: {name: mlp, hidden: []}\ndata: {name: synthetic}\n",
                 {"model.hidden", "", 1, 28, "mlp needs at least one hidden layer"});
  expect_invalid(kMin + "optim:\n  betas: [0.9]\n", {"optim.betas", "", 4, 10, "expected [beta1, beta2], got 1 values"});
}

TEST_CASE("multistep needs increasing milestones", "[config][validate]") {
  expect_invalid(kMin + "sched: {name: multistep}\n", {"sched.milestones", "", 0, 0, "multistep needs at least one milestone"});
  expect_invalid(kMin + "sched:\n  name: multistep\n  milestones: [30, 20]\n",
                 {"sched.milestones", "", 5, 15, "strictly increasing"});
  CHECK(config::validate(config::load_text(kMin + "sched: {name: multistep, milestones: [30, 60]}\n", "mem.yaml")).empty());
}

TEST_CASE("device rules", "[config][validate]") {
  expect_invalid(kMin + "run: {device: cpu}\namp:\n  enabled: true\n  dtype: fp16\n",
                 {"amp.dtype", "", 6, 10, "fp16 autocast needs a CUDA device, but run.device is cpu"});
  CHECK(config::validate(config::load_text(kMin + "run: {device: cpu}\namp: {enabled: true, dtype: bf16}\n", "mem.yaml"))
            .empty());
  expect_invalid(kMin + "run: {device: cuda}\namp:\n  enabled: true\n",
                 {"amp.enabled", "", 5, 12, "automatic mixed precision needs model.dtype float32, but it is float64"},
                 {"model.dtype=float64"});
  expect_invalid(kMin + "run:\n  device: gpu\n", {"run.device", "", 4, 11, "invalid device 'gpu'\nuse auto, cpu, cuda or cuda:N"});
  expect_invalid(kMin + "run:\n  device: \"cuda:\"\n", {"run.device", "", 4, 11, "invalid device 'cuda:'"});
  expect_invalid(kMin + "run:\n  device: CPU\n", {"run.device", "", 4, 11, "invalid device"});
  expect_invalid(kMin + "run: {device: cpu}\ndist: {backend: nccl}\n", {"dist.backend", "", 4, 17, "nccl needs CUDA devices"});
}

TEST_CASE("device rules apply to the device run.device resolves to", "[config][validate]") {
  // auto cannot be judged from the config alone; check_device_fit judges it once resolved.
  Config c = config::load_text(kMin + "amp:\n  enabled: true\n  dtype: fp16\n", "mem.yaml");
  CHECK(config::validate(c).empty());
  config::check_device_fit(c, /*cuda=*/true, "cuda:0");
  expect_error([&] { config::check_device_fit(c, false, "cpu"); },
               {"amp.dtype", "mem.yaml", 5, 10,
                "fp16 autocast needs a CUDA device, but run.device=auto resolves to cpu here (no CUDA device is visible"});
  c = config::load_text(kMin + "train: {cuda_graphs: true}\n", "mem.yaml");
  expect_error([&] { config::check_device_fit(c, false, "cpu"); }, {"train.cuda_graphs", "mem.yaml", 3, 22, "CUDA graphs need"});
}

TEST_CASE("preemption.watch=file needs an endpoint", "[config][validate]") {
  expect_invalid(kMin + "preemption: {watch: file}\n",
                 {"preemption.endpoint", "", 0, 0, "preemption.watch=file needs the path to watch"});
  expect_invalid(kMin + "preemption: {watch: file, endpoint: null}\n",
                 {"preemption.endpoint", "", 3, 37, "needs the path"});
  CHECK(config::validate(config::load_text(kMin + "preemption: {watch: file, endpoint: /tmp/notice}\n", "mem.yaml")).empty());
}

TEST_CASE("validation errors point at overrides and base files", "[config][validate]") {
  expect_invalid(kMin, {"run.device", "command line 'run.device=tpu'", 0, 0, "invalid device 'tpu'"}, {"run.device=tpu"});
  ScratchDir d;
  d.write("base.yaml", "model: {name: mlp}\ndata: {name: synthetic}\nsched:\n  name: multistep\n  milestones: [5, 5]\n");
  Config c = config::load(d.write("child.yaml", "base: base.yaml\n"));
  expect_error([&] { config::validate(c); }, {"sched.milestones", d.path("base.yaml"), 5, 15, "strictly increasing"});
}

TEST_CASE("legal but odd settings are warnings", "[config][validate]") {
  auto w = config::validate(config::load_text(kMin + "optim: {name: adamw, nesterov: true}\n", "mem.yaml"));
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0], Catch::Matchers::Contains("optim.nesterov has no effect with adamw"));
  w = config::validate(config::load_text(kMin + "checkpoint: {keep_last: 0, keep_every: 100}\n", "mem.yaml"));
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0], Catch::Matchers::Contains("checkpoint.keep_every has no effect"));
}

TEST_CASE("root_or_default knows Debian's Fashion-MNIST", "[config][validate]") {
  dlrun::DataOptions d;
  d.name = "fashion_mnist";
  CHECK(d.root_or_default() == "/usr/share/datasets/fashion-mnist");
  d.root = "/data/fm";
  CHECK(d.root_or_default() == "/data/fm");
  d.name = "cifar10";
  d.root.clear();
  CHECK(d.root_or_default().empty());
}

TEST_CASE("checkpoint.remote must be an s3:// URL with a valid bucket", "[config][validate][remote]") {
  expect_invalid(kMin + "checkpoint:\n  remote: /mnt/bucket\n",
                 {"checkpoint.remote", "", 4, 11, "is not an s3://BUCKET/PREFIX URL\nwrite s3://BUCKET/PREFIX"});
  expect_invalid(kMin + "checkpoint:\n  remote: s3://My_Bucket/x\n", {"checkpoint.remote", "", 4, 11, "no valid bucket name"});
  expect_invalid(kMin, {"checkpoint.remote", "command line 'checkpoint.remote=s3://b'", 0, 0, "no valid bucket name"},
                 {"checkpoint.remote=s3://b"});
  {  // the key said once, not "checkpoint.remote: checkpoint.remote: ..."
    Config c = config::load_text(kMin, "mem.yaml", {"checkpoint.remote=s3://b"});
    try {
      config::validate(c, {1});
      FAIL("s3://b was accepted");
    } catch (const dlrun::Error& e) {
      CHECK(e.render().find("checkpoint.remote: checkpoint.remote") == std::string::npos);
      CHECK(e.message().rfind("'s3://b' has no valid bucket name", 0) == 0);
    }
  }
  CHECK(config::validate(config::load_text(kMin + "checkpoint: {remote: s3://my-bucket/runs/exp1}\n", "mem.yaml")).empty());
}

TEST_CASE("remote storage: plain http to another host, a missing CA file and KMS keys without SSE-KMS are refused",
          "[config][validate][remote]") {
  const std::string remote = kMin + "checkpoint:\n  remote: s3://my-bucket/runs\n";
  expect_invalid(remote + "  remote_endpoint: http://minio.lan:9000\n",
                 {"checkpoint.remote_endpoint", "", 5, 20,
                  "travel unencrypted\nuse https://; or, on a network you trust, say so: "
                  "checkpoint.remote_allow_unencrypted_http: true"});
  for (const char* ok : {"  remote_endpoint: http://127.0.0.1:9000\n", "  remote_endpoint: https://minio.lan\n",
                         "  remote_endpoint: http://minio.lan:9000\n  remote_allow_unencrypted_http: true\n",
                         "  remote_sse: aws:kms\n  remote_sse_kms_key_id: alias/ckpt\n  remote_sse_bucket_key: true\n",
                         "  remote_sse: AES256\n  remote_tls_min: 1.3\n"}) {
    INFO(ok);
    CHECK(config::validate(config::load_text(remote + ok, "mem.yaml")).empty());
  }
  expect_invalid(remote + "  remote_ca_bundle: /nonexistent/ca.pem\n",
                 {"checkpoint.remote_ca_bundle", "", 5, 21, "/nonexistent/ca.pem is not a file"});
  expect_invalid(kMin + "checkpoint:\n  remote_sse_kms_key_id: alias/ckpt\n",
                 {"checkpoint.remote_sse_kms_key_id", "", 4, 26, "set checkpoint.remote_sse: aws:kms as well"});
  expect_invalid(kMin + "checkpoint:\n  remote_sse: AES256\n  remote_sse_bucket_key: true\n",
                 {"checkpoint.remote_sse_bucket_key", "", 5, 26, "belongs to SSE-KMS only"});
  expect_error([&] { config::load_text(remote + "  remote_sse: kms\n", "mem.yaml"); },
               {"checkpoint.remote_sse", "mem.yaml", 5, 15, "aws:kms"});
}

TEST_CASE("`auto` is a value of every_minutes and deadline_s only, and every_minutes: auto needs an MTBF",
          "[config][validate][remote]") {
  Config c = config::load_text(kMin + "checkpoint: {every_minutes: auto}\npreemption: {mtbf_hours: 6}\n", "mem.yaml");
  CHECK(dlrun::is_auto(c.checkpoint.every_minutes));
  CHECK(config::validate(c).empty());
  expect_invalid(kMin + "checkpoint:\n  every_minutes: auto\n",
                 {"checkpoint.every_minutes", "", 4, 18, "auto needs the mean time between interruptions"});
  // A quoted "auto" is a string, and other number keys take numbers only.
  expect_error([&] { config::load_text(kMin + "checkpoint: {every_minutes: \"auto\"}\n", "mem.yaml"); },
               {"checkpoint.every_minutes", "mem.yaml", 3, 29, ""});
  expect_error([&] { config::load_text(kMin + "preemption: {poll_s: auto}\n", "mem.yaml"); },
               {"preemption.poll_s", "mem.yaml", 3, 22, ""});
}

TEST_CASE("preemption.deadline_s: auto is the provider's notice time", "[config][remote]") {
  dlrun::PreemptionOptions p;
  REQUIRE(dlrun::is_auto(p.deadline_s));  // the default
  const std::pair<dlrun::NoticeSource, double> cases[] = {{dlrun::NoticeSource::kAws, 120.0},
                                                           {dlrun::NoticeSource::kGcp, 30.0},
                                                           {dlrun::NoticeSource::kAzure, 30.0},
                                                           {dlrun::NoticeSource::kFile, 0.0},
                                                           {dlrun::NoticeSource::kNone, 0.0}};
  for (const auto& [watch, seconds] : cases) {
    p.watch = watch;
    CHECK(p.deadline_or_default() == seconds);
  }
  p.deadline_s = 45;  // set: it wins over the provider's
  p.watch = dlrun::NoticeSource::kAws;
  CHECK(p.deadline_or_default() == 45.0);
}
