// Cloud notice sources against a local stand-in metadata server on 127.0.0.1 (never the
// real 169.254.169.254 or metadata.google.internal), the file source, and NoticeWatcher's
// background polling and prompt shutdown.
#include <catch2/catch.hpp>

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <ctime>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "base/clock.h"
#include "base/error.h"
#include "preempt/preempt.h"
#include "preempt/providers.h"
#include "support/http_server.h"

using namespace dlrun;
using Server = test::HttpTestServer;

namespace {

/// Waits up to `timeout_s` for the stop flag.
bool wait_for_stop(double timeout_s) {
  const double end = mono_now() + timeout_s;
  while (mono_now() < end) {
    if (preempt::stop_requested()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return preempt::stop_requested();
}

/// A path in /tmp that does not exist yet; removed at the end.
struct TempPath {
  std::string path;
  TempPath() {
    char tmpl[] = "/tmp/dlrun_notice_XXXXXX";
    ::close(::mkstemp(tmpl));
    path = tmpl;
    std::remove(path.c_str());
  }
  ~TempPath() { std::remove(path.c_str()); }
};

PreemptionOptions opts(NoticeSource watch, const std::string& endpoint, double poll_s) {
  PreemptionOptions o;
  o.watch = watch;
  o.endpoint = endpoint;
  o.poll_s = poll_s;
  return o;
}

}  // namespace

TEST_CASE("default endpoints are the providers' metadata URLs", "[preempt][watch]") {
  CHECK(preempt::default_endpoint(NoticeSource::kAws) == "http://169.254.169.254");
  CHECK(preempt::default_endpoint(NoticeSource::kGcp) ==
        "http://metadata.google.internal/computeMetadata/v1/instance/preempted");
  CHECK(preempt::default_endpoint(NoticeSource::kAzure) ==
        "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01");
  CHECK(preempt::default_endpoint(NoticeSource::kFile).empty());
  CHECK(preempt::default_endpoint(NoticeSource::kNone).empty());
}

TEST_CASE("bad watch settings are bad input and none starts nothing", "[preempt][watch]") {
  auto code_of = [](const PreemptionOptions& o) {
    try {
      preempt::NoticeWatcher w(o);
    } catch (const Error& e) {
      return int(e.code());
    }
    return 0;
  };
  CHECK(code_of(opts(NoticeSource::kFile, "", 1)) == 2);
  CHECK(code_of(opts(NoticeSource::kFile, "/tmp/x", 0)) == 2);
  preempt::NoticeWatcher none(opts(NoticeSource::kNone, "", 1));
  CHECK(none.endpoint().empty());
#ifndef DLRUN_HAVE_CURL
  CHECK(code_of(opts(NoticeSource::kAws, "http://127.0.0.1:1", 1)) == 2);
#endif
}

TEST_CASE("file watch: a notice once the path exists", "[preempt][watch]") {
  TempPath p;
  std::string detail;
  CHECK_FALSE(preempt::poll_once(NoticeSource::kFile, p.path, &detail));
  std::ofstream(p.path) << "maintenance at 12:00\n";
  CHECK(preempt::poll_once(NoticeSource::kFile, p.path, &detail));
  CHECK(detail == p.path + ": maintenance at 12:00");
}

TEST_CASE("file watch: a notice older than this process is ignored, and said so once", "[preempt][watch]") {
  TempPath p;
  std::ofstream(p.path) << "written for the run before a requeue\n";
  // Back-date the file to before this process started, as a requeued run on the same VM sees it.
  const double old = process_start_wall() - 60;
  struct timeval times[2];
  times[0].tv_sec = times[1].tv_sec = static_cast<time_t>(old);
  times[0].tv_usec = times[1].tv_usec = 0;
  REQUIRE(::utimes(p.path.c_str(), times) == 0);
  std::string detail;
  CHECK_FALSE(preempt::poll_once(NoticeSource::kFile, p.path, &detail));
  // Touching it again is a new notice.
  REQUIRE(::utimes(p.path.c_str(), nullptr) == 0);
  CHECK(preempt::poll_once(NoticeSource::kFile, p.path, &detail));
  CHECK(detail == p.path + ": written for the run before a requeue");
}

TEST_CASE("NoticeWatcher sees a file within its poll interval", "[preempt][watch]") {
  preempt::reset();
  TempPath p;
  {
    preempt::NoticeWatcher w(opts(NoticeSource::kFile, p.path, 0.05));
    CHECK(w.endpoint() == p.path);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    CHECK_FALSE(preempt::stop_requested());
    std::ofstream(p.path) << "drain\n";
    CHECK(wait_for_stop(2.0));
    CHECK(preempt::stop_reason() == "file notice: " + p.path + ": drain");
  }
  preempt::reset();
}

TEST_CASE("NoticeWatcher stops promptly however long its interval", "[preempt][watch]") {
  preempt::reset();
  TempPath p;
  const double t0 = mono_now();
  { preempt::NoticeWatcher w(opts(NoticeSource::kFile, p.path, 3600)); }
  CHECK(mono_now() - t0 < 1.0);
  CHECK_FALSE(preempt::stop_requested());
}

#ifdef DLRUN_HAVE_CURL

TEST_CASE("aws: IMDSv2 token, then instance-action 404 and 200", "[preempt][watch][http]") {
  std::atomic<bool> notice{false};
  Server s([&](const Server::Request& r) -> Server::Response {
    if (r.method == "PUT" && r.path == "/latest/api/token") return {200, "tok-123"};
    if (r.method == "GET" && r.path == "/latest/meta-data/spot/instance-action") {
      if (r.header("x-aws-ec2-metadata-token") != "tok-123") return {401, ""};
      if (!notice) return {404, "Not Found"};
      return {200, R"({"action": "terminate", "time": "2030-01-01T00:00:00Z"})"};
    }
    return {404, ""};
  });
  std::string detail;
  CHECK_FALSE(preempt::poll_once(NoticeSource::kAws, s.base() + "/", &detail));
  notice = true;
  CHECK(preempt::poll_once(NoticeSource::kAws, s.base(), &detail));
  CHECK(detail == "action=terminate time=2030-01-01T00:00:00Z");
  auto reqs = s.requests();
  REQUIRE(reqs.size() == 4);
  CHECK(reqs[0].method == "PUT");
  CHECK(reqs[0].header("x-aws-ec2-metadata-token-ttl-seconds") == "21600");
  CHECK(reqs[1].path == "/latest/meta-data/spot/instance-action");
}

TEST_CASE("aws: without a token the GET goes as IMDSv1", "[preempt][watch][http]") {
  Server s([&](const Server::Request& r) -> Server::Response {
    if (r.method == "PUT") return {403, "Forbidden"};
    if (!r.header("x-aws-ec2-metadata-token").empty()) return {400, ""};
    return {200, R"({"action": "stop", "time": "2030-01-01T00:00:00Z"})"};
  });
  std::string detail;
  CHECK(preempt::poll_once(NoticeSource::kAws, s.base(), &detail));
  CHECK(detail.find("action=stop") == 0);
}

TEST_CASE("gcp: FALSE then TRUE, with the Metadata-Flavor header", "[preempt][watch][http]") {
  std::atomic<bool> preempted{false};
  Server s([&](const Server::Request& r) -> Server::Response {
    if (r.header("metadata-flavor") != "Google") return {403, "missing Metadata-Flavor"};
    if (r.path != "/computeMetadata/v1/instance/preempted") return {404, ""};
    return {200, preempted ? "TRUE" : "FALSE"};
  });
  const std::string url = s.base() + "/computeMetadata/v1/instance/preempted";
  CHECK_FALSE(preempt::poll_once(NoticeSource::kGcp, url));
  preempted = true;
  std::string detail;
  CHECK(preempt::poll_once(NoticeSource::kGcp, url, &detail));
  CHECK_FALSE(detail.empty());
  CHECK(s.requests().size() == 2);
}

TEST_CASE("redirects are never followed", "[preempt][watch][http]") {
  Server s([&](const Server::Request& r) -> Server::Response {
    if (r.path == "/start") return {302, "", {"Location: /elsewhere"}};
    return {200, "TRUE"};
  });
  CHECK_FALSE(preempt::poll_once(NoticeSource::kGcp, s.base() + "/start"));
  REQUIRE(s.requests().size() == 1);
}

TEST_CASE("azure: only a Preempt scheduled event is a notice", "[preempt][watch][http]") {
  std::atomic<int> phase{0};
  Server s([&](const Server::Request& r) -> Server::Response {
    if (r.header("metadata") != "true") return {400, ""};
    if (r.path != "/metadata/scheduledevents?api-version=2020-07-01") return {404, ""};
    if (phase == 0) return {200, R"({"DocumentIncarnation": 1, "Events": []})"};
    if (phase == 1)
      return {200, R"({"DocumentIncarnation": 2, "Events": [{"EventId": "A", "EventType": "Reboot"}]})"};
    return {200, R"({"DocumentIncarnation": 3, "Events": [{"EventId": "B", "EventType": "Freeze"},
                {"EventId": "C", "EventType": "Preempt", "NotBefore": "Mon, 19 Sep 2030 18:29:47 GMT"}]})"};
  });
  const std::string url = s.base() + "/metadata/scheduledevents?api-version=2020-07-01";
  CHECK_FALSE(preempt::poll_once(NoticeSource::kAzure, url));
  phase = 1;
  CHECK_FALSE(preempt::poll_once(NoticeSource::kAzure, url));
  phase = 2;
  std::string detail;
  CHECK(preempt::poll_once(NoticeSource::kAzure, url, &detail));
  CHECK(detail == "EventId=C NotBefore=Mon, 19 Sep 2030 18:29:47 GMT");
}

