// `dlrun info [CONFIG.yaml [key=value ...]] [--json]`: versions, build features (the GPU
// architectures compiled in), devices (with their compute capability and whether the fused
// kernels run there), CPU threads — for bug reports — and the fast paths (cuDNN autotuning, TF32,
// channels_last, AMP, CUDA graphs, activation checkpointing) a config turns on, the defaults
// without one, with the device it would get here, whether its fused kernels would run and which
// conv-BN-ReLU path (modules, dlrun's kernels, cuDNN's fused BatchNorm-activation) it takes, and why;
// and the optimizer's parameter groups (weight decay, learning-rate scale: train/step/param_groups.h).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <thread>

#include "base/build_info.h"
#include "cli/app.h"
#include "cli/config_args.h"
#include "kernels/device_query.h"
#include "models/model.h"
#include "train/step/device.h"
#include "train/step/param_groups.h"

namespace dlrun::cli {
namespace {

// The optimizer's parameter groups for the config's model, built at the side the config gives
// (data.image_size, model.image_size) or the model's usual one.
nlohmann::json optimizer_groups(const Config& cfg) {
  nlohmann::json j = {{"name", name_of(cfg.optim.name)}, {"layer_decay", cfg.optim.layer_decay},
                      {"no_decay_norm_bias", cfg.optim.no_decay_norm_bias}};
  try {
    int64_t side = cfg.data.image_size > 0 ? cfg.data.image_size : cfg.model.image_size;
    for (const auto& z : models::zoo())
      if (side <= 0 && z.name == cfg.model.name) side = z.image_size;
    auto model = models::build(cfg.model, static_cast<uint64_t>(cfg.run.seed), side > 0 ? side : 28);
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& g : train::param_groups(cfg.optim, *model)) {
      int64_t values = 0;
      for (const auto& p : g.params) values += p.numel();
      groups.push_back({{"name", g.name}, {"layer", g.layer}, {"lr_scale", g.lr_scale},
                        {"weight_decay", g.weight_decay}, {"tensors", g.params.size()}, {"values", values},
                        {"params", g.names}});
    }
    j["image_size"] = side > 0 ? side : 28;
    j["groups"] = groups;
  } catch (const std::exception& e) {
    j["groups_error"] = e.what();
  }
  return j;
}

nlohmann::json collect(const Config& cfg) {
  nlohmann::json j;
  j["dlrun"] = {{"version", build::version()}, {"git", build::git_revision()}, {"build_type", build::build_type()},
                {"compiler", build::cxx_compiler()}};
  j["torch"] = {{"version", build::torch_version()},
                {"cuda_available", torch::cuda::is_available()},
                {"cuda_device_count", torch::cuda::device_count()},
                {"cudnn_available", torch::cuda::cudnn_is_available()},
                {"mkldnn", at::hasMKLDNN()},
                {"openmp", at::hasOpenMP()},
                {"parallel_info", at::get_parallel_info()}};
  bool torch_cuda = false;
#ifdef DLRUN_TORCH_HAS_CUDA
  torch_cuda = true;
#endif
  j["features"] = {{"cuda_sources_compiled", cuda::cuda_compiled()},
                   {"cuda_archs", cuda::compiled_archs()},
                   {"nvcc", build::cuda_compiler_version()},
                   {"torch_built_with_cuda", torch_cuda},
#ifdef DLRUN_HAVE_CURL
                   {"cloud_notices_http", true},
#else
                   {"cloud_notices_http", false},
#endif
  };
  j["cuda"] = {{"driver", cuda::driver_version()}, {"runtime", cuda::runtime_version()}};
  nlohmann::json devs = nlohmann::json::array();
  for (const auto& d : cuda::devices()) {
    const auto fused = train::fused_kernels_here(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(d.index)));
    devs.push_back({{"index", d.index}, {"name", d.name},
                    {"compute_capability", std::to_string(d.major) + "." + std::to_string(d.minor)},
                    {"memory_gib", static_cast<double>(d.total_memory) / (1ull << 30)},
                    {"multiprocessors", d.multiprocessors},
                    {"fused_kernels", fused.runs ? fused.image : "no: " + fused.why}});
  }
  j["devices"] = devs;
  j["cpu"] = {{"hardware_threads", std::thread::hardware_concurrency()},
              {"torch_threads", at::get_num_threads()},
              {"torch_interop_threads", at::get_num_interop_threads()}};
  j["fast_paths"] = train::fast_paths(cfg);
  j["fast_paths"]["config"] = cfg.source_file.empty() ? "defaults" : cfg.source_file;
  if (!cfg.model.name.empty())  // which of the model's blocks the fused operators take
    for (const auto& z : models::zoo())
      if (z.name == cfg.model.name) {
        j["fast_paths"]["model"] = z.name;
        j["fast_paths"]["model_fuses"] = z.fuses;
      }
  if (!cfg.model.name.empty()) j["optimizer"] = optimizer_groups(cfg);
  // What the config gets here: its device, and whether the fused kernels would run there.
  try {
    const auto device = train::resolve_device(cfg.run);
    j["fast_paths"]["device"] = device.str();
    j["fast_paths"]["fused_conv_bn_relu_here"] = train::use_fused_kernels(cfg, device);
    const auto bn = train::batchnorm_path(cfg, device);
    j["fast_paths"]["batchnorm_path_here"] = {
        {"path", j["fast_paths"]["fused_conv_bn_relu_here"].get<bool>() ? kernels::name_of(bn.path) : "modules"},
        {"why", bn.why}};
    j["fast_paths"]["here"] = train::describe_fast_paths(cfg, device);
  } catch (const std::exception& e) {
    j["fast_paths"]["device"] = std::string("unavailable: ") + e.what();
    j["fast_paths"]["fused_conv_bn_relu_here"] = false;
    j["fast_paths"]["here"] = e.what();
  }
  return j;
}

