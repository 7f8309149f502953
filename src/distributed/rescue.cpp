// The survivors' rescue after a lost peer (see rescue.h).
#include "distributed/rescue.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "distributed/deadline.h"
#include "distributed/group_impl.h"

namespace dlrun::dist {
namespace {

constexpr double kSettleS = 3.0;    ///< in the survivors' own store: no new report for this long, and they are all
constexpr double kWriterSilentS = 5.0;  ///< the writer's beat in the meeting store stopped this long: it is gone

std::string as_text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> bytes_of(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

/// The ranks listed in "reported" ("3,1,0,").
std::set<int> ranks_in(const std::string& list) {
  std::set<int> out;
  size_t p = 0;
  while (p < list.size()) {
    const size_t q = list.find(',', p);
    const std::string item = list.substr(p, q == std::string::npos ? std::string::npos : q - p);
    if (!item.empty()) out.insert(std::stoi(item));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return out;
}

using StorePtr = c10::intrusive_ptr<c10d::Store>;

/// `f(*store)` within `seconds` (deadline.h): every call of the rescue on a store, which may be a
/// frozen rank's.
template <typename F>
auto on(const StorePtr& store, double seconds, const char* what, F f) {
  return within(seconds, fmt::format("the survivors' meeting store ({})", what), [store, f] { return f(*store); });
}

}  // namespace

RescueDecision decide(const std::vector<RescueReport>& reports, int world_size) {
  RescueDecision d;
  for (const auto& r : reports) d.survivors.push_back(r.rank);
  std::sort(d.survivors.begin(), d.survivors.end());
  d.survivors.erase(std::unique(d.survivors.begin(), d.survivors.end()), d.survivors.end());
  d.lost = static_cast<int>(d.survivors.size()) < world_size;
  if (reports.empty()) return d;
  int64_t latest = reports.front().step;
  for (const auto& r : reports) latest = std::max(latest, r.step);
  // The latest exact state when it is the latest or one step short of it; else the latest.
  int64_t step = -1;
  for (const auto& r : reports)
    if (r.exact && r.step >= latest - 1) step = std::max(step, r.step);
  d.exact = step >= 0;
  d.step = d.exact ? step : latest;
  for (const auto& r : reports)
    if (r.step == d.step && (r.exact || !d.exact) && (d.writer < 0 || r.rank < d.writer)) d.writer = r.rank;
  return d;
}

std::string to_text(const RescueDecision& d) {
  return nlohmann::json{{"lost", d.lost}, {"step", d.step}, {"writer", d.writer}, {"exact", d.exact},
                        {"survivors", d.survivors}}
      .dump();
}

RescueDecision decision_from(const std::string& text) {
  const auto j = nlohmann::json::parse(text);
  RescueDecision d;
  d.lost = j.at("lost").get<bool>();
  d.step = j.at("step").get<int64_t>();
  d.writer = j.at("writer").get<int>();
  d.exact = j.at("exact").get<bool>();
  d.survivors = j.at("survivors").get<std::vector<int>>();
  return d;
}

struct Rescue::State {
  double op_s = 5.0;                          ///< the deadline of each store call (dist.peer_timeout_s scale)
  c10::intrusive_ptr<c10d::Store> store;      ///< where the survivors meet
  c10::intrusive_ptr<c10d::Store> job;        ///< the rendezvous store's job keys, while it answers
  c10::intrusive_ptr<c10d::TCPStore> hosted;  ///< the survivors' store this rank opened, kept open
  RescueDecision decision;
  std::atomic<bool> stop{false};
  std::thread beat;  ///< this rank's beat in the meeting store ("rbeat/<rank>")
};

Rescue::Rescue(Group& group) : group_(*group.impl_), s_(std::make_unique<State>()) {}

Rescue::~Rescue() {
  s_->stop = true;
  if (s_->beat.joinable()) s_->beat.join();
}

RescueDecision Rescue::agree(const RescueReport& mine) {
  const World& w = group_.world;
  const double peer_s = std::max(1.0, group_.peer_timeout_s);
  // Every store call below has a deadline of this scale (deadline.h), not dist.timeout_s: a
  // frozen rank 0's store accepts connections and never answers.
  const double op_s = s_->op_s = std::max(2.0, peer_s);
  // Where to meet: the rendezvous store while it answers, else the survivors' own.
  try {
    const Group::Impl* g = &group_;
    s_->job = within(op_s, "the rendezvous store", [g, rank = w.rank] {
      auto job = g->connect_again(2.0);
      job->add(fmt::format("alive/{}", rank), 1);
      return job;
    });
    s_->store = c10::make_intrusive<c10d::PrefixStore>("rescue/", s_->job);
  } catch (const std::exception& e) {
    log::warn("distributed: the rendezvous store does not answer ({}): the survivors meet without it", brief(e));
    s_->job.reset();
  }
  if (!s_->store) {
    const uint16_t port = static_cast<uint16_t>(w.master_port + 1);
    const bool candidate = std::any_of(group_.rescue_hosts.begin(), group_.rescue_hosts.end(),
                                       [&](const auto& h) { return h.first == w.rank; });
    if (candidate) {
      try {
        c10d::TCPStoreOptions o;
        o.port = port;
        o.isServer = true;
        o.waitWorkers = false;
        o.timeout = group_.timeout;
        s_->hosted = c10::make_intrusive<c10d::TCPStore>("0.0.0.0", o);
        log::info("distributed: the rendezvous store is gone; the survivors meet in one this rank opened on port {}",
                  port);
      } catch (const std::exception& e) {
        log::warn("distributed: cannot open the survivors' store on port {}: {}", port, brief(e));
      }
    }
    for (const auto& [rank, addr] : group_.rescue_hosts) {
      try {
        c10d::TCPStoreOptions o;
        o.port = port;
        o.isServer = false;
        o.waitWorkers = false;
        o.timeout = std::chrono::milliseconds(2000);
        s_->store = within(op_s, fmt::format("rank {}'s survivors' store", rank), [addr = addr, o] {
          // (a probe too: a frozen host's socket accepts and never answers)
          auto s = c10::make_intrusive<c10d::TCPStore>(addr, o);
          (void)s->add("probe", 0);
          return StorePtr(s);
        });
        log::info("distributed: the survivors meet in rank {}'s store at {}:{}", rank, addr, port);
        break;
      } catch (const std::exception&) {  // that host is gone too, or that rank: the next one
      }
    }
    DLRUN_CHECK(s_->store, ExitCode::kRuntime,
                "the rendezvous store is gone and no survivors' store answers (rank 1 and the first rank of each "
                "other host open one on port {}): the survivors cannot agree on a checkpoint",
                port);
  }
  const StorePtr store = s_->store;
  s_->beat = std::thread([this, store, op_s, key = fmt::format("rbeat/{}", w.rank)] {
    while (!s_->stop) {
      try {
        on(store, op_s, "a beat", [key](c10d::Store& st) { return st.add(key, 1); });
      } catch (const std::exception&) {  // (gone or slow: the next beat tries again)
      }
      for (int i = 0; i < 10 && !s_->stop; ++i) sleep_s(0.1);
    }
  });
  try {
    const nlohmann::json j = {{"rank", mine.rank}, {"step", mine.step}, {"exact", mine.exact}};
    on(store, op_s, "the report", [r = w.rank, text = j.dump()](c10d::Store& st) {
      st.set(fmt::format("report/{}", r), bytes_of(text));
      st.append("reported", bytes_of(fmt::format("{},", r)));
      return 0;
    });
    return agree_in(store, peer_s, op_s);
  } catch (const DeadlineExceeded& e) {
    throw Error(ExitCode::kRuntime, fmt::format("{}: the survivors cannot agree on a checkpoint", brief(e)));
  }
}

RescueDecision Rescue::agree_in(const c10::intrusive_ptr<c10d::Store>& store, double peer_s, double op_s) {
  const World& w = group_.world;
  auto reported_now = [&] {
    return ranks_in(as_text(on(store, op_s, "the reports", [](c10d::Store& st) { return st.get("reported"); })));
  };

  // Wait for the other survivors: in the rendezvous store, every rank whose heartbeat still
  // moves (it will report once its own collective ends); in the survivors' own store, until
  // no new report has come for a few seconds.
  const double start = mono_now();
  std::set<int> expected;
  bool counted = false;
  double last_new = start;
  std::set<int> reported;
  for (;;) {
    std::set<int> now_reported = reported_now();
    if (now_reported.size() != reported.size()) last_new = mono_now();
    reported = std::move(now_reported);
    if (s_->job && !counted) {
      std::vector<int> known_lost;  // the watch named them: no need to look for their beat again
      {
        std::lock_guard<std::mutex> lock(group_.loss_mu);
        if (group_.loss) known_lost = group_.loss->ranks;
      }
      std::vector<int> missing;
      for (int r = 0; r < w.size; ++r)
        if (!reported.count(r) && std::find(known_lost.begin(), known_lost.end(), r) == known_lost.end())
          missing.push_back(r);
      std::vector<int> alive;
      try {
        alive = within(2.5 * Heartbeat::kBeatS + op_s, "the rendezvous store's heartbeats",
                       [job = s_->job, missing] { return Heartbeat::beating(*job, missing, 2.5 * Heartbeat::kBeatS); });
      } catch (const std::exception&) {
      }
      expected = reported;
      expected.insert(alive.begin(), alive.end());
      counted = true;
      continue;
    }
    const bool all = counted ? std::includes(reported.begin(), reported.end(), expected.begin(), expected.end())
                             : false;
    const double now = mono_now();
    if (all || static_cast<int>(reported.size()) == w.size) break;
    if (counted && now - start > peer_s + 3 * Heartbeat::kBeatS) break;  // an expected one never came
    if (!s_->job && now - last_new >= kSettleS && now - start >= kSettleS) break;
    sleep_s(0.1);
  }
  std::vector<RescueReport> reports;
  for (int r : reported) {
    const auto rj = nlohmann::json::parse(as_text(
        on(store, op_s, "a report", [r](c10d::Store& st) { return st.get(fmt::format("report/{}", r)); })));
    reports.push_back({rj.at("rank").get<int>(), rj.at("step").get<int64_t>(), rj.at("exact").get<bool>()});
  }
  // One decision for all: the first survivor's to be written.
  const std::string proposed = to_text(decide(reports, w.size));
  s_->decision = decision_from(as_text(on(store, op_s, "the decision", [proposed](c10d::Store& st) {
    return st.compareSet("decision", {}, bytes_of(proposed));
  })));
  const auto& d = s_->decision;
  log::info("distributed: {} of {} ranks survive ({}); rank {} writes step {} ({})", d.survivors.size(), w.size,
            fmt::join(d.survivors, ", "), d.writer, d.step,
            d.exact ? "exactly the state an uninterrupted checkpoint holds"
                    : "the writer's own BatchNorm statistics: rank 0's are lost with it");
  return d;
}

void Rescue::committed(const std::string& failure) {
  try {
    on(s_->store, s_->op_s, "the outcome", [text = failure.empty() ? std::string("ok") : "failed: " + failure](
                                               c10d::Store& st) {
      st.set("outcome", bytes_of(text));
      return 0;
    });
  } catch (const std::exception& e) {  // the others learn it from the writer's silence instead
    log::warn("distributed: telling the other survivors the outcome failed: {}", brief(e));
  }
  linger();
}

std::string Rescue::await_committed() {
  const StorePtr store = s_->store;
  const double op_s = s_->op_s;
  const int writer = s_->decision.writer;
  const std::string beat = fmt::format("rbeat/{}", writer);
  int64_t seen = -1;
  double moved = mono_now();
  try {
    for (;;) {
      if (on(store, op_s, "the outcome", [](c10d::Store& st) { return st.check({"outcome"}); })) break;
      const int64_t b = on(store, op_s, "the writer's beat", [beat](c10d::Store& st) { return st.add(beat, 0); });
      if (b != seen) seen = b, moved = mono_now();
      if (mono_now() - moved > kWriterSilentS)
        return fmt::format("rank {}, which was writing the survivors' checkpoint, went silent", writer);
      sleep_s(0.1);
    }
    const std::string outcome =
        as_text(on(store, op_s, "the outcome", [](c10d::Store& st) { return st.get("outcome"); }));
    linger();
    return outcome == "ok" ? std::string() : outcome;
  } catch (const DeadlineExceeded& e) {
    return brief(e);
  }
}

void Rescue::linger() noexcept {
  // Every survivor counts itself out; the one whose process hosts the store they meet in (the
  // survivors' own, or rank 0's rendezvous store) keeps it open until the others have read the
  // outcome (bounded: one that died meanwhile never will).
  try {
    auto read = [](int64_t n) { return [n](c10d::Store& st) { return st.add("read", n); }; };
    on(s_->store, s_->op_s, "the count of readers", read(1));
    const World& w = group_.world;
    const bool hosts_job_store = s_->job && w.rank == 0 && !w.agent_store;  // rank 0's store ends with it
    if (!s_->hosted && !hosts_job_store) return;
    const auto all = static_cast<int64_t>(s_->decision.survivors.size());
    const double until = mono_now() + 30;
    while (on(s_->store, s_->op_s, "the count of readers", read(0)) < all && mono_now() < until) sleep_s(0.05);
  } catch (const std::exception&) {
  }
}

}  // namespace dlrun::dist
