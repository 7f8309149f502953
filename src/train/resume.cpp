// Snapshots of a live run and the way back from them (see resume.h).
#include "train/resume.h"

#include <fmt/ranges.h>

#include "base/build_info.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/sha256.h"
#include "checkpoint/tensor_file.h"
#include "config/diff.h"
#include "config/loader.h"
#include "config/tree.h"
#include "train/optim.h"

namespace dlrun::train {

std::string rng_file(int rank) { return fmt::format("rng-rank{:05d}", rank); }

ckpt::TensorDict rng_states(const torch::Device& device) {
  ckpt::TensorDict out;
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    out.emplace_back("cpu", gen.get_state());
  }
  if (device.is_cuda()) {
    auto gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    out.emplace_back("cuda", gen.get_state());
  }
  return out;
}

namespace {

void set_rng_states(const ckpt::TensorDict& states, const torch::Device& device) {
  for (const auto& [name, t] : states) {
    if (name == "cpu") {
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(t);
    } else if (name == "cuda" && device.is_cuda()) {
      auto gen = at::globalContext().defaultGenerator(device);
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(t);
    }
  }
}

const ckpt::TensorDict& file(const ckpt::Snapshot& s, const std::string& stem) {
  auto it = s.tensor_files.find(stem);
  if (it == s.tensor_files.end()) throw Error(ExitCode::kBadInput, "checkpoint has no " + stem + ".pt");
  return it->second;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  size_t p = 0;
  while (p < s.size()) {
    const size_t q = s.find(sep, p);
    v.push_back(s.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return v;
}

void refuse_incompatible(const nlohmann::json& j, const Config& cfg, models::Model& model) {
  const std::string saved_arch = j.value("architecture", std::string());
  const std::string arch = models::architecture_signature(model);
  if (saved_arch != arch) {
    const auto a = split(saved_arch, ';'), b = split(arch, ';');
    std::string diff;
    for (size_t i = 0; i < std::max(a.size(), b.size()) && diff.empty(); ++i) {
      const std::string x = i < a.size() ? a[i] : "(none)", y = i < b.size() ? b[i] : "(none)";
      if (x != y) diff = fmt::format("checkpoint has {}, the config's model has {}", x, y);
    }
    throw Error(ExitCode::kBadInput,
                fmt::format("cannot resume: the checkpoint was written for a different model architecture "
                            "(checkpoint model.name={}, config model.name={}; {})",
                            j.value("model", std::string("?")), cfg.model.name, diff),
                "start a new run (--run-dir, or --resume never --force) or restore the original model settings");
  }
  const std::string saved_opt = j.value("optimizer", std::string("?"));
  if (saved_opt != name_of(cfg.optim.name))
    throw Error(ExitCode::kBadInput,
                fmt::format("cannot resume: the checkpoint used optim.name={}, the config has optim.name={}", saved_opt,
                            name_of(cfg.optim.name)),
                "optimizer state cannot be carried across optimizer types; start a new run");
}

void warn_changes(const ckpt::Snapshot& snap, const Config& cfg, int64_t total_steps, int world_size) {
  const auto& j = snap.state;
  if (j.value("total_steps", total_steps) != total_steps)
    log0::warn("resuming with a different schedule length: {} total steps, the checkpoint planned {}", total_steps,
               j.value("total_steps", int64_t{0}));
  const int64_t saved_batch = j.value("global_batch_size", cfg.data.batch_size);
  if (saved_batch != cfg.data.batch_size)
    log0::warn("resuming with global batch size {} (checkpoint: {}): results will differ from an uninterrupted run",
               cfg.data.batch_size, saved_batch);
  if (j.value("world_size", 1) != world_size)
    log0::warn("resuming on world size {} from world size {}: the sampler re-shards the rest of the epoch from the "
               "global sample cursor (no sample is repeated or skipped), but dropout draws and the order of "
               "floating-point sums differ from an uninterrupted run",
               world_size, j.value("world_size", 1));

  const std::string yaml = config::to_yaml(cfg, false);
  if (snap.config_yaml.empty() || sha256_hex(yaml.data(), yaml.size()) == snap.config_hash) return;
  std::vector<config::Change> changed;
  try {
    // A checkpoint's config.yaml is the resolved config and never names a base file; one that
    // does was not written by dlrun, and is not followed (it could name any file here).
    if (config::parse_yaml(snap.config_yaml, "the checkpoint's config.yaml")->get("base"))
      throw Error(ExitCode::kBadInput, "it names a base: file, which a resolved config never does");
    changed = config::changes(config::load_text(snap.config_yaml, "the checkpoint's config.yaml"), cfg);
  } catch (const Error& e) {
    log0::warn("resuming with a changed config; the checkpoint's config cannot be compared: {}", e.render());
    return;
  }
  std::vector<std::string> lines, exactness;
  for (const auto& c : changed) {
    lines.push_back(fmt::format("{}: {} -> {}{}", c.key, c.before, c.after,
                                config::is_bookkeeping(c.key) ? " (does not change results)" : ""));
    if (config::breaks_exact_resume(c.key)) exactness.push_back(c.key);
  }
  if (lines.empty()) return;
  log0::warn("resuming with a config that differs from the checkpoint's in {} key(s):\n  {}", lines.size(),
             fmt::join(lines, "\n  "));
  if (!exactness.empty())
    log0::warn("{} changed: data order, augmentation and dropout now differ from the interrupted run, so the resumed "
               "run is not an exact continuation of it",
               fmt::join(exactness, ", "));
}

}  // namespace

ckpt::Snapshot make_snapshot(const Config& cfg, models::Model& model, torch::optim::Optimizer& optim,
                             const GradScaler& scaler, const TrainState& st, int64_t total_steps,
                             const torch::Device& device, const std::vector<ckpt::TensorDict>* rank_rngs) {
  const bool pinned = device.is_cuda();
  const int world_size = rank_rngs ? static_cast<int>(rank_rngs->size()) : 1;
  ckpt::Snapshot s;
  s.step = st.step;
  s.epoch = st.epoch;
  s.tensor_files["model"] = ckpt::host_copy(models::state_dict(model), pinned);
  s.tensor_files["optim"] = ckpt::host_copy(optimizer_state(cfg.optim, optim, model), pinned);
  if (rank_rngs) {
    for (int r = 0; r < world_size; ++r) s.tensor_files[rng_file(r)] = ckpt::host_copy((*rank_rngs)[r]);
  } else {
    s.tensor_files[rng_file(0)] = ckpt::host_copy(rng_states(device));
  }
  s.config_yaml = config::to_yaml(cfg, false);
  s.config_hash = sha256_hex(s.config_yaml.data(), s.config_yaml.size());
  s.world_size = world_size;
  s.state = {
      {"step", st.step},
      {"epoch", st.epoch},
      {"cursor", st.cursor},
      {"total_steps", total_steps},
      {"global_batch_size", cfg.data.batch_size},
      {"grad_accum", cfg.train.grad_accum},
      {"world_size", world_size},
      {"seed", cfg.run.seed},
      {"model", cfg.model.name},
      {"architecture", models::architecture_signature(model)},
      {"optimizer", name_of(cfg.optim.name)},
      {"schedule", {{"name", name_of(cfg.sched.name)}, {"total_steps", total_steps}, {"base_lr", cfg.optim.lr}}},
      {"grad_scaler", scaler.state()},
      {"augmentation_seed_scheme", "splitmix64(seed, epoch, sample index)"},
      {"skipped_steps", st.skipped_steps},
      {"eval_pending", st.eval_pending},
      {"steps_lost_total", st.steps_lost_total},
      {"config_hash", s.config_hash},
      {"versions", build::version_line()},
      {"time", wall_now()},
  };
  return s;
}

namespace {

void skip_report(const std::string& path, const std::string& why) { log0::warn("skipping checkpoint {}: {}", path, why); }

/// The newest remote checkpoint newer than `local_step` that downloads and verifies.
void newest_remote(ckpt::RemoteStore& remote, int64_t local_step, ResumePlan& plan) {
  std::vector<ckpt::RemoteEntry> entries;
  try {
    entries = remote.list();
  } catch (const remote::S3Error& e) {
    log0::warn("cannot list the remote checkpoints ({}); resuming from the local ones", e.what());
    return;
  }
  for (auto it = entries.rbegin(); it != entries.rend() && it->step > local_step; ++it) {
    const std::string where = remote.url().str(it->name);
    if (!it->complete) {
      skip_report(where, "incomplete: no manifest.json (an upload cut short); ignored");
      continue;
    }
    try {
      log0::info("downloading {} (newer than any local checkpoint)", where);
      ckpt::FileSet set = remote.fetch(it->name);
      ckpt::Snapshot snap = ckpt::parse(set, where);
      plan.from = ckpt::Loaded{where, std::move(snap)};
      plan.fetched = std::move(set);
      return;
    } catch (const ckpt::NewerFormatError&) {
      throw;  // not damage: skipping it would continue from an older step beside it
    } catch (const Error& e) {
      if (e.code() != ExitCode::kBadInput) throw;
      skip_report(where, e.message());
    } catch (const remote::S3Error& e) {
      log0::warn("cannot download {} ({}); resuming from the local checkpoints", where, e.what());
      return;
    } catch (const std::exception& e) {  // a manifest or state.json that parses but does not fit
      skip_report(where, e.what());
    }
  }
}

}  // namespace

ResumePlan plan_resume(const std::string& resume, bool force, const RunDir& dir, ckpt::RemoteStore* remote) {
  ResumePlan plan;
  if (resume == "never") {
    const auto previous = dir.previous_run_files();
    if (!previous.empty()) {
      DLRUN_CHECK_INPUT(force,
                        "{} already holds a run ({}); use --resume auto to continue it, another --run-dir, or --force "
                        "to set it aside and start fresh",
                        dir.path(), fmt::join(previous, ", "));
      plan.set_aside = true;
    }
    if (remote) {
      std::vector<ckpt::RemoteEntry> entries;
      try {
        entries = remote->list();
      } catch (const remote::S3Error& e) {
        fail_runtime("--resume never: cannot check that {} holds no earlier run: {}", remote->url().str(), e.what());
      }
      DLRUN_CHECK_INPUT(entries.empty(),
                        "--resume never: {} holds {} checkpoint(s) of an earlier run, which a fresh start would mix "
                        "with its own (and --force does not set remote checkpoints aside); use another "
                        "checkpoint.remote prefix, or --resume auto to continue that run",
                        remote->url().str(), entries.size());
    }
  } else if (resume == "auto") {
    plan.from = ckpt::load_newest(dir.checkpoints(), skip_report);
    if (remote) newest_remote(*remote, plan.from ? plan.from->snapshot.step : -1, plan);
  } else if (remote::is_s3_url(resume)) {
    DLRUN_CHECK_INPUT(remote != nullptr, "--resume {}: an s3:// checkpoint needs checkpoint.remote (for the "
                                         "endpoint, region and credentials)", resume);
    const auto url = remote::parse_s3_url(resume, "--resume");
    const auto slash = url.prefix.rfind('/');
    const std::string name = slash == std::string::npos ? url.prefix : url.prefix.substr(slash + 1);
    remote::S3Url parent{url.bucket, slash == std::string::npos ? "" : url.prefix.substr(0, slash)};
    ckpt::RemoteStore store(remote->config(), parent);
    ckpt::FileSet set = store.fetch(name);
    plan.from = ckpt::Loaded{resume, ckpt::parse(set, resume)};
    plan.fetched = std::move(set);
  } else {
    plan.from = ckpt::Loaded{resume, ckpt::load(resume)};
  }
  return plan;
}

namespace {

void restore_checked(const ckpt::Snapshot& snap, const Config& cfg, models::Model& model,
                     torch::optim::Optimizer& optim, GradScaler& scaler, TrainState& st, int64_t total_steps,
                     const torch::Device& device, int rank, int world_size) {
  const auto& j = snap.state;
  refuse_incompatible(j, cfg, model);
  warn_changes(snap, cfg, total_steps, world_size);

  models::load_state_dict(model, file(snap, "model"), "checkpoint model.pt");
  load_optimizer_state(cfg.optim, optim, model, file(snap, "optim"));
  scaler.load_state(j.value("grad_scaler", nlohmann::json()));
  auto rng = snap.tensor_files.find(rng_file(rank));
  if (rng != snap.tensor_files.end())
    set_rng_states(rng->second, device);
  else
    log::warn("the checkpoint has no RNG state for rank {} (it was written by {} rank(s)); this rank's generator "
              "keeps its seed",
              rank, j.value("world_size", 1));

  st.step = j.at("step").get<int64_t>();
  st.epoch = j.at("epoch").get<int64_t>();
  st.cursor = j.at("cursor").get<int64_t>();
  if (st.cursor % cfg.data.batch_size != 0) {
    const int64_t rounded = st.cursor / cfg.data.batch_size * cfg.data.batch_size;
    log0::warn("sample cursor {} is not a multiple of the new batch size; continuing at {}", st.cursor, rounded);
    st.cursor = rounded;
  }
  st.skipped_steps = j.value("skipped_steps", int64_t{0});
  st.eval_pending = j.value("eval_pending", false);
  st.steps_lost_total = j.value("steps_lost_total", int64_t{0});
  st.resumed_from_step = st.step;
}

}  // namespace

void restore(const ckpt::Snapshot& snap, const Config& cfg, models::Model& model, torch::optim::Optimizer& optim,
             GradScaler& scaler, TrainState& st, int64_t total_steps, const torch::Device& device, int rank,
             int world_size) {
  // A checkpoint whose files hash correctly can still hold values of the wrong kind (written
  // by hand, or by another program): that is bad input, never a crash or exit 1.
  try {
    restore_checked(snap, cfg, model, optim, scaler, st, total_steps, device, rank, world_size);
  } catch (const nlohmann::json::exception& e) {
    fail_input("checkpoint state.json: a value has the wrong type or is missing: {}", e.what());
  } catch (const c10::Error& e) {
    fail_input("checkpoint tensors do not fit this run: {}", e.what_without_backtrace());
  }
}

void save_weights(const torch::nn::Module& model, const std::string& path) {
  ckpt::TensorDict d;
  for (const auto& [n, t] : models::state_dict(model)) d.emplace_back(n, t.detach().to(torch::kCPU).contiguous());
  ckpt::write_tensor_file(path, d);
}

}  // namespace dlrun::train
