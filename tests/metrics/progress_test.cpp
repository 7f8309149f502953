// Progress output: the line format, `lines` mode cadence on a redirected stream, the bar's
// in-place redraw, and that `none` prints nothing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <string>

#include "base/error.h"
#include "metrics/progress.h"

using namespace dlrun;

namespace {

/// Runs `fn` with a temporary FILE* and returns what it wrote.
template <typename F>
std::string capture(F fn) {
  std::FILE* f = std::tmpfile();
  fn(f);
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  std::fclose(f);
  return out;
}

}  // namespace

TEST_CASE("format_progress and format_duration", "[metrics][progress]") {
  CHECK(metrics::format_progress(120, 1000, 1, 0.43214, 1234.56, 0.1, 83) ==
        "step 120/1000 (12%) | epoch 1 | loss 0.4321 | 1234.6 img/s | lr 0.1 | ETA 1m23s");
  CHECK(metrics::format_progress(5, 0, 0, 1.0, 10, 3e-4, 5) ==
        "step 5 | epoch 0 | loss 1.0000 | 10.0 img/s | lr 0.0003");
  CHECK(metrics::format_duration(45) == "45s");
  CHECK(metrics::format_duration(187) == "3m07s");
  CHECK(metrics::format_duration(7500) == "2h05m");
  CHECK(metrics::format_duration(-1) == "?");
}

TEST_CASE("lines mode prints every N steps and the last step", "[metrics][progress]") {
  std::string out = capture([](std::FILE* f) {
    metrics::Progress p(ProgressMode::kLines, 10, 4, f);
    for (int s = 1; s <= 10; ++s) p.update(s, 0, 1.0 / s, 100, 0.1);
    p.message("saved checkpoint");
    p.finish();
  });
  CHECK(out.find('\r') == std::string::npos);
  CHECK(out.find("step 4/10 (40%)") != std::string::npos);
  CHECK(out.find("step 8/10 (80%)") != std::string::npos);
  CHECK(out.find("step 10/10 (100%)") != std::string::npos);
  CHECK(out.find("step 5/10") == std::string::npos);
  CHECK(out.find("saved checkpoint\n") != std::string::npos);
  CHECK(std::count(out.begin(), out.end(), '\n') == 4);
}

TEST_CASE("auto mode on a non-TTY stream prints lines", "[metrics][progress]") {
  std::string out = capture([](std::FILE* f) {
    metrics::Progress p(ProgressMode::kAuto, 2, 1, f);
    p.update(1, 0, 0.5, 10, 0.1);
    p.update(2, 0, 0.5, 10, 0.1);
    p.finish();
  });
  CHECK(out.find('\r') == std::string::npos);
  CHECK(std::count(out.begin(), out.end(), '\n') == 2);
}

TEST_CASE("bar mode redraws one line with carriage returns", "[metrics][progress]") {
  std::string out = capture([](std::FILE* f) {
    metrics::Progress p(ProgressMode::kBar, 4, 1, f);
    p.update(1, 0, 0.5, 10, 0.1);
    p.message("hello");
    p.update(4, 0, 0.25, 10, 0.1);
    p.finish();
  });
  CHECK(out.find("\r[#####...............] step 1/4 (25%)") != std::string::npos);
  CHECK(out.find("\r\x1b[Khello\n[#####") != std::string::npos);  // message, then the bar again
  CHECK(out.find("\r[####################] step 4/4 (100%)") != std::string::npos);
  CHECK(out.back() == '\n');
}

TEST_CASE("none mode prints nothing", "[metrics][progress]") {
  std::string out = capture([](std::FILE* f) {
    metrics::Progress p(ProgressMode::kNone, 2, 1, f);
    p.update(1, 0, 0.5, 10, 0.1);
    p.message("x");
    p.finish();
  });
  CHECK(out.empty());
}

TEST_CASE("a loss not yet read from the device is left out of the line", "[metrics][progress]") {
  CHECK(metrics::format_progress(7, 10, 0, NAN, 100, 0.1, -1) == "step 7/10 (70%) | epoch 0 | 100.0 img/s | lr 0.1");
}
