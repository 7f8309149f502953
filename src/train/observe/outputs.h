// Where a training run's events go (docs/design.md, "Reporting: events and sinks"): on rank 0
// the run directory's sinks -- metrics.jsonl, TensorBoard's event file, the progress display --
// and, with log.metrics_port, the live endpoint for dashboards (metrics/openmetrics.h), which
// every rank may serve (log.metrics_every_rank). The endpoint listens from the start, before
// the data or the model is loaded, so that a port in use is refused (exit 2) before anything
// is touched; the sinks join the reporter when the run directory becomes the run's.
#pragma once

#include <functional>
#include <memory>

#include "config/options.h"
#include "metrics/openmetrics.h"
#include "metrics/sink.h"
#include "run/run_dir.h"
#include "train/step/device.h"

namespace dlrun::train {

/// This rank's live endpoint (log.metrics_port: rank 0's, or every rank's with
/// log.metrics_every_rank, each on the port plus its local rank), listening now; null without.
/// An address that is not IPv4, a port in use or past 65535: exit 2 at log.metrics_port.
std::unique_ptr<metrics::Endpoint> open_endpoint(const Config& cfg, const Placement& placement);

/// The leader's sinks into `report`: every kind of metrics::sink_kinds() the config asks for
/// (metrics.jsonl and TensorBoard in `dir`, the progress display over `total_steps` steps), then
/// `endpoint` (null: none) with the run's cost at a wall time (`cost`: RunAccount::live_cost(),
/// null without a price).
void add_run_sinks(metrics::Reporter& report, const Config& cfg, const RunDir& dir, int64_t total_steps,
                   std::unique_ptr<metrics::Endpoint> endpoint, std::function<double(double)> cost);

}  // namespace dlrun::train
