// The replicas of a run: a process group, or a world of one answering locally (see replicas.h).
#include "distributed/replicas.h"

#include <fmt/ranges.h>

#include <algorithm>

#include "base/error.h"
#include "base/log.h"
#include "distributed/group.h"
#include "distributed/sync_bn.h"
#include "models/batchnorm.h"

namespace dlrun::dist {
namespace {

/// Rank 0's parameters and buffers (`buffers_only`: its buffers) on every rank.
void broadcast_module(Group& group, torch::nn::Module& module, bool buffers_only = false) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> tensors;
  if (!buffers_only)
    for (auto& p : module.parameters()) tensors.push_back(p.data());
  for (auto& b : module.buffers()) tensors.push_back(b);
  group.broadcast(tensors);
}

}  // namespace

Replicas::Replicas(Group* group, const Config& cfg, const torch::Device& device)
    : group_(group), cfg_(cfg), device_(device) {}

Replicas::~Replicas() = default;

int Replicas::rank() const { return group_ ? group_->rank() : 0; }
int Replicas::size() const { return group_ ? group_->size() : 1; }

bool Replicas::any(bool flag) { return group_ ? group_->any(flag) : flag; }

void Replicas::all_reduce(torch::Tensor& t) {
  if (group_) group_->all_reduce(t);
}

std::vector<torch::Tensor> Replicas::all_gather(const torch::Tensor& t) {
  return group_ ? group_->all_gather(t) : std::vector<torch::Tensor>{t};
}

std::vector<std::string> Replicas::gather_text(const std::string& text) {
  if (!group_) return {text};
  const auto lengths = group_->all_gather(torch::full({1}, static_cast<int64_t>(text.size()), torch::kLong));
  int64_t most = 1;
  for (const auto& l : lengths) most = std::max(most, l.item<int64_t>());
  torch::Tensor bytes = torch::zeros({most}, torch::kUInt8);
  std::copy(text.begin(), text.end(), reinterpret_cast<char*>(bytes.data_ptr<uint8_t>()));
  const auto all = group_->all_gather(bytes);
  std::vector<std::string> out;
  for (size_t r = 0; r < all.size(); ++r) {
    const torch::Tensor b = all[r].to(torch::kCPU).contiguous();
    out.emplace_back(reinterpret_cast<const char*>(b.data_ptr<uint8_t>()), static_cast<size_t>(lengths[r].item<int64_t>()));
  }
  return out;
}

void Replicas::agree_committed(int64_t step, const std::string& failure) {
  if (!group_ || (!leader() && !failure.empty())) return;
  const std::string key = fmt::format("commit/{}", step);
  const std::string outcome = group_->share_when_ready(key, failure.empty() ? "committed" : "failed: " + failure);
  if (leader()) return;
  group_->acknowledge(key);
  if (outcome != "committed")
    throw Error(ExitCode::kRuntime,
                fmt::format("rank 0 did not commit the checkpoint of step {}, so this rank exits 1 with it, not 75 "
                            "(there is nothing new to resume from): {}",
                            step, outcome.substr(0, 1000)));
}

void Replicas::commit_together(int64_t step, const std::function<void()>& commit) {
  try {
    commit();
  } catch (const std::exception& e) {
    try {
      agree_committed(step, e.what());
      outcome_read(step);
    } catch (...) {  // the original error is the one to report
    }
    throw;
  }
  agree_committed(step, "");
}

void Replicas::outcome_read(int64_t step) {
  if (!group_ || !leader()) return;
  const auto missing =
      group_->await_acknowledged(fmt::format("commit/{}", step), std::min(30.0, cfg_.dist.timeout_s));
  if (!missing.empty())
    log::warn("rank(s) {} did not read that the checkpoint of step {} is committed; they exit 1 when the store is gone",
              fmt::join(missing, ", "), step);
}

