// The live metrics endpoint for dashboards (log.metrics_port): a sink that keeps the latest
// value of each metric from the events the run reports (sink.h), and a small HTTP server that
// answers GET /metrics in Prometheus' text exposition format (version 0.0.4, which Prometheus,
// VictoriaMetrics, Grafana Agent and the OpenTelemetry collector scrape). The values are those
// of the last metrics.jsonl "train" line, so a scrape and the file agree for the same step; the
// "seconds since" gauges and the cost are computed when scraped. docs/training.md "Live metrics".
// The HTTP side, many scrapers at once with none waiting for another, is scrape_server.h.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/error.h"
#include "metrics/scrape_server.h"
#include "metrics/sink.h"

namespace dlrun::metrics {

struct EndpointOptions {
  std::string address = "127.0.0.1";
  int port = 0;
  int rank = 0;         ///< the label every sample carries
  bool remote = false;  ///< checkpoint.remote is set: work is safe once uploaded, not once on local disk
  SourceLoc where;      ///< of log.metrics_port, for the error when the port is taken
  size_t max_clients = 64;        ///< scrapers served at once (scrape_server.h)
  double client_timeout_s = 2.0;  ///< a scraper's whole exchange; past it, it is dropped
};

class Endpoint final : public Sink {
 public:
  /// Listens now: an address that is not IPv4 or a port in use is dlrun::Error (exit 2) at
  /// log.metrics_port, before the run directory is touched. Serves until close().
  explicit Endpoint(const EndpointOptions& opts);
  ~Endpoint() override;
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  /// The cost gauge: `cost` gives what the run has cost at a wall time (the run's account,
  /// train/observe/goodput.h, computes it; called from the serving thread, so it must be safe
  /// there). Without a call (or a null `cost`) there is no cost gauge.
  void set_cost(std::function<double(double wall_time)> cost);

  void write(const Event& e) override;
  void close() override;

  /// The port it listens on (the one the system chose when asked for port 0).
  int port() const;

  /// The exposition text a scrape gets now.
  std::string body(double now) const;

 private:
  struct State;

  EndpointOptions o_;
  int fd_ = -1;
  std::unique_ptr<State> s_;
  std::unique_ptr<ScrapeServer> server_;  ///< after s_: stopped before the state it reads goes
};

}  // namespace dlrun::metrics