TEST_CASE("an unreachable endpoint is no notice, not an error", "[preempt][watch][http]") {
  int port;
  { Server s([](const Server::Request&) { return Server::Response{}; }); port = s.port(); }
  const std::string base = "http://127.0.0.1:" + std::to_string(port);  // closed now
  CHECK_FALSE(preempt::poll_once(NoticeSource::kAws, base));
  CHECK_FALSE(preempt::poll_once(NoticeSource::kGcp, base + "/x"));
  CHECK_FALSE(preempt::poll_once(NoticeSource::kAzure, base + "/x"));
}

TEST_CASE("NoticeWatcher polls gcp over HTTP and requests a stop", "[preempt][watch][http]") {
  preempt::reset();
  std::atomic<bool> preempted{false};
  Server s([&](const Server::Request&) -> Server::Response {
    return {200, preempted ? "TRUE" : "FALSE"};
  });
  {
    preempt::NoticeWatcher w(opts(NoticeSource::kGcp, s.base() + "/preempted", 0.05));
    CHECK(w.endpoint() == s.base() + "/preempted");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK_FALSE(preempt::stop_requested());
    CHECK(s.requests().size() >= 2);  // it keeps polling
    preempted = true;
    CHECK(wait_for_stop(3.0));
    CHECK(preempt::stop_reason().rfind("gcp notice: ", 0) == 0);
  }
  preempt::reset();
}

