// Collectives of the trainer outside the gradient all-reduce (see collective.h).
#include "train/collective.h"

#include "train/resume.h"

namespace dlrun::train {

void share_checkpoint(dist::Group& group, std::optional<ckpt::Loaded>& from) {
  // Rank 0 describes its snapshot: everything but the tensors, and for those their names,
  // dtypes and shapes, so that the other ranks can allocate them before the broadcast.
  nlohmann::json meta = {{"has", false}};
  if (group.rank() == 0 && from) {
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
  meta = nlohmann::json::parse(group.share("resume", meta.dump()));
  if (!meta["has"].get<bool>()) return;
  if (group.rank() != 0) {
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
  group.broadcast(tensors);
}

std::vector<ckpt::TensorDict> gather_rng_states(dist::Group& group, const torch::Device& device) {
  const ckpt::TensorDict mine = rng_states(device);
  std::vector<torch::Tensor> parts;
  for (const auto& [name, t] : mine) parts.push_back(t.to(torch::kCPU).contiguous().view(-1));
  const auto all = group.all_gather(torch::cat(parts));  // (bytes) per rank: every rank has the same layout
  std::vector<ckpt::TensorDict> out;
  for (const auto& packed : all) {
    ckpt::TensorDict d;
    int64_t at = 0;
    for (const auto& [name, t] : mine) {
      d.emplace_back(name, packed.narrow(0, at, t.numel()).view(t.sizes()).clone());
      at += t.numel();
    }
    out.push_back(std::move(d));
  }
  return out;
}

void broadcast_module(dist::Group& group, torch::nn::Module& module, bool buffers_only) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> tensors;
  if (!buffers_only)
    for (auto& p : module.parameters()) tensors.push_back(p.data());
  for (auto& b : module.buffers()) tensors.push_back(b);
  group.broadcast(tensors);
}

}  // namespace dlrun::train