void print_text(const nlohmann::json& j) {
  auto yn = [](bool b) { return b ? "yes" : "no"; };
  std::printf("dlrun      %s (git %s, %s, %s)\n", j["dlrun"]["version"].get<std::string>().c_str(),
              j["dlrun"]["git"].get<std::string>().c_str(), j["dlrun"]["build_type"].get<std::string>().c_str(),
              j["dlrun"]["compiler"].get<std::string>().c_str());
  std::printf("torch      %s\n", j["torch"]["version"].get<std::string>().c_str());
  std::printf("features   CUDA sources compiled: %s (nvcc %s); torch built with CUDA: %s; "
              "cloud notice HTTP (libcurl): %s\n",
              yn(j["features"]["cuda_sources_compiled"]), j["features"]["nvcc"].get<std::string>().c_str(),
              yn(j["features"]["torch_built_with_cuda"]), yn(j["features"]["cloud_notices_http"]));
  const auto archs = j["features"]["cuda_archs"].get<std::string>();
  std::printf("           GPU code for: %s\n", archs.empty() ? "none" : archs.c_str());
  std::printf("           MKLDNN: %s; OpenMP: %s; cuDNN usable: %s\n", yn(j["torch"]["mkldnn"]),
              yn(j["torch"]["openmp"]), yn(j["torch"]["cudnn_available"]));
  std::printf("cuda       available to torch: %s; driver %s; runtime %s\n", yn(j["torch"]["cuda_available"]),
              j["cuda"]["driver"].get<std::string>().empty() ? "none" : j["cuda"]["driver"].get<std::string>().c_str(),
              j["cuda"]["runtime"].get<std::string>().empty() ? "-" : j["cuda"]["runtime"].get<std::string>().c_str());
  if (j["devices"].empty()) std::printf("devices    cpu only (no CUDA device visible)\n");
  for (const auto& d : j["devices"])
    std::printf("device     cuda:%d %s, compute %s, %.1f GiB, %d SMs; fused kernels: %s\n", d["index"].get<int>(),
                d["name"].get<std::string>().c_str(), d["compute_capability"].get<std::string>().c_str(),
                d["memory_gib"].get<double>(), d["multiprocessors"].get<int>(),
                d["fused_kernels"].get<std::string>().c_str());
  std::printf("cpu        %u hardware threads; torch intra-op %d, inter-op %d\n",
              j["cpu"]["hardware_threads"].get<unsigned>(), j["cpu"]["torch_threads"].get<int>(),
              j["cpu"]["torch_interop_threads"].get<int>());
  const auto& f = j["fast_paths"];
  auto on = [&](const char* k) { return f[k].get<bool>() ? "on" : "off"; };
  std::printf("fast paths (%s): cudnn_benchmark %s, tf32 %s, cuda_graphs %s, fused_conv_bn_relu %s; "
              "amp %s, channels_last %s, activation_checkpointing %s\n",
              f["config"].get<std::string>().c_str(), on("cudnn_benchmark"), on("tf32"), on("cuda_graphs"),
              f["fused_conv_bn_relu"].get<std::string>().c_str(),
              f["amp"].get<std::string>().c_str(), on("channels_last"),
              f["activation_checkpointing"].get<std::string>().c_str());
  std::printf("           here: %s\n", f["here"].get<std::string>().c_str());
  if (f.contains("model_fuses"))
    std::printf("           fused conv+BN+ReLU in %s: %s\n", j["fast_paths"]["model"].get<std::string>().c_str(),
                f["model_fuses"].get<std::string>().c_str());
  if (!j.contains("optimizer")) return;
  const auto& o = j["optimizer"];
  if (o.contains("groups_error")) {
    std::printf("optimizer  %s: parameter groups unavailable: %s\n", o["name"].get<std::string>().c_str(),
                o["groups_error"].get<std::string>().c_str());
    return;
  }
  std::printf("optimizer  %s, %zu parameter groups (model at %lldx%lld):\n", o["name"].get<std::string>().c_str(),
              o["groups"].size(), static_cast<long long>(o["image_size"].get<int64_t>()),
              static_cast<long long>(o["image_size"].get<int64_t>()));
  for (const auto& g : o["groups"]) {
    const auto& names = g["params"];
    const std::string span = names.empty()   ? std::string("-")
                             : names.size() == 1 ? names[0].get<std::string>()
                                                 : names.front().get<std::string>() + " .. " + names.back().get<std::string>();
    std::printf("           %-18s lr x %-10.6g weight_decay %-8g %4zu tensors %12lld values  %s\n",
                g["name"].get<std::string>().c_str(), g["lr_scale"].get<double>(), g["weight_decay"].get<double>(),
                names.size(), static_cast<long long>(g["values"].get<int64_t>()), span.c_str());
  }
}

}  // namespace

void setup_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "versions, build features, devices and CPU threads");
  auto json = std::make_shared<bool>(false);
  auto config = std::make_shared<ConfigArgs>();
  cmd->add_flag("--json", *json, "print as JSON");
  cmd->add_option("config", config->path, "experiment YAML file whose fast paths to show (default: the defaults)");
  cmd->add_option("overrides", config->overrides, "dotted.key=value overrides");
  cmd->callback([json, config] {
    auto j = collect(config->path.empty() ? Config{} : load_validated(*config));
    if (*json) std::printf("%s\n", j.dump(2).c_str());
    else print_text(j);
  });
}

}  // namespace dlrun::cli
