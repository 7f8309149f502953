// The bad samples of training (see bad_samples.h).
#include "train/observe/bad_samples.h"

#include <algorithm>
#include <cstdlib>

#include "base/error.h"
#include "base/log.h"
#include "distributed/replicas.h"

namespace dlrun::train {

BadSampleTally::BadSampleTally(const DataOptions& opts, TrainState& st, metrics::Reporter& report)
    : opts_(opts), st_(st), report_(report) {}

void BadSampleTally::merge(dist::Replicas& replicas, int64_t step) {
  nlohmann::json mine = nlohmann::json::array();
  for (const auto& b : pending_) mine.push_back({b.index, b.error});
  pending_.clear();
  nlohmann::json& state = st_.bad_samples;
  if (!state.is_object()) state = nlohmann::json::object();
  nlohmann::json& samples = state["samples"];
  if (!samples.is_object()) samples = nlohmann::json::object();
  int64_t reads = state.value("reads", int64_t{0});
  // Rank by rank, in the order each consumed them: the same state on every rank.
  for (const std::string& text : replicas.gather_text(mine.dump())) {
    for (const auto& rec : nlohmann::json::parse(text)) {
      const int64_t index = rec.at(0).get<int64_t>();
      const std::string error = rec.at(1).get<std::string>();
      ++reads;
      nlohmann::json& s = samples[std::to_string(index)];
      if (!s.is_null()) {
        s["reads"] = s.value("reads", int64_t{0}) + 1;
        continue;
      }
      s = {{"error", error}, {"reads", 1}, {"first_step", step}};
      const int64_t distinct = static_cast<int64_t>(samples.size());
      DLRUN_CHECK_INPUT(distinct <= opts_.max_bad_samples,
                        "{} distinct training samples did not decode, more than data.max_bad_samples ({}); the "
                        "latest, at step {}: {}. The data is damaged beyond a few files: `dlrun data verify` lists "
                        "them",
                        distinct, opts_.max_bad_samples, step, error);
      if (replicas.leader()) {
        log::warn("training sample {} is replaced by the next one that decodes (data.on_bad_sample: skip; {} of at "
                  "most {}): {}",
                  index, distinct, opts_.max_bad_samples, error);
        metrics::Event e{"bad_sample", step};
        e.fields = {{"index", index}, {"error", error}, {"distinct", distinct}};
        report_.report(std::move(e));
      }
    }
  }
  state["reads"] = reads;
}

nlohmann::json bad_samples_json(const DataOptions& opts, const TrainState& st) {
  nlohmann::json out = {{"policy", opts.on_bad_sample == BadSamplePolicy::kSkip ? "skip" : "error"},
                        {"reads_replaced", 0},
                        {"distinct", 0},
                        {"samples", nlohmann::json::array()}};
  if (!st.bad_samples.is_object()) return out;
  out["reads_replaced"] = st.bad_samples.value("reads", int64_t{0});
  const auto it = st.bad_samples.find("samples");
  if (it == st.bad_samples.end() || !it->is_object()) return out;
  std::vector<std::pair<int64_t, nlohmann::json>> rows;
  for (const auto& [key, value] : it->items()) {
    char* end = nullptr;
    const long long index = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0') continue;  // (not a key dlrun writes)
    nlohmann::json row = value;
    row["index"] = index;
    rows.emplace_back(index, std::move(row));
  }
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  out["distinct"] = rows.size();
  for (auto& r : rows) out["samples"].push_back(std::move(r.second));
  return out;
}

}  // namespace dlrun::train
