// The live metrics endpoint (openmetrics.h).
#include "metrics/openmetrics.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <mutex>

#include "base/clock.h"
#include "base/log.h"

namespace dlrun::metrics {
namespace {

struct Gauge {
  const char* name;
  const char* help;
};

// The "train" record's scalars that become gauges, by their metrics.jsonl names.
const std::map<std::string, Gauge>& train_gauges() {
  static const std::map<std::string, Gauge> m = {
      {"loss", {"dlrun_loss", "training loss of the last logged step (mean over ranks)"}},
      {"lr", {"dlrun_learning_rate", "learning rate of the last logged step"}},
      {"samples_per_s", {"dlrun_samples_per_second", "training samples (all ranks) per second over the last log interval"}},
      {"data_wait_frac", {"dlrun_data_wait_fraction", "share of the last log interval the slowest rank waited for data"}},
      {"gpu_util_pct", {"dlrun_gpu_utilization_percent", "GPU utilisation (NVML)"}},
      {"gpu_mem_used_mb", {"dlrun_gpu_memory_used_megabytes", "GPU memory in use (NVML)"}},
  };
  return m;
}

}  // namespace

struct Endpoint::State {
  mutable std::mutex mu;
  bool logged = false;  // a train record has arrived
  int64_t step = 0;
  double epoch = 0;
  std::map<std::string, double> values;
  double started = 0;       // the "start" event: training time at risk counts from here
  double last_commit = 0;   // the last "checkpoint" event (a save, on local disk)
  double before_commit = 0; // the one before it, for a "checkpoint_error"
  double last_upload = 0;   // the last "upload" event
  // The last evaluation of each split ("eval", or "val" and "test" with a validation split):
  // its accuracy, top-5 and loss by their metrics.jsonl names.
  std::map<std::string, std::map<std::string, double>> evals;
  std::function<double(double)> cost;  // the run's cost at a wall time, or null
};

Endpoint::Endpoint(const EndpointOptions& o) : o_(o), s_(std::make_unique<State>()) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(o.port));
  if (::inet_pton(AF_INET, o.address.c_str(), &a.sin_addr) != 1)
    throw Error(ExitCode::kBadInput, o.where, "log.metrics_address",
                fmt::format("'{}' is not an IPv4 address", o.address), "127.0.0.1 (this machine only) or 0.0.0.0");
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);  // accept never blocks the thread
  DLRUN_CHECK(fd_ >= 0, ExitCode::kRuntime, "log.metrics_port: socket: {}", std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 64) != 0) {
    const int err = errno;
    ::close(fd_);
    throw Error(ExitCode::kBadInput, o.where, "log.metrics_port",
                fmt::format("cannot listen on {}:{}: {}", o.address, o.port, std::strerror(err)),
                "choose another port (log.metrics_port=N), or 0 for no endpoint");
  }
  ScrapeServerOptions so;
  so.max_clients = o.max_clients;
  so.client_timeout_s = o.client_timeout_s;
  try {  // the training thread only takes the mutex to copy numbers; scrapes are served there
    server_ = std::make_unique<ScrapeServer>(fd_, [this] { return body(wall_now()); }, so);
  } catch (...) {
    ::close(fd_);
    throw;
  }
  log::info("metrics endpoint: http://{}:{}/metrics", o.address, port());
}

Endpoint::~Endpoint() { close(); }

int Endpoint::port() const {
  sockaddr_in a{};
  socklen_t n = sizeof a;
  return ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &n) == 0 ? ntohs(a.sin_port) : o_.port;
}

void Endpoint::set_cost(std::function<double(double wall_time)> cost) {
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->cost = std::move(cost);
}

void Endpoint::write(const Event& e) {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (e.kind == "train") {
    s_->logged = true;
    s_->step = e.step;
    if (e.fields.contains("epoch") && e.fields["epoch"].is_number()) s_->epoch = e.fields["epoch"].get<double>();
    for (const auto& [k, v] : e.scalars)
      if (train_gauges().count(k)) s_->values[k] = v;
  } else if (e.kind == "start") {
    s_->started = e.time;
  } else if (e.kind == "checkpoint") {  // (an async write is reported when queued ...)
    s_->before_commit = s_->last_commit;
    s_->last_commit = e.time;
  } else if (e.kind == "checkpoint_error") {  // (... and one that then fails is taken back)
    s_->last_commit = s_->before_commit;
  } else if (e.kind == "upload") {
    s_->last_upload = e.time;
  } else if (e.kind == "eval" || e.kind == "val" || e.kind == "test") {
    for (const auto& [k, v] : e.scalars)
      if (k == "accuracy" || k == "top5" || k == "loss") s_->evals[e.kind][k] = v;
  }
}

void Endpoint::close() {
  if (!server_) return;
  server_->stop();
  server_.reset();
  ::close(fd_);
  fd_ = -1;
}

std::string Endpoint::body(double now) const {
  std::lock_guard<std::mutex> lock(s_->mu);
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v) {
    if (!std::isfinite(v)) return;
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n{0}{{rank=\"{2}\"}} {3}\n", name, help, o_.rank, v);
  };
  if (s_->logged) {
    gauge("dlrun_step", "optimizer steps done at the last logged step", static_cast<double>(s_->step));
    gauge("dlrun_epoch", "epoch of the last logged step", s_->epoch);
    for (const auto& [k, g] : train_gauges())
      if (auto it = s_->values.find(k); it != s_->values.end()) gauge(g.name, g.help, it->second);
  }
  // The evaluations, one series per split (label split="eval", "val" or "test").
  for (const auto& [key, name, help] :
       {std::tuple{"accuracy", "dlrun_eval_accuracy", "top-1 accuracy of the last evaluation of the split"},
        std::tuple{"top5", "dlrun_eval_top5_accuracy", "top-5 accuracy of the last evaluation of the split"},
        std::tuple{"loss", "dlrun_eval_loss", "loss of the last evaluation of the split"}}) {
    std::string lines;
    for (const auto& [split, values] : s_->evals)
      if (auto it = values.find(key); it != values.end() && std::isfinite(it->second))
        lines += fmt::format("{}{{rank=\"{}\",split=\"{}\"}} {}\n", name, o_.rank, split, it->second);
    if (!lines.empty()) out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n", name, help) + lines;
  }
  if (s_->last_commit > 0)
    gauge("dlrun_seconds_since_checkpoint", "seconds since this process last saved a checkpoint",
          now - s_->last_commit);
  if (s_->last_upload > 0)
    gauge("dlrun_seconds_since_upload", "seconds since this process last finished uploading a checkpoint",
          now - s_->last_upload);
  // Work at risk: training since the last checkpoint that survives losing the machine (an
  // uploaded one when checkpoint.remote is set), or since this process began training.
  const double safe = o_.remote ? s_->last_upload : s_->last_commit;
  if (s_->started > 0)
    gauge("dlrun_work_at_risk_seconds", "seconds of training that losing the machine now would cost",
          now - std::max(safe, s_->started));
  if (s_->cost)
    gauge("dlrun_cost", "what the run has cost so far (all its processes), in run.price_per_hour's currency",
          s_->cost(now));
  return out;
}

}  // namespace dlrun::metrics
