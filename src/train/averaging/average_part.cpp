// A weight average's checkpoint part (see average_part.h).
#include "train/averaging/average_part.h"

#include "checkpoint/tensor_file.h"

namespace dlrun::train {

AveragePart::AveragePart(WeightAverage& average, dist::Replicas& replicas, const torch::Device& device)
    : average_(average), replicas_(replicas), device_(device) {}

void AveragePart::gather() {
  if (average_.follows_buffers()) replicas_.sync_buffers(average_.model());
}

void AveragePart::save(ckpt::Snapshot& snap) {
  const std::string& name = average_.name();
  if (average_.has_tensors())
    snap.tensor_files[name] = ckpt::host_copy(models::state_dict(average_.model()), device_.is_cuda());
  snap.state[name] = average_.described_state();
}

void AveragePart::load(const ckpt::Snapshot& snap) {
  const std::string& name = average_.name();
  const nlohmann::json saved = snap.state.value(name, nlohmann::json());
  if (snap.tensor_files.count(name) == 0) {
    average_.not_in_checkpoint(saved, snap.step);
    return;
  }
  models::load_state_dict(average_.model(), ckpt::tensor_file(snap, name), "checkpoint " + name + ".pt");
  average_.load_state(saved.is_object() ? saved : nlohmann::json::object());
}

}  // namespace dlrun::train
