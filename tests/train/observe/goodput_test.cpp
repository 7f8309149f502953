// The wall-clock account of a run read back from metrics.jsonl: three processes, the first
// killed after step 10 (last checkpoint at step 5), the second stopped by a signal at step 12,
// the third completing the run (train/observe/goodput.h).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <fstream>
#include <string>

#include "base/error.h"
#include "train/observe/goodput.h"

using namespace dlrun::train;

namespace {

std::string write_metrics() {
  const std::string path = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                           "/dlrun-goodput-test-" + std::to_string(::getpid()) + ".jsonl";
  std::ofstream f(path);
  auto step = [&](int s, double t) { f << R"({"loss":1.0,"step":)" << s << R"(,"time":)" << t << "}\n"; };
  f << R"({"event":"start","step":0,"time":100,"process_start_time":95})" << "\n";
  for (int s = 1; s <= 10; ++s) {
    step(s, 100 + s);
    if (s == 5) f << R"({"event":"checkpoint","reason":"every_steps","stall_s":0.5,"step":5,"time":105.5})" << "\n";
  }
  f << "not json\n";  // a line cut short by the kill
  f << R"({"event":"start","step":5,"time":130,"process_start_time":125})" << "\n";
  for (int s = 6; s <= 12; ++s) step(s, 125 + s);
  f << R"({"event":"checkpoint","reason":"preemption","stall_s":0.9,"step":12,"time":137.5})" << "\n";
  f << R"({"event":"preempt","step":12,"time":138})" << "\n";
  f << R"({"event":"start","step":12,"time":200})" << "\n";  // an older dlrun: no process_start_time
  for (int s = 13; s <= 20; ++s) step(s, 188 + s);
  f << R"({"event":"end","status":"completed","step":20,"time":209})" << "\n";
  return path;
}

}  // namespace

TEST_CASE("segments of metrics.jsonl: starts, steps, saves, how each ended", "[train][goodput]") {
  const std::string path = write_metrics();
  const auto segs = read_segments(path);
  std::remove(path.c_str());
  REQUIRE(segs.size() == 3);
  CHECK(segs[0].process_start == 95);
  CHECK(segs[0].status.empty());  // killed
  CHECK(segs[0].furthest_step == 10);
  CHECK(segs[0].save_stall_s == 0.5);
  CHECK(segs[0].time_at(5) == 105.5);
  CHECK(segs[0].time_at(0) == 101);
  CHECK(segs[1].status == "interrupted");
  CHECK(segs[1].save_stall_s == 0);  // the stop's save is the stop's time, not a stall
  CHECK(segs[2].process_start == 200);
  CHECK(segs[2].status == "completed");
  CHECK(read_segments("/nonexistent/metrics.jsonl").empty());
}

TEST_CASE("the account: paid, start-up, replayed, stop, stalls, downtime, interruptions, cost",
          "[train][goodput]") {
  const std::string path = write_metrics();
  const auto segs = read_segments(path);
  std::remove(path.c_str());
  const Goodput g = account(segs, 0);
  CHECK(g.paid_s == Approx(15 + 13 + 9));  // 110-95, 138-125, 209-200
  CHECK(g.startup_s == Approx(6 + 6 + 1));
  CHECK(g.replayed_steps == 5);  // steps 6-10 of the killed process
  CHECK(g.replayed_s == Approx(4.5));
  CHECK(g.stop_s == Approx(0 + 1 + 1));
  CHECK(g.save_stall_s == Approx(0.5));
  CHECK(g.downtime_s == Approx(15 + 62));
  CHECK(g.interruptions == 2);
  CHECK(g.interruptions_s == Approx((0 + 4.5 + 6) + (1 + 0 + 1)));
  CHECK(g.useful_s() == Approx(37 - 13 - 4.5 - 2 - 0.5));
  const auto w = g.wall_clock_json();
  CHECK(w["goodput"].get<double>() == Approx(17.0 / 37.0));
  CHECK(w["segments"] == 3);
  CHECK(g.cost_json(0).is_null());
  const auto c = g.cost_json(3.6);
  CHECK(c["total"].get<double>() == Approx(3.6 * 37 / 3600));
  CHECK(c["interruptions"].get<double>() == Approx(3.6 * 12.5 / 3600));

  // The live process: its end is now when later than its last record.
  CHECK(account(segs, 300).paid_s == Approx(15 + 13 + 100));
  const Goodput none = account({}, 10);
  CHECK(none.paid_s == 0);
  CHECK(none.wall_clock_json()["goodput"] == 1.0);
}

