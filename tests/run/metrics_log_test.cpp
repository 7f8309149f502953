// Reading metrics.jsonl back (run/metrics_log.h): what a record says (its kind, an integer step
// and never a float's, its time, its line's offset), lines that are not JSON objects, a line
// still being written, reading on from an offset or from the file's end as it grows.
#include <catch2/catch.hpp>

#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/files.h"
#include "support/scratch_dir.h"
#include "run/metrics_log.h"

using dlrun::testing::ScratchDir;
using dlrun::train::MetricsLog;
using dlrun::train::MetricsRecord;

namespace {

void append(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::app);
  f << text;
}

/// The records a poll (or, `drain`, a drain) hands out.
std::vector<MetricsRecord> read(MetricsLog& log, bool drain = false) {
  std::vector<MetricsRecord> out;
  const auto keep = [&out](const MetricsRecord& r) { out.push_back(r); };
  const size_t n = drain ? log.drain(keep) : log.poll(keep);
  CHECK(n == out.size());
  return out;
}

}  // namespace

TEST_CASE("metrics.jsonl records: the kind, an integer step only, the time, where each line begins",
          "[run][metrics_log]") {
  ScratchDir t;
  const std::vector<std::string> lines = {
      R"({"event":"start","step":0,"time":100.5,"process_start_time":95})",
      R"({"loss":1.25,"step":7,"time":101})",
      "not json",
      "",
      R"([1,2,3])",
      R"("a string")",
      R"({"loss":1.0,"step":7.0,"time":102})",   // a float step: never converted
      R"({"loss":null,"step":4e74})",            // past int64: undefined behaviour to convert
      R"({"loss":1.0,"step":18446744073709551615})",  // an unsigned past int64
      R"({"event":5,"step":"8","time":"late"})", // a kind and a step of the wrong types
      R"({"event":"checkpoint","reason":"every_steps","stall_s":0.5,"step":9,"time":103})",
  };
  std::string text;
  std::vector<uint64_t> begins;
  for (const auto& l : lines) begins.push_back(text.size()), text += l + "\n";
  const std::string path = t.write("metrics.jsonl", text);

  MetricsLog log(path);
  const auto r = read(log);
  REQUIRE(r.size() == 7);  // the five objects and two of the wrong types; not the other four lines
  CHECK(r[0].event() == "start");
  CHECK_FALSE(r[0].is_step_line());
  CHECK(r[0].step() == 0);
  CHECK(r[0].time() == 100.5);
  CHECK(r[0].number("process_start_time") == 95);
  CHECK(r[0].offset == begins[0]);

  CHECK(r[1].is_step_line());
  CHECK(r[1].event().empty());
  CHECK(r[1].step() == 7);
  CHECK(r[1].number("loss") == 1.25);
  CHECK_FALSE(r[1].number("absent").has_value());
  CHECK_FALSE(r[0].number("event").has_value());  // not a number
  CHECK(r[1].offset == begins[1]);

  CHECK(r[2].is_step_line());
  CHECK_FALSE(r[2].step().has_value());  // 7.0
  CHECK(r[2].offset == begins[6]);
  CHECK_FALSE(r[3].step().has_value());  // 4e74
  CHECK_FALSE(r[4].step().has_value());  // 2^64 - 1
  CHECK(r[3].time() == 0);               // no time: 0
  CHECK_FALSE(r[3].number("loss").has_value());  // null, as a NaN loss is written

  CHECK_FALSE(r[5].is_step_line());      // an "event" key, though not a string
  CHECK(r[5].event().empty());
  CHECK_FALSE(r[5].step().has_value());  // "8"
  CHECK(r[5].time() == 0);

  CHECK(r[6].event() == "checkpoint");
  CHECK(r[6].json.value("reason", "") == "every_steps");  // the raw record
  CHECK(r[6].offset == begins[10]);
  CHECK(log.offset() == text.size());
  CHECK(read(log).empty());  // nothing new
}