void Replicas::share_checkpoint(std::optional<ckpt::Loaded>& from) {
  if (!group_) return;
  // Rank 0 describes its snapshot: everything but the tensors, and for those their names,
  // dtypes and shapes, so that the other ranks can allocate them before the broadcast.
  nlohmann::json meta = {{"has", false}};
  if (group_->rank() == 0 && from) {
    const auto& s = from->snapshot;
    nlohmann::json files = nlohmann::json::object();
    for (const auto& [stem, dict] : s.tensor_files) {
      auto& list = files[stem] = nlohmann::json::array();
      for (const auto& [name, t] : dict)
        list.push_back({name, static_cast<int>(t.scalar_type()), t.sizes().vec()});
    }
    meta = {{"has", true},          {"path", from->path},   {"step", s.step},
            {"epoch", s.epoch},     {"state", s.state},     {"config_yaml", s.config_yaml},
            {"config_hash", s.config_hash}, {"world_size", s.world_size}, {"files", files}};
  }
  meta = nlohmann::json::parse(group_->share("resume", meta.dump()));
  if (!meta["has"].get<bool>()) return;
  if (group_->rank() != 0) {
    ckpt::Snapshot s;
    s.step = meta["step"];
    s.epoch = meta["epoch"];
    s.state = meta["state"];
    s.config_yaml = meta["config_yaml"];
    s.config_hash = meta["config_hash"];
    s.world_size = meta["world_size"];
    for (const auto& [stem, list] : meta["files"].items()) {
      auto& dict = s.tensor_files[stem];
      for (const auto& e : list)
        dict.emplace_back(e[0].get<std::string>(),
                          torch::empty(e[2].get<std::vector<int64_t>>(),
                                       torch::TensorOptions().dtype(static_cast<torch::ScalarType>(e[1].get<int>()))));
    }
    from = ckpt::Loaded{meta["path"].get<std::string>(), std::move(s)};
  }
  std::vector<torch::Tensor> tensors;  // the same order on every rank: stems sorted, names as listed
  for (auto& [stem, dict] : from->snapshot.tensor_files)
    for (auto& [name, t] : dict) tensors.push_back(t);
  group_->broadcast(tensors);
}

void Replicas::sync_buffers(torch::nn::Module& model) {
  if (group_ && !cfg_.dist.sync_bn) broadcast_module(*group_, model, /*buffers_only=*/true);
}

void Replicas::sync_batchnorm(models::Model& model) {
  if (!group_ || !cfg_.dist.sync_bn) return;
  const int layers = models::set_batchnorm_sync(model, dist::sync_batchnorm(*group_));
  if (layers == 0) log0::warn("dist.sync_bn: model {} has no BatchNorm layer; nothing to synchronise", cfg_.model.name);
}

// Without synchronised BatchNorm each rank's running statistics drift apart during a step;
// rank 0's are broadcast before every step, evaluation and save, as DDP's broadcast_buffers
// does before every forward.
StepReplication Replicas::replicate(models::Model& model) {
  if (!group_) return {};
  broadcast_module(*group_, model);
  std::vector<torch::Tensor> params;
  for (auto& p : model.parameters())
    if (p.requires_grad()) params.push_back(p);
  grad_sync_ = std::make_unique<GradSync>(*group_, params, cfg_.dist.bucket_mb);
  model_ = &model;
  const bool buffers = !cfg_.dist.sync_bn && !model.buffers().empty();
  // With the watch on a lost peer, the buffers as each step finds them are kept (a few KB for a
  // ResNet): a step the loss ends is saved as it began (buffers_at_boundary).
  const bool keep = cfg_.dist.peer_timeout_s > 0 && !model.buffers().empty();
  std::function<void()> before_step;
  if (buffers || keep)
    before_step = [this, &model, buffers, keep] {
      copied_ = false;
      if (buffers) broadcast_module(*group_, model, /*buffers_only=*/true);
      if (!keep) return;
      torch::NoGradGuard no_grad;
      const auto now = model.buffers();
      if (step_start_.size() != now.size()) {
        step_start_.clear();
        for (const auto& b : now) step_start_.push_back(b.detach().clone());
      } else {
        for (size_t i = 0; i < now.size(); ++i) step_start_[i].copy_(now[i]);
      }
      copied_ = true;
    };
  log0::info("gradients averaged across {} ranks in {} bucket(s) (dist.bucket_mb={}){}; rank {} trains on {} with "
             "micro-batches of {}",
             group_->size(), grad_sync_->buckets(), cfg_.dist.bucket_mb,
             cfg_.dist.sync_bn ? "; BatchNorm synchronised (dist.sync_bn)"
                               : buffers ? "; BatchNorm buffers from rank 0 before each step" : "",
             group_->rank(), device_.str(), cfg_.data.batch_size / (group_->size() * cfg_.train.grad_accum));
  return {grad_sync_.get(), std::move(before_step)};
}

bool Replicas::buffers_at_boundary(bool mid_step) {
  if (!model_ || model_->buffers().empty()) return true;
  const bool same_everywhere = leader() || cfg_.dist.sync_bn;
  if (!mid_step) return same_everywhere;  // after the step: this rank's own statistics of it
  if (!copied_) return same_everywhere;   // the broadcast itself failed: the forward has not run
  torch::NoGradGuard no_grad;
  const auto now = model_->buffers();
  for (size_t i = 0; i < now.size() && i < step_start_.size(); ++i) now[i].copy_(step_start_[i]);
  return true;
}

}  // namespace dlrun::dist
