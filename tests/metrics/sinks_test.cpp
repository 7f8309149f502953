// One report per event, written by every sink in its own way: metrics.jsonl records, TensorBoard
// scalars "<kind>/<name>", and the progress display (messages, and the loss shown once read).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/fsutil.h"
#include "metrics/sink.h"
#include "metrics/tensorboard.h"
#include "run/metrics_log.h"
#include "support/files.h"
#include "support/scratch_dir.h"

using namespace dlrun;
using dlrun::testing::ScratchDir;

namespace {

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

/// A sink that remembers what it was given.
struct Recorder : metrics::Sink {
  std::vector<metrics::Event>* events;
  std::vector<metrics::Tick>* ticks;
  bool* closed;
  void write(const metrics::Event& e) override { events->push_back(e); }
  void tick(const metrics::Tick& t) override { ticks->push_back(t); }
  void close() override { *closed = true; }
};

}  // namespace

TEST_CASE("the reporter gives every sink each event once, with a time", "[metrics][sinks]") {
  std::vector<metrics::Event> a, b;
  std::vector<metrics::Tick> ta, tb;
  bool ca = false, cb = false;
  metrics::Reporter r;
  auto ra = std::make_unique<Recorder>();
  ra->events = &a, ra->ticks = &ta, ra->closed = &ca;
  auto rb = std::make_unique<Recorder>();
  rb->events = &b, rb->ticks = &tb, rb->closed = &cb;
  r.add(std::move(ra));
  r.add(std::move(rb));
  r.report({"eval", 12});
  r.tick({13, 0, 100.0, 0.1});
  r.close();
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 1);
  CHECK(a[0].kind == "eval");
  CHECK(a[0].step == 12);
  CHECK(a[0].time > 1e9);
  CHECK(ta.size() == 1);
  CHECK(tb.size() == 1);
  CHECK(ca);
  CHECK(cb);
}

TEST_CASE("metrics.jsonl: training steps without an event key, the rest with one", "[metrics][sinks]") {
  ScratchDir d;
  const std::string path = d / "metrics.jsonl";
  {
    metrics::Reporter r;
    r.add(metrics::jsonl_sink(path));
    metrics::Event train{"train", 5};
    train.scalars = {{"loss", 0.5}, {"lr", 0.1}};
    train.fields = {{"epoch", 0}};
    r.report(train);
    metrics::Event ck{"checkpoint", 5};
    ck.scalars = {{"stall_s", 0.25}};
    ck.fields = {{"reason", "every_steps"}, {"async", true}};
    r.report(ck);
    metrics::Event bad{"train", 6};
    bad.scalars = {{"loss", NAN}};
    r.report(bad);
  }
  const auto rows = read_jsonl(path);
  REQUIRE(rows.size() == 3);
  CHECK_FALSE(rows[0].contains("event"));
  CHECK(rows[0]["step"] == 5);
  CHECK(rows[0]["loss"] == 0.5);
  CHECK(rows[0]["epoch"] == 0);
  CHECK(rows[0]["time"].get<double>() > 1e9);
  CHECK(rows[1]["event"] == "checkpoint");
  CHECK(rows[1]["reason"] == "every_steps");
  CHECK(rows[1]["stall_s"] == 0.25);
  CHECK(rows[2]["loss"].is_null());  // NaN is not JSON: written as null
}

TEST_CASE("TensorBoard gets each scalar as <kind>/<name>", "[metrics][sinks]") {
  ScratchDir d;
  {
    metrics::Reporter r;
    r.add(metrics::tensorboard_sink(d.str()));
    metrics::Event e{"eval", 40};
    e.scalars = {{"accuracy", 0.75}};
    e.time = 1000.0;
    r.report(e);
    r.report({"start", 0});  // no scalars: nothing written
  }
  std::string file;
  for (const auto& entry : std::filesystem::directory_iterator(d.str())) file = entry.path().string();
  const std::string data = dlrun::testing::read_text(file);
  const std::string expected = metrics::tfrecord_frame(metrics::encode_scalar_event("eval/accuracy", 0.75f, 40, 1000.0));
  CHECK(data.size() == metrics::tfrecord_frame(metrics::encode_file_version_event(1000.0)).size() + expected.size());
  CHECK(data.substr(data.size() - expected.size()) == expected);
}

TEST_CASE("the progress display prints messages and shows the loss once it was read", "[metrics][sinks]") {
  ScratchDir d;
  const std::string path = d / "progress.txt";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    LogOptions o;
    o.progress = ProgressMode::kLines;
    o.every_steps = 2;
    metrics::Reporter r;
    r.add(metrics::progress_sink(o, 4, f));
    r.tick({1, 0, 10.0, 0.1});  // lines mode: ticks print nothing
    metrics::Event e{"train", 2};
    e.scalars = {{"loss", 1.5}, {"samples_per_s", 20.0}, {"lr", 0.1}};
    r.report(e);
    metrics::Event ev{"eval", 2};
    ev.message = "eval at step 2: accuracy 0.5";
    r.report(ev);
    r.close();
    std::fclose(f);
  }
  const std::string out = dlrun::testing::read_text(path);
  CHECK_THAT(out, Catch::Contains("step 2/4 (50%) | epoch 0 | loss 1.5000 | 20.0 img/s | lr 0.1"));
  CHECK_THAT(out, Catch::Contains("eval at step 2: accuracy 0.5\n"));
  CHECK(out.find("step 1/4") == std::string::npos);
}

TEST_CASE("metrics.jsonl: a line torn by a killed process does not swallow the next process's first record",
          "[metrics][sinks]") {
  ScratchDir d;
  const std::string path = d.write("metrics.jsonl", "{\"step\": 1, \"loss\": 0.5}\n{\"step\": 2, \"lo");
  {
    metrics::Reporter r;
    r.add(metrics::jsonl_sink(path));  // a resumed process appends
    r.report(metrics::Event{"start", 1});
  }
  {
    metrics::Reporter r;  // and one after a clean end adds no blank line
    r.add(metrics::jsonl_sink(path));
    r.report(metrics::Event{"start", 2});
  }
  const std::string text = fsutil::read_file(path);
  CHECK(text.find("\"lo\n{") != std::string::npos);  // the torn line ended, then the record
  CHECK(text.find("\n\n") == std::string::npos);
  std::vector<std::string> events;
  train::MetricsLog(path).drain([&](const train::MetricsRecord& rec) { events.push_back(rec.event()); });
  CHECK(events == std::vector<std::string>{"", "start", "start"});  // the torn line alone is skipped
}
