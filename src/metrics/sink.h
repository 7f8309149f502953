// Reporting: each thing that happens in a run is reported once, as an Event, to a Reporter
// that hands it to every sink; the sinks decide how it is written. metrics.jsonl, TensorBoard
// and the terminal progress display are sinks (sinks.cpp). A multi-process run will add a
// rank-0 filter in front of them instead of writing the same line from every rank.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/options.h"

namespace dlrun::metrics {

/// One thing that happened, with everything any sink may need.
struct Event {
  /// "train" (a logged optimizer step), "eval", "checkpoint", "preempt", "skip", "start",
  /// "end", ... metrics.jsonl writes it as "event" (train records have no "event" key).
  std::string kind;
  int64_t step = 0;
  double time = 0;  ///< wall clock; 0: the Reporter fills in now
  /// Numbers worth plotting: TensorBoard gets each as the scalar "<kind>/<name>".
  std::vector<std::pair<std::string, double>> scalars;
  /// Everything else (epoch, paths, reasons, flags), recorded in metrics.jsonl.
  nlohmann::json fields = nlohmann::json::object();
  /// A line for a person watching (the progress display prints it); "" for none.
  std::string message;
};

/// Live state for displays, every step; not recorded anywhere.
struct Tick {
  int64_t step = 0;
  int64_t epoch = 0;
  double samples_per_s = 0;
  double lr = 0;
};

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void write(const Event& e) = 0;
  virtual void tick(const Tick&) {}
  /// The run is over: finish lines, flush files.
  virtual void close() {}
};

/// Fans events out to its sinks. A sink that throws (a full disk) propagates the error.
class Reporter {
 public:
  void add(std::unique_ptr<Sink> sink);
  void report(Event e);
  void tick(const Tick& t);
  void close();

 private:
  std::vector<std::unique_ptr<Sink>> sinks_;
};

/// What a sink of the run directory may need to be made.
struct SinkContext {
  const LogOptions& log;
  std::string run_dir;       ///< RUN_DIR
  std::string metrics_jsonl; ///< RUN_DIR/metrics.jsonl
  int64_t total_steps = 0;   ///< where the run ends
};

/// One kind of sink rank 0 writes for a run: made when the config asks for it (null otherwise).
struct SinkKind {
  const char* name;
  std::function<std::unique_ptr<Sink>(const SinkContext&)> make;
};

/// The registry (sinks.cpp): every kind, in the order events reach them -- metrics.jsonl,
/// TensorBoard (log.tensorboard), the progress display. A new output is its file, its factory's
/// declaration and a line there, and its setting in options.h and schema.cpp.
const std::vector<SinkKind>& sink_kinds();

/// Appends one JSON object per event to `path` (created if missing; a resumed run appends).
std::unique_ptr<Sink> jsonl_sink(const std::string& path);
/// Writes each event's scalars to a new TensorBoard event file in `dir`.
std::unique_ptr<Sink> tensorboard_sink(const std::string& dir);
/// The terminal display (log.progress): a bar on a TTY or plain lines every
/// log.every_steps steps; prints each event's message.
std::unique_ptr<Sink> progress_sink(const LogOptions& opts, int64_t total_steps, std::FILE* out = stderr);

}  // namespace dlrun::metrics