TEST_CASE("metrics.jsonl: a line still being written waits, and a later poll takes it whole",
          "[run][metrics_log]") {
  ScratchDir t;
  const std::string first = R"({"loss":1,"step":1})" "\n";
  const std::string path = t.write("metrics.jsonl", first + R"({"loss":1,"st)");
  MetricsLog log(path);
  auto r = read(log);
  REQUIRE(r.size() == 1);
  CHECK(r[0].step() == 1);
  CHECK(log.offset() == first.size());  // the unfinished line is not read past

  append(path, R"(ep":2})" "\n" R"({"loss":1,"step":3})");
  r = read(log);
  REQUIRE(r.size() == 1);  // step 2 completed; step 3 still lacks its newline
  CHECK(r[0].step() == 2);
  CHECK(r[0].offset == first.size());

  append(path, "\n");
  r = read(log);
  REQUIRE(r.size() == 1);
  CHECK(r[0].step() == 3);
  CHECK(read(log).empty());

  // A line longer than one read of the file, completed across polls.
  const std::string note(200 * 1024, 'x');
  append(path, R"({"event":"note","text":")" + note);
  CHECK(read(log).empty());
  append(path, R"(","step":4})" "\n");
  r = read(log);
  REQUIRE(r.size() == 1);
  CHECK(r[0].event() == "note");
  CHECK(r[0].step() == 4);
  CHECK(log.offset() == dlrun::testing::file_size(path));
}

TEST_CASE("metrics.jsonl: drain takes a last line that lacks only its newline, never a torn one",
          "[run][metrics_log]") {
  ScratchDir t;
  const std::string path = t.write("metrics.jsonl", R"({"step":1})" "\n" R"({"step":2})");
  MetricsLog whole(path);
  auto r = read(whole, true);
  REQUIRE(r.size() == 2);
  CHECK(r[1].step() == 2);
  CHECK(whole.offset() == dlrun::testing::file_size(path));

  const std::string torn = t.write("torn.jsonl", R"({"step":1})" "\n" R"({"step":2,"lo)");
  MetricsLog cut(torn);
  r = read(cut, true);
  REQUIRE(r.size() == 1);
  CHECK(cut.offset() == 11);  // still before the torn line
}

TEST_CASE("metrics.jsonl: from an offset, from the file's end, a missing file",
          "[run][metrics_log]") {
  ScratchDir t;
  const std::string a = R"({"event":"start","step":0})" "\n", b = R"({"loss":2,"step":1})" "\n";
  const std::string path = t.write("metrics.jsonl", a + b);
  MetricsLog later(path, a.size());
  auto r = read(later);
  REQUIRE(r.size() == 1);
  CHECK(r[0].step() == 1);
  CHECK(r[0].offset == a.size());

  MetricsLog tail = MetricsLog::from_end(path);  // a segment that begins now
  CHECK(tail.offset() == a.size() + b.size());
  CHECK(read(tail).empty());
  append(path, R"({"loss":2,"step":2})" "\n");
  r = read(tail);
  REQUIRE(r.size() == 1);
  CHECK(r[0].step() == 2);

  const std::string none = t / "none.jsonl";
  MetricsLog missing = MetricsLog::from_end(none);
  CHECK(missing.offset() == 0);
  CHECK(read(missing).empty());
  CHECK(read(missing, true).empty());
  t.write("none.jsonl", b);  // created later: read from its start
  CHECK(read(missing).size() == 1);
}

TEST_CASE("metrics.jsonl: a record whose handler throws counts as read", "[run][metrics_log]") {
  ScratchDir t;
  const std::string path = t.write("metrics.jsonl", R"({"step":1})" "\n" R"({"step":2})" "\n");
  MetricsLog log(path);
  CHECK_THROWS_AS(log.poll([](const MetricsRecord&) { throw std::runtime_error("no"); }), std::runtime_error);
  const auto r = read(log);
  REQUIRE(r.size() == 1);
  CHECK(r[0].step() == 2);
}