TEST_CASE("NoticeWatcher: the stop time is when the AWS notice was given, from the time it names",
          "[preempt][watch][http]") {
  preempt::reset();
  // The instance is taken 100 s from now: AWS gave its 120 s warning 20 s ago, before the
  // first poll saw it. The stop deadline counts from then.
  const double action = std::floor(wall_now()) + 100;
  const time_t t = static_cast<time_t>(action);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  Server s([&](const Server::Request& r) -> Server::Response {
    if (r.method == "PUT") return {200, "tok"};
    return {200, std::string(R"({"action": "terminate", "time": ")") + when + R"("})"};
  });
  {
    preempt::NoticeWatcher w(opts(NoticeSource::kAws, s.base(), 0.05));
    CHECK(wait_for_stop(3.0));
  }
  CHECK(preempt::stop_time() == Approx(action - 120).margin(1e-3));
  preempt::reset();
}

#endif  // DLRUN_HAVE_CURL

TEST_CASE("metadata answers: what is a notice, what is an error, what is garbage", "[preempt][watch]") {
  using preempt::parse_answer;
  const std::string url = "http://127.0.0.1:1/x";
  auto aws = [&](int status, const std::string& body) { return parse_answer(NoticeSource::kAws, status, body, url); };
  auto azure = [&](int status, const std::string& body) {
    return parse_answer(NoticeSource::kAzure, status, body, url);
  };
  CHECK(aws(200, R"({"action": "terminate", "time": "2026-11-23T10:00:00Z"})").notice);
  CHECK(aws(200, R"({"action": "terminate"})").detail == "action=terminate time=?");
  CHECK(aws(200, R"({"action": "terminate", "time": "2026-11-23T10:00:00Z"})").action_time == 1795428000.0);
  CHECK(aws(200, R"({"action": "terminate"})").action_time == 0);
  CHECK(aws(200, R"({"action": "stop", "time": "soon"})").action_time == 0);
  CHECK(azure(200, R"({"Events": [{"EventType": "Preempt", "NotBefore": "Mon, 23 Nov 2026 10:00:00 GMT"}]})")
            .action_time == 1795428000.0);
  CHECK(preempt::parse_notice_time("2026-11-23T10:00:00Z trailing") == 0);
  // Times that do not exist are no deadline (a lenient reader made 31 February 3 March).
  CHECK(preempt::parse_notice_time("2026-02-31T10:00:00Z") == 0);
  CHECK(preempt::parse_notice_time("2026-11-23T10:-1:00Z") == 0);
  CHECK(preempt::parse_notice_time("Tue, 31 Feb 2026 10:00:00 GMT") == 0);
  CHECK(preempt::parse_notice_time("Mon, 23 Nov 2026 10:00:60 GMT") == 0);
  CHECK(preempt::parse_notice_time("2026-11-23T11:00:00.5+01:00") == 1795428000.5);
  CHECK_FALSE(aws(404, "").notice);
  CHECK(aws(404, "").error.empty());
  CHECK(aws(500, "").error == url + ": HTTP 500");
  CHECK(aws(200, "not json").error == url + ": HTTP 200 without an \"action\" field");
  CHECK(parse_answer(NoticeSource::kGcp, 200, "TRUE\n", url).notice);
  CHECK_FALSE(parse_answer(NoticeSource::kGcp, 200, "FALSE", url).notice);
  CHECK(azure(200, R"({"Events": [{"EventType": "Reboot"}, {"EventType": "Preempt", "EventId": "e1"}]})").detail ==
        "EventId=e1 NotBefore=?");
  CHECK_FALSE(azure(200, R"({"Events": "x"})").notice);
  CHECK(azure(200, "[").error == url + ": HTTP 200 (not JSON)");
  // Nesting far deeper than any real answer is not built (nlohmann would copy it recursively).
  std::string deep = R"({"action": )";
  for (int i = 0; i < 100000; ++i) deep += "[";
  for (int i = 0; i < 100000; ++i) deep += "]";
  deep += "}";
  CHECK_NOTHROW(aws(200, deep));
  std::string deep_events = R"({"Events": [)";
  for (int i = 0; i < 100000; ++i) deep_events += "{\"a\":";
  deep_events += "1";
  for (int i = 0; i < 100000; ++i) deep_events += "}";
  deep_events += "]}";
  CHECK_FALSE(azure(200, deep_events).notice);
}
