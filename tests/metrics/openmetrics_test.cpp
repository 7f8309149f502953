// The live metrics endpoint: the gauges a scrape gets from the reported events, over real HTTP
// on 127.0.0.1, and the refusals a user meets (a port in use, an address that is not IPv4).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "base/clock.h"
#include "base/http.h"
#include "metrics/openmetrics.h"

using namespace dlrun;

namespace {

metrics::Event train_event(int64_t step, double loss) {
  metrics::Event e{"train", step, 1000.0};
  e.scalars = {{"loss", loss}, {"loss_avg", 9.0}, {"lr", 0.05}, {"samples_per_s", 1234.5}, {"data_wait_frac", 0.125}};
  e.fields = {{"epoch", 2}};
  return e;
}

http::Response scrape(int port, const std::string& path = "/metrics") {
  http::Request r;
  r.url = "http://127.0.0.1:" + std::to_string(port) + path;
  return http::perform(r);
}

}  // namespace

TEST_CASE("metrics endpoint: the last train record's values, per rank, in Prometheus text", "[metrics][endpoint]") {
  metrics::EndpointOptions o;
  o.rank = 3;
  metrics::Endpoint ep(o);
  REQUIRE(ep.port() > 0);
  CHECK(ep.body(2000).find("dlrun_step") == std::string::npos);  // nothing logged yet: no made-up step
  ep.write(train_event(40, 0.5));
  ep.write(train_event(50, 0.3125));
  const std::string b = ep.body(2000);
  CHECK(b.find("# TYPE dlrun_loss gauge\ndlrun_loss{rank=\"3\"} 0.3125\n") != std::string::npos);
  CHECK(b.find("dlrun_step{rank=\"3\"} 50\n") != std::string::npos);
  CHECK(b.find("dlrun_epoch{rank=\"3\"} 2\n") != std::string::npos);
  CHECK(b.find("dlrun_samples_per_second{rank=\"3\"} 1234.5\n") != std::string::npos);
  CHECK(b.find("dlrun_data_wait_fraction{rank=\"3\"} 0.125\n") != std::string::npos);
  CHECK(b.find("dlrun_learning_rate{rank=\"3\"} 0.05\n") != std::string::npos);
  CHECK(b.find("loss_avg") == std::string::npos);     // not a gauge
  CHECK(b.find("dlrun_gpu") == std::string::npos);     // no NVML reading: no GPU gauge
  CHECK(b.find("dlrun_cost") == std::string::npos);    // no price

  if (!http::available()) return;
  const http::Response r = scrape(ep.port());
  REQUIRE(r.status == 200);
  CHECK(r.header("content-type").rfind("text/plain; version=0.0.4", 0) == 0);
  CHECK(r.body.find("dlrun_loss{rank=\"3\"} 0.3125\n") != std::string::npos);
  CHECK(scrape(ep.port(), "/").status == 404);
  const int port = ep.port();
  ep.close();
  CHECK(scrape(port).status == 0);  // closed: nothing listens
}

TEST_CASE("metrics endpoint: checkpoints, work at risk and the cost at scrape time", "[metrics][endpoint]") {
  metrics::EndpointOptions o;
  metrics::Endpoint local(o);
  local.write({"start", 0, 100.0});
  CHECK(local.body(130).find("dlrun_work_at_risk_seconds{rank=\"0\"} 30\n") != std::string::npos);
  CHECK(local.body(130).find("dlrun_seconds_since_checkpoint") == std::string::npos);
  local.write({"checkpoint", 10, 150.0});
  local.write({"upload", 10, 170.0});
  std::string b = local.body(200);
  CHECK(b.find("dlrun_seconds_since_checkpoint{rank=\"0\"} 50\n") != std::string::npos);
  CHECK(b.find("dlrun_seconds_since_upload{rank=\"0\"} 30\n") != std::string::npos);
  CHECK(b.find("dlrun_work_at_risk_seconds{rank=\"0\"} 50\n") != std::string::npos);  // safe once on local disk
  local.write({"checkpoint", 20, 190.0});  // an async write queued, then failed: not a safe point after all
  local.write({"checkpoint_error", 20, 195.0});
  CHECK(local.body(200).find("dlrun_seconds_since_checkpoint{rank=\"0\"} 50\n") != std::string::npos);
  local.set_cost(36, 1000, 100);  // 36 an hour: 0.01 a second, for 1000 s before and 100 s now
  CHECK(local.body(200).find("dlrun_cost{rank=\"0\"} 11\n") != std::string::npos);

  o.remote = true;  // with checkpoint.remote, work is safe once uploaded
  metrics::Endpoint remote(o);
  remote.write({"start", 0, 100.0});
  remote.write({"checkpoint", 10, 150.0});
  CHECK(remote.body(200).find("dlrun_work_at_risk_seconds{rank=\"0\"} 100\n") != std::string::npos);
  remote.write({"upload", 10, 170.0});
  CHECK(remote.body(200).find("dlrun_work_at_risk_seconds{rank=\"0\"} 30\n") != std::string::npos);
}

TEST_CASE("metrics endpoint: a port in use and an address that is not IPv4 are refused at their keys",
          "[metrics][endpoint]") {
  metrics::EndpointOptions o;
  o.where = SourceLoc{"run.yaml", 7, 3};
  metrics::Endpoint first(o);
  o.port = first.port();
  try {
    metrics::Endpoint second(o);
    FAIL("a second endpoint listened on a port in use");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    CHECK(e.key() == "log.metrics_port");
    CHECK(e.loc().line == 7);
    CHECK(e.message().find("127.0.0.1:" + std::to_string(o.port)) != std::string::npos);
  }
  o.port = 0;
  o.address = "localhost";
  try {
    metrics::Endpoint bad(o);
    FAIL("listened on a name");
  } catch (const Error& e) {
    CHECK(e.key() == "log.metrics_address");
    CHECK(e.message().find("not an IPv4 address") != std::string::npos);
  }
}

TEST_CASE("metrics endpoint: a client that sends nothing is dropped and the next scrape is answered",
          "[metrics][endpoint]") {
  if (!http::available()) return;
  metrics::Endpoint ep(metrics::EndpointOptions{});
  ep.write(train_event(7, 1.5));
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(ep.port()));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  REQUIRE(::connect(silent, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  http::Request r;  // queued behind the silent client for up to 2 s
  r.url = "http://127.0.0.1:" + std::to_string(ep.port()) + "/metrics";
  r.timeout_ms = 30000;
  const http::Response resp = http::perform(r);
  ::close(silent);
  REQUIRE(resp.status == 200);
  CHECK(resp.body.find("dlrun_step{rank=\"0\"} 7\n") != std::string::npos);
}
