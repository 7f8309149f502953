// The live metrics endpoint: the gauges a scrape gets from the reported events, over real HTTP
// on 127.0.0.1; the refusals a user meets (a port in use, an address that is not IPv4); many
// scrapers at once, none held back by a slow or idle one, and the bound on open clients.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

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

/// A client connection by hand, to 127.0.0.1: the test decides when it speaks, and what.
class Conn {
 public:
  explicit Conn(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~Conn() { ::close(fd_); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  void send(const std::string& text) {
    REQUIRE(::send(fd_, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size()));
  }
  /// Everything the server sends until it closes the connection ("" when it closed it without
  /// a word), or nullopt when it has not closed it within `seconds`.
  std::optional<std::string> until_closed(double seconds) {
    std::string got;
    const double deadline = mono_now() + seconds;
    while (mono_now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return got;  // closed (or reset, as a drop with unread bytes is)
      got.append(buf, static_cast<size_t>(n));
    }
    return std::nullopt;
  }
  /// The server has said nothing on this connection and not closed it, at this moment.
  bool waiting() {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }

 private:
  int fd_;
};

const char kScrape[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: test\r\n\r\n";

bool answered(const std::optional<std::string>& reply, int64_t step) {
  return reply && reply->rfind("HTTP/1.1 200 OK\r\n", 0) == 0 &&
         reply->find("dlrun_step{rank=\"0\"} " + std::to_string(step) + "\n") != std::string::npos;
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

TEST_CASE("metrics endpoint: each split's last evaluation, labelled by split", "[metrics][endpoint]") {
  metrics::EndpointOptions o;
  metrics::Endpoint ep(o);
  CHECK(ep.body(2000).find("dlrun_eval") == std::string::npos);  // no evaluation yet
  for (const auto& [kind, acc] : {std::pair{"val", 0.5}, std::pair{"val", 0.75}, std::pair{"test", 0.625}}) {
    metrics::Event e{kind, 40};
    e.scalars = {{"accuracy", acc}, {"top5", 1.0}, {"loss", 0.25}};
    ep.write(e);
  }
  const std::string b = ep.body(2000);
  CHECK(b.find("# TYPE dlrun_eval_accuracy gauge\ndlrun_eval_accuracy{rank=\"0\",split=\"test\"} 0.625\n"
               "dlrun_eval_accuracy{rank=\"0\",split=\"val\"} 0.75\n") != std::string::npos);
  CHECK(b.find("dlrun_eval_top5_accuracy{rank=\"0\",split=\"val\"} 1\n") != std::string::npos);
  CHECK(b.find("dlrun_eval_loss{rank=\"0\",split=\"test\"} 0.25\n") != std::string::npos);
  CHECK(b.find("split=\"eval\"") == std::string::npos);
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
  local.set_cost([](double now) { return 0.01 * (1000 + now - 100); });  // the run's account says what it cost
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

// Timing-free: the proof is the order. A server that served one client at a time would first
// drop the idle client (after its 2 s deadline) and only then read the other's request.
TEST_CASE("metrics endpoint: a client that sends nothing holds no other scrape back, and is dropped",
          "[metrics][endpoint]") {
  metrics::Endpoint ep(metrics::EndpointOptions{});
  ep.write(train_event(7, 1.5));
  Conn idle(ep.port());
  Conn scraper(ep.port());
  scraper.send(kScrape);
  CHECK(answered(scraper.until_closed(30), 7));
  CHECK(idle.waiting());  // answered while the idle client was still open, not after it was dropped
  CHECK(idle.until_closed(30) == std::string());  // dropped at its deadline, unanswered
}

// Each client sends half its request, then, newest first, the rest: each answer must come while
// every older client still waits with half a request. One client at a time would answer none of
// them before the oldest's deadline (2 s each, in turn).
TEST_CASE("metrics endpoint: many clients at once, each answered when its own request is whole",
          "[metrics][endpoint]") {
  metrics::Endpoint ep(metrics::EndpointOptions{});
  ep.write(train_event(11, 0.5));
  std::vector<std::unique_ptr<Conn>> clients;
  const std::string request = kScrape;
  for (int i = 0; i < 12; ++i) {
    clients.push_back(std::make_unique<Conn>(ep.port()));
    clients.back()->send(request.substr(0, 9));
  }
  for (size_t i = clients.size(); i-- > 0;) {
    clients[i]->send(request.substr(9));
    INFO("client " << i << " (0: the oldest)");
    CHECK(answered(clients[i]->until_closed(10), 11));
    if (i > 0) CHECK(clients[0]->waiting());
  }
}

TEST_CASE("metrics endpoint: past the bound on open clients the oldest idle one is dropped; close() ends the rest",
          "[metrics][endpoint]") {
  metrics::EndpointOptions o;
  o.max_clients = 3;
  o.client_timeout_s = 600;  // no client reaches its deadline here: a drop is the bound's
  metrics::Endpoint ep(o);
  ep.write(train_event(5, 0.25));
  Conn a(ep.port()), b(ep.port()), c(ep.port());
  Conn d(ep.port());  // the fourth: the oldest, a, goes
  CHECK(a.until_closed(30) == std::string());
  CHECK(b.waiting());
  CHECK(c.waiting());
  CHECK(d.waiting());
  Conn e(ep.port());  // b goes; the new client is served
  e.send(kScrape);
  CHECK(answered(e.until_closed(30), 5));
  CHECK(b.until_closed(30) == std::string());
  c.send(kScrape);  // a client kept past the bound is served too
  CHECK(answered(c.until_closed(30), 5));
  CHECK(d.waiting());
  ep.close();  // promptly, with a client still open
  CHECK(d.until_closed(30) == std::string());
}
