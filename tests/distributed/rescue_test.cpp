// The survivors' decision after a lost peer (distributed/rescue.h): which step is written and by
// whom, when the survivors stand at the same step or one apart, exact or not.
#include <catch2/catch.hpp>

#include "distributed/rescue.h"

using dlrun::dist::decide;
using dlrun::dist::RescueReport;

TEST_CASE("the survivors write the step they all completed, by the lowest rank", "[dist][rescue]") {
  const auto d = decide({{2, 40, true}, {0, 40, true}, {3, 40, true}}, 4);
  CHECK(d.lost);
  CHECK(d.step == 40);
  CHECK(d.writer == 0);
  CHECK(d.exact);
  CHECK(d.survivors == std::vector<int>{0, 2, 3});
}

TEST_CASE("survivors one step apart: the later step when it is exact", "[dist][rescue]") {
  // Rank 1's all-reduce of step 41 finished before the peer went, rank 2's did not.
  const auto d = decide({{1, 41, true}, {2, 40, true}}, 4);
  CHECK(d.step == 41);
  CHECK(d.writer == 1);
  CHECK(d.exact);
}

TEST_CASE("an exact step one short of the latest is preferred to an inexact latest", "[dist][rescue]") {
  // Rank 0 is gone: rank 2 finished step 41 with its own BatchNorm statistics; rank 1 kept step
  // 40's as rank 0 broadcast them.
  auto d = decide({{2, 41, false}, {1, 40, true}}, 3);
  CHECK(d.step == 40);
  CHECK(d.writer == 1);
  CHECK(d.exact);
  // Two steps short is too far: the latest, inexact, by the lowest rank that has it.
  d = decide({{3, 42, false}, {2, 42, false}, {1, 40, true}}, 4);
  CHECK(d.step == 42);
  CHECK(d.writer == 2);
  CHECK_FALSE(d.exact);
}

TEST_CASE("an exact report is the writer over an inexact one of the same step", "[dist][rescue]") {
  const auto d = decide({{1, 40, false}, {2, 40, true}}, 3);
  CHECK(d.step == 40);
  CHECK(d.writer == 2);
  CHECK(d.exact);
}

TEST_CASE("every rank reported: no peer is lost", "[dist][rescue]") {
  const auto d = decide({{0, 7, true}, {1, 7, true}}, 2);
  CHECK_FALSE(d.lost);
}

TEST_CASE("the decision round-trips through the store's text", "[dist][rescue]") {
  const auto d = decide({{1, 41, false}, {3, 41, false}}, 4);
  const auto back = dlrun::dist::decision_from(dlrun::dist::to_text(d));
  CHECK(back.lost == d.lost);
  CHECK(back.step == d.step);
  CHECK(back.writer == d.writer);
  CHECK(back.exact == d.exact);
  CHECK(back.survivors == d.survivors);
}
