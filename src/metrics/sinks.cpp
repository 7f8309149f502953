// The Reporter and the three sinks of a run directory (see sink.h):
//   jsonl        every event as one line of metrics.jsonl ("event": kind, except training
//                steps, which have no "event" key), with its scalars and fields
//   tensorboard  every scalar as "<kind>/<name>" at the event's step
//   progress     training steps and ticks update the display; messages are printed
#include "metrics/sink.h"

#include <cmath>
#include <limits>

#include "base/clock.h"
#include "metrics/jsonl.h"
#include "metrics/progress.h"
#include "metrics/tensorboard.h"

namespace dlrun::metrics {

void Reporter::add(std::unique_ptr<Sink> sink) { sinks_.push_back(std::move(sink)); }

void Reporter::report(Event e) {
  if (e.time <= 0) e.time = wall_now();
  for (auto& s : sinks_) s->write(e);
}

void Reporter::tick(const Tick& t) {
  for (auto& s : sinks_) s->tick(t);
}

void Reporter::close() {
  for (auto& s : sinks_) s->close();
}

namespace {

double scalar(const Event& e, const char* name, double fallback) {
  for (const auto& [k, v] : e.scalars)
    if (k == name) return v;
  return fallback;
}

class JsonlSink : public Sink {
 public:
  explicit JsonlSink(const std::string& path) : w_(path) {}
  void write(const Event& e) override {
    nlohmann::json j = e.fields;
    if (e.kind != "train") j["event"] = e.kind;
    j["step"] = e.step;
    for (const auto& [k, v] : e.scalars) j[k] = v;
    j["time"] = e.time;
    w_.write(j);
  }

 private:
  JsonlWriter w_;
};

class TensorBoardSink : public Sink {
 public:
  explicit TensorBoardSink(const std::string& dir) : w_(dir) {}
  void write(const Event& e) override {
    if (e.scalars.empty()) return;
    for (const auto& [k, v] : e.scalars) w_.add_scalar(e.kind + "/" + k, v, e.step, e.time);
    w_.flush();
  }

 private:
  TensorBoardWriter w_;
};

class ProgressSink : public Sink {
 public:
  ProgressSink(const LogOptions& o, int64_t total, std::FILE* out) : p_(o.progress, total, o.every_steps, out) {}
  void write(const Event& e) override {
    if (e.kind == "train") {
      loss_ = scalar(e, "loss", loss_);
      p_.update(e.step, e.fields.value("epoch", int64_t{0}), loss_, scalar(e, "samples_per_s", 0),
                scalar(e, "lr", 0));
    }
    if (!e.message.empty()) p_.message(e.message);
  }
  void tick(const Tick& t) override {
    if (p_.is_bar()) p_.update(t.step, t.epoch, loss_, t.samples_per_s, t.lr);
  }
  void close() override { p_.finish(); }

 private:
  Progress p_;
  double loss_ = std::numeric_limits<double>::quiet_NaN();  ///< last loss read from the device
};

}  // namespace

std::unique_ptr<Sink> jsonl_sink(const std::string& path) { return std::make_unique<JsonlSink>(path); }
std::unique_ptr<Sink> tensorboard_sink(const std::string& dir) { return std::make_unique<TensorBoardSink>(dir); }
std::unique_ptr<Sink> progress_sink(const LogOptions& opts, int64_t total_steps, std::FILE* out) {
  return std::make_unique<ProgressSink>(opts, total_steps, out);
}

const std::vector<SinkKind>& sink_kinds() {
  static const std::vector<SinkKind> kinds = {
      {"jsonl", [](const SinkContext& c) { return jsonl_sink(c.metrics_jsonl); }},
      {"tensorboard", [](const SinkContext& c) { return c.log.tensorboard ? tensorboard_sink(c.run_dir) : nullptr; }},
      {"progress", [](const SinkContext& c) { return progress_sink(c.log, c.total_steps); }},
  };
  return kinds;
}

}  // namespace dlrun::metrics
