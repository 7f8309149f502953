// A stop cancels a credential fetch under way (src/remote/credentials.h, CredentialProvider::get):
// a signed request whose credentials are due waits on STS, the container agent or the instance
// metadata service, and a stop waiting on an upload must not wait out their timeouts (15 s for
// STS). The fake services on 127.0.0.1 hold their answer until the test releases it, so nothing
// here depends on how fast the machine is: the fetch is cancelled while the service is known
// to hold the request.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "base/clock.h"
#include "remote/credentials.h"
#include "remote/s3.h"
#include "remote/s3_error.h"
#include "support/aws_env.h"
#include "support/env.h"
#include "support/http_server.h"
#include "support/scratch_dir.h"
#include "support/stop_during.h"

using namespace dlrun;
using dlrun::testing::CleanAwsEnv;
using dlrun::testing::ScopedEnv;
using dlrun::testing::get_with_stop;
using Server = dlrun::test::HttpTestServer;

namespace {

/// A credential service that holds the answers `held` picks (all by default) while `hold` is
/// set (at most a minute), and counts the requests that reached it.
struct HeldService {
  using Answer = std::function<Server::Response(const Server::Request&, int)>;
  explicit HeldService(Answer answer, std::function<bool(const Server::Request&)> held = {})
      : server([this, answer, held](const Server::Request& r) {
          const int n = ++requests;
          for (int waited = 0; hold && (!held || held(r)) && waited < 60000; waited += 10)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          return answer(r, n);
        }) {}
  /// Blocks until `n` requests have arrived (the fetch is then under way).
  void await(int n) const {
    while (requests < n) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::atomic<bool> hold{true};
  std::atomic<int> requests{0};
  Server server;  // last: its thread stops before the counters go
};

/// A stop while `service` holds the fetch's `n`-th request: kCancelled, promptly, naming
/// `what`; then, released, the next get() fetches anew and gets `next_key`.
void check_stopped_fetch(remote::CredentialProvider& p, HeldService& service, int n, const std::string& what,
                         const std::string& next_key) {
  const auto o = get_with_stop(p, [&] { return service.requests >= n; });
  service.hold = false;
  INFO(o.message);
  CHECK(o.code == remote::kCancelled);
  CHECK(o.message.find(what) != std::string::npos);
  CHECK(o.seconds < 2.5);  // the service's own timeout is 3 s
  CHECK(p.get().access_key == next_key);  // nothing kept from the cancelled fetch
}

std::string json_answer(int n) {
  return "{\"Code\": \"Success\", \"AccessKeyId\": \"ASIA" + std::to_string(n) +
         "\", \"SecretAccessKey\": \"s\", \"Token\": \"t\", \"Expiration\": \"2099-01-01T00:00:00Z\"}";
}

std::string sts_answer(int n) {
  return "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>ASIA" +
         std::to_string(n) + "</AccessKeyId><SecretAccessKey>s</SecretAccessKey><SessionToken>t</SessionToken>"
         "<Expiration>2099-01-01T00:00:00Z</Expiration></Credentials></AssumeRoleWithWebIdentityResult>"
         "</AssumeRoleWithWebIdentityResponse>";
}

}  // namespace

TEST_CASE("a stop cancels the STS fetch a signed request waits on, and keeps nothing from it", "[remote][credentials]") {
  CleanAwsEnv clean;
  dlrun::testing::ScratchDir tmp;
  const std::string token = tmp.write("token", "jwt\n");
  HeldService sts([](const Server::Request&, int n) { return Server::Response{200, sts_answer(n)}; });
  Server s3([](const Server::Request&) { return Server::Response{204, ""}; });
  ScopedEnv tf("AWS_WEB_IDENTITY_TOKEN_FILE", token.c_str()), role("AWS_ROLE_ARN", "arn:aws:iam::1:role/ckpt"),
      ep("AWS_ENDPOINT_URL_STS", sts.server.base().c_str());
  remote::S3Config cfg;
  cfg.endpoint = s3.base();
  cfg.region = "us-east-1";
  cfg.path_style = true;
  cfg.credentials = remote::credential_chain("us-east-1");
  remote::S3Client client(cfg, "bucket");
  std::atomic<bool> stop{false};
  client.set_cancel(&stop);
  std::thread stopper([&] {
    sts.await(1);  // STS holds the fetch: now the stop comes
    stop = true;
  });
  const double start = mono_now();
  std::string code = "(none)", message;
  try {
    client.remove("runs/x");
  } catch (const remote::S3Error& e) {
    code = e.code();
    message = e.what();
  } catch (const std::exception& e) {
    message = e.what();
  }
  const double took = mono_now() - start;
  stopper.join();
  sts.hold = false;
  INFO(message);
  CHECK(code == remote::kCancelled);
  CHECK_FALSE(remote::S3Error(message, 0, code).transient());  // the uploader does not retry it
  CHECK(message.find("STS") != std::string::npos);
  CHECK(took < 10);  // STS's own timeout is 15 s; a cancel lands within about a second
  CHECK(s3.requests().empty());
  // Nothing was kept from the cancelled fetch: the next request fetches anew and signs with it.
  stop = false;
  client.remove("runs/x");
  CHECK(sts.requests == 2);
  REQUIRE(s3.requests().size() == 1);
  CHECK(s3.requests()[0].header("authorization").find("Credential=ASIA2/") != std::string::npos);
}

TEST_CASE("a stop cancels a fetch from the container agent or the instance metadata service", "[remote][credentials]") {
  CleanAwsEnv clean;
  SECTION("container agent") {
    HeldService agent([](const Server::Request&, int n) { return Server::Response{200, json_answer(n)}; });
    const std::string url = agent.server.base() + "/v2/credentials/x";
    ScopedEnv full("AWS_CONTAINER_CREDENTIALS_FULL_URI", url.c_str());
    check_stopped_fetch(*remote::credential_chain("us-east-1"), agent, 1, "container credentials", "ASIA2");
  }
  SECTION("instance metadata service, cancelled at its second request") {
    HeldService imds(
        [](const Server::Request& r, int n) {
          if (r.method == "PUT") return Server::Response{200, "SESSION"};
          if (r.path == "/latest/meta-data/iam/security-credentials/") return Server::Response{200, "role"};
          return Server::Response{200, json_answer(n)};
        },
        [](const Server::Request& r) { return r.path == "/latest/meta-data/iam/security-credentials/"; });
    ScopedEnv on("AWS_EC2_METADATA_DISABLED", nullptr), ep("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.server.base().c_str());
    // Stopped while the role list is held (the session token came back); then fetched anew:
    // token, role, credentials (requests 3-5).
    check_stopped_fetch(*remote::credential_chain("us-east-1"), imds, 2, "instance metadata service", "ASIA5");
  }
}

TEST_CASE("a stop ends the wait for another thread's fetch; valid credentials are not held up by a refresh",
          "[remote][credentials]") {
  std::atomic<bool> release{false}, entered{false};
  std::atomic<int> fetches{0};
  double now = 1000;
  auto p = remote::refreshing_credentials(
      [&](const std::atomic<bool>*) {  // a fetch that ignores its cancel flag: only `release` ends it
        const int n = ++fetches;
        entered = true;
        while (n > 1 && !release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return remote::Credentials{"K" + std::to_string(n), "s", "t", now + 60};
      },
      "test", [&] { return now; }, 5);
  CHECK(p->get().access_key == "K1");
  now = 1050;  // due (within a quarter of the lifetime) but still valid
  entered = false;
  std::thread refresher([&] { CHECK(p->get().access_key == "K2"); });
  while (!entered) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(p->get().access_key == "K1");  // while K2 is fetched, K1 is still good: no wait
  now = 1070;  // K1 has expired: a caller must wait for the fetch under way, or for its stop
  const double waiting_since = mono_now();
  CHECK(get_with_stop(*p, [&] { return mono_now() > waiting_since + 0.2; }).code == remote::kCancelled);
  release = true;
  refresher.join();
  CHECK(p->get().access_key == "K2");
  CHECK(fetches == 2);
}
