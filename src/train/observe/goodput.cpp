// The wall-clock account of a run from metrics.jsonl (see goodput.h).
#include "train/observe/goodput.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/error.h"
#include "run/metrics_log.h"

namespace dlrun::train {
namespace {

/// What `seconds` of the job's machines cost: the one formula of a run's cost.
double cost_of(double price_per_hour, double seconds) { return price_per_hour * seconds / 3600.0; }

nlohmann::json money(double price_per_hour, double seconds) {
  return price_per_hour > 0 ? nlohmann::json(cost_of(price_per_hour, seconds)) : nlohmann::json(nullptr);
}

/// What segment `s` computed after `kept` (the step the next segment resumed at): steps, seconds.
std::pair<int64_t, double> replayed_after(const Segment& s, int64_t kept) {
  if (s.first_step <= 0 || s.furthest_step <= kept) return {0, 0.0};
  const int64_t steps = s.furthest_step - std::max(kept, s.start_step);
  return {steps, std::max(0.0, s.last_step - s.time_at(kept))};
}

double stop_of(const Segment& s) { return std::max(0.0, s.end - (s.last_step > 0 ? s.last_step : s.end)); }

double startup_of(const Segment& s) {
  return std::max(0.0, (s.first_step > 0 ? s.first_step : s.end) - s.process_start);
}

}  // namespace

double Segment::time_at(int64_t step) const {
  double t = first_step;
  for (const auto& [s, when] : marks) {
    if (s > step) break;
    t = when;
  }
  return t;
}

std::vector<Segment> read_segments(const std::string& metrics_jsonl, uint64_t offset) {
  std::vector<Segment> out;
  MetricsLog(metrics_jsonl, offset).drain([&](const MetricsRecord& r) {
    const double t = r.time();
    const int64_t step = r.step().value_or(0);  // (never a float's conversion)
    const std::string event = r.event();
    if (event == "start") {
      Segment s;
      s.process_start = r.number("process_start_time").value_or(t);
      s.end = t;
      s.start_step = s.furthest_step = step;
      out.push_back(std::move(s));
      return;
    }
    if (out.empty()) return;
    Segment& s = out.back();
    s.end = std::max(s.end, t);
    if (r.is_step_line() && r.json.contains("loss")) {  // a step's metrics line
      if (s.first_step <= 0) s.first_step = t;
      s.last_step = t;
      s.furthest_step = std::max(s.furthest_step, step);
      s.marks.emplace_back(step, t);
    } else if (event == "checkpoint") {
      const std::string reason = r.json.value("reason", "");
      if (reason != "preemption" && reason != "end") s.save_stall_s += r.number("stall_s").value_or(0);
      s.marks.emplace_back(step, t);
    } else if (event == "preempt") {
      s.status = "interrupted";
    } else if (event == "peer_lost") {
      s.status = "peer_lost";
    } else if (event == "end") {
      s.status = r.json.value("status", "failed");
    }
  });
  return out;
}

double Goodput::useful_s() const {
  return std::max(0.0, paid_s - startup_s - replayed_s - stop_s - save_stall_s);
}

nlohmann::json Goodput::wall_clock_json() const {
  return {{"paid_s", paid_s},
          {"useful_s", useful_s()},
          {"goodput", paid_s > 0 ? useful_s() / paid_s : 1.0},
          {"startup_s", startup_s},
          {"replayed_s", replayed_s},
          {"replayed_steps", replayed_steps},
          {"stop_s", stop_s},
          {"save_stall_s", save_stall_s},
          {"downtime_s", downtime_s},
          {"interruptions", interruptions},
          {"interruptions_s", interruptions_s},
          {"peer_losses", peer_losses},
          {"peer_lost_s", peer_lost_s},
          {"segments", segments}};
}

nlohmann::json Goodput::cost_json(double price_per_hour) const {
  if (!(price_per_hour > 0)) return nullptr;
  return {{"price_per_hour", price_per_hour},
          {"total", money(price_per_hour, paid_s)},
          {"useful", money(price_per_hour, useful_s())},
          {"interruptions", money(price_per_hour, interruptions_s)}};
}

Goodput account(std::vector<Segment> segments, double now, const std::string& live_status) {
  Goodput g;
  if (segments.empty()) return g;
  segments.back().end = std::max(segments.back().end, now);
  if (!live_status.empty()) segments.back().status = live_status;
  g.segments = static_cast<int64_t>(segments.size());
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    g.paid_s += std::max(0.0, s.end - s.process_start);
    g.startup_s += startup_of(s);
    g.save_stall_s += s.save_stall_s;
    g.stop_s += stop_of(s);
    if (i + 1 < segments.size()) {
      const Segment& next = segments[i + 1];
      const auto [steps, seconds] = replayed_after(s, next.start_step);
      g.replayed_steps += steps;
      g.replayed_s += seconds;
      g.downtime_s += std::max(0.0, next.process_start - s.end);
      if (s.status != "completed") {  // (a completed run continued with more steps was not interrupted)
        const double lost = stop_of(s) + seconds + startup_of(next);
        g.interruptions += 1;
        g.interruptions_s += lost;
        if (s.status == "peer_lost") g.peer_losses += 1, g.peer_lost_s += lost;
      }
    } else if (s.status == "interrupted" || s.status == "peer_lost") {  // the live process, stopping now
      g.interruptions += 1;
      g.interruptions_s += stop_of(s);
      if (s.status == "peer_lost") g.peer_losses += 1, g.peer_lost_s += stop_of(s);
    }
  }
  return g;
}