TEST_CASE("the resume event: what the interruption before this process cost", "[train][goodput]") {
  const std::string path = write_metrics();
  const auto segs = read_segments(path);
  std::remove(path.c_str());
  const auto j = interruption_json(segs, 1, 131, 7.2);
  CHECK(j["previous"] == "killed");
  CHECK(j["steps_replayed"] == 5);
  CHECK(j["replayed_s"].get<double>() == Approx(4.5));
  CHECK(j["stop_s"].get<double>() == Approx(0));
  CHECK(j["downtime_s"].get<double>() == Approx(15));
  CHECK(j["startup_s"].get<double>() == Approx(6));
  CHECK(j["lost_s"].get<double>() == Approx(10.5));
  CHECK(j["lost_cost"].get<double>() == Approx(7.2 * 10.5 / 3600));
  const auto k = interruption_json(segs, 2, 201, 0);
  CHECK(k["previous"] == "interrupted");
  CHECK(k["steps_replayed"] == 0);
  CHECK(k["lost_cost"].is_null());
  CHECK(interruption_json(segs, 0, 0, 0).empty());
}

TEST_CASE("the price: the config's, else DLRUN_PRICE_PER_HOUR, which must be a number", "[train][goodput]") {
  ::unsetenv("DLRUN_PRICE_PER_HOUR");
  CHECK(price_per_hour(0) == 0);
  CHECK(price_per_hour(2.5) == 2.5);
  ::setenv("DLRUN_PRICE_PER_HOUR", "0.92", 1);
  CHECK(price_per_hour(0) == 0.92);
  CHECK(price_per_hour(3) == 3);
  ::setenv("DLRUN_PRICE_PER_HOUR", "$3", 1);
  CHECK_THROWS_AS(price_per_hour(0), dlrun::Error);
  ::setenv("DLRUN_PRICE_PER_HOUR", "-1", 1);
  CHECK_THROWS_AS(price_per_hour(0), dlrun::Error);
  ::unsetenv("DLRUN_PRICE_PER_HOUR");
}

TEST_CASE("RunAccount: earlier processes read once, this one's records from where the file ended",
          "[train][goodput]") {
  const std::string path = write_metrics();
  RunAccount acc(0, path);
  acc.begin();  // three earlier segments
  {
    std::ofstream f(path, std::ios::app);
    f << R"({"event":"start","step":20,"time":300,"process_start_time":290})" << "\n";
    f << R"({"loss":1.0,"step":21,"time":301})" << "\n";
  }
  const auto j = acc.interruption();
  CHECK(j["previous"] == "completed");
  CHECK(j["downtime_s"].get<double>() == Approx(290 - 209));
  const Goodput g = acc.now("interrupted");
  CHECK(g.interruptions == 3);  // killed, stopped, and this one stopping (the completed one resumed by --resume)
  CHECK(g.paid_s >= 15 + 13 + 9 + 11);
  nlohmann::json fields;
  acc.add_to(fields, "");
  CHECK(fields["cost"].is_null());
  CHECK(fields["wall_clock"]["segments"] == 4);
  std::remove(path.c_str());
  RunAccount fresh(0, path);
  fresh.begin();
  CHECK(fresh.interruption().empty());
}
