// Where a training run's events go (see outputs.h).
#include "train/observe/outputs.h"

#include <utility>

#include "base/error.h"

namespace dlrun::train {

std::unique_ptr<metrics::Endpoint> open_endpoint(const Config& c, const Placement& placement) {
  if (c.log.metrics_port <= 0 || !(placement.rank == 0 || c.log.metrics_every_rank)) return nullptr;
  metrics::EndpointOptions e;
  e.address = c.log.metrics_address;
  e.port = static_cast<int>(c.log.metrics_port) + (c.log.metrics_every_rank ? placement.local_rank : 0);
  e.rank = placement.rank;
  e.remote = !c.checkpoint.remote.empty();
  e.where = c.where("log.metrics_port");
  DLRUN_CHECK_INPUT(e.port <= 65535, "log.metrics_port {} + local rank {} is past port 65535", c.log.metrics_port,
                    placement.local_rank);
  return std::make_unique<metrics::Endpoint>(e);
}

void add_run_sinks(metrics::Reporter& report, const Config& cfg, const RunDir& dir, int64_t total_steps,
                   std::unique_ptr<metrics::Endpoint> endpoint, std::function<double(double)> cost) {
  const metrics::SinkContext context{cfg.log, dir.path(), dir.metrics_jsonl(), total_steps};
  for (const metrics::SinkKind& kind : metrics::sink_kinds())
    if (auto sink = kind.make(context)) report.add(std::move(sink));
  if (endpoint) {
    endpoint->set_cost(std::move(cost));
    report.add(std::move(endpoint));
  }
}

}  // namespace dlrun::train