nlohmann::json interruption_json(const std::vector<Segment>& segments, size_t i, double first_step_time,
                                 double price_per_hour) {
  if (i == 0 || i >= segments.size()) return nlohmann::json::object();
  const Segment& prev = segments[i - 1];
  const Segment& cur = segments[i];
  const auto [steps, replayed] = replayed_after(prev, cur.start_step);
  const double stop = stop_of(prev), startup = std::max(0.0, first_step_time - cur.process_start);
  const double lost = stop + replayed + startup;
  return {{"previous", prev.status.empty() ? "killed" : prev.status},
          {"stop_s", stop},
          {"steps_replayed", steps},
          {"replayed_s", replayed},
          {"downtime_s", std::max(0.0, cur.process_start - prev.end)},
          {"startup_s", startup},
          {"lost_s", lost},
          {"lost_cost", money(price_per_hour, lost)}};
}

double price_per_hour(double configured) {
  if (configured > 0) return configured;
  const std::string v = env("DLRUN_PRICE_PER_HOUR");
  if (v.empty()) return 0;
  char* end = nullptr;
  const double p = std::strtod(v.c_str(), &end);
  DLRUN_CHECK_INPUT(*end == '\0' && p > 0 && p < 1e6,
                    "DLRUN_PRICE_PER_HOUR={}: not a price per hour (a number > 0 and < 1e6; unset it for none)", v);
  return p;
}

RunAccount::RunAccount(double configured, std::string metrics_jsonl)
    : price_(price_per_hour(configured)), path_(std::move(metrics_jsonl)) {}

void RunAccount::begin() {
  std::ifstream in(path_, std::ios::binary | std::ios::ate);
  offset_ = in ? static_cast<uint64_t>(std::max<std::streamoff>(0, in.tellg())) : 0;
  earlier_ = read_segments(path_);
}

std::vector<Segment> RunAccount::all() const {
  std::vector<Segment> out = earlier_;
  for (auto& s : read_segments(path_, offset_)) out.push_back(std::move(s));
  return out;
}

double RunAccount::paid_before_s() const { return account(earlier_, 0).paid_s; }

std::function<double(double)> RunAccount::live_cost() const {
  if (!(price_ > 0)) return nullptr;
  return [price = price_, before = paid_before_s(), start = process_exec_wall()](double now) {
    return cost_of(price, before + std::max(0.0, now - start));
  };
}

Goodput RunAccount::now(const std::string& live_status) const {
  return account(all(), wall_now(), live_status);
}

std::optional<metrics::Event> RunAccount::resume_event(int64_t step, int64_t resumed_step) const {
  metrics::Event e{"resume", step};
  e.fields = interruption();
  if (e.fields.empty()) return std::nullopt;
  e.message = fmt::format("resumed at step {}: the interruption cost {:.1f} s ({} step(s) replayed, start-up {:.1f} s)",
                          resumed_step, e.fields.value("lost_s", 0.0), e.fields.value("steps_replayed", 0),
                          e.fields.value("startup_s", 0.0));
  return e;
}

void RunAccount::add_to(nlohmann::json& fields, const std::string& live_status) const {
  const Goodput g = now(live_status);
  fields["wall_clock"] = g.wall_clock_json();
  fields["cost"] = g.cost_json(price_);
}

nlohmann::json RunAccount::interruption() const {
  if (earlier_.empty()) return nlohmann::json::object();
  const auto segments = all();
  return interruption_json(segments, segments.size() - 1, wall_now(), price_);
}

}  // namespace dlrun::train
