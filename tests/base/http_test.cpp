// The HTTP client's controls that the S3 store relies on: a cancel flag that abandons a
// transfer under way (a stop that gave up waiting must not be held up by a hung upload),
// and an exception from a response sink ending the transfer and reaching the caller.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "base/clock.h"
#include "base/http.h"
#include "remote/s3.h"
#include "support/http_server.h"

using namespace dlrun;
using dlrun::test::HttpTestServer;

#ifdef DLRUN_HAVE_CURL

namespace {
/// A server whose answers hang until released (or 10 s pass).
struct HangingServer {
  std::atomic<bool> release{false};
  HttpTestServer server{[this](const HttpTestServer::Request&) {
    const double until = mono_now() + 10;
    while (!release && mono_now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return HttpTestServer::Response{200, "late", {}};
  }};
  ~HangingServer() { release = true; }
};
}  // namespace

TEST_CASE("a cancel flag abandons a transfer under way within about a second", "[http]") {
  HangingServer hang;
  std::atomic<bool> cancel{false};
  http::Request req;
  req.url = hang.server.base() + "/slow";
  req.timeout_ms = 0;
  req.cancel = &cancel;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel = true;
  });
  const double t0 = mono_now();
  const http::Response r = http::perform(req);
  const double took = mono_now() - t0;
  canceller.join();
  CHECK(r.cancelled);
  CHECK(r.status == 0);
  CHECK(r.error == "cancelled");
  CHECK(took < 3.0);  // the server would have answered after 10 s
}

TEST_CASE("a request with the cancel flag set is not sent at all", "[http]") {
  HttpTestServer server([](const HttpTestServer::Request&) { return HttpTestServer::Response{200, "ok", {}}; });
  std::atomic<bool> cancel{true};
  http::Request req;
  req.url = server.base() + "/x";
  req.cancel = &cancel;
  CHECK(http::perform(req).cancelled);
  CHECK(server.requests().empty());
  cancel = false;  // cleared: requests work again
  const http::Response ok = http::perform(req);
  CHECK(ok.status == 200);
  CHECK_FALSE(ok.cancelled);
}

TEST_CASE("an exception thrown by the response sink ends the transfer and reaches the caller", "[http]") {
  HttpTestServer server([](const HttpTestServer::Request&) {
    return HttpTestServer::Response{200, std::string(100000, 'x'), {}};
  });
  http::Request req;
  req.url = server.base() + "/big";
  size_t seen = 0;
  req.sink = [&](const char*, size_t n) -> bool {
    seen += n;
    throw std::runtime_error("more than the manifest promised");
  };
  CHECK_THROWS_WITH(http::perform(req), "more than the manifest promised");
  CHECK(seen > 0);
  CHECK(seen < 100000);
}

/// The S3 client's settings for a test server (path style), with `creds` (fixed keys by default).
static remote::S3Config s3_config_for(const HttpTestServer& server,
                                      std::shared_ptr<remote::CredentialProvider> creds = nullptr) {
  remote::S3Config cfg;
  cfg.endpoint = server.base();
  cfg.region = "us-east-1";
  cfg.path_style = true;
  cfg.credentials = creds ? std::move(creds) : remote::fixed_credentials({"AKIDEXAMPLE", "secret", "", 0}, "test");
  return cfg;
}

TEST_CASE("an S3 request cancelled through the client is an S3Error 'cancelled', not worth retrying", "[http][s3]") {
  HttpTestServer server([](const HttpTestServer::Request&) { return HttpTestServer::Response{200, "", {}}; });
  remote::S3Client client(s3_config_for(server), "bucket");
  std::atomic<bool> cancel{true};
  client.set_cancel(&cancel);
  try {
    client.remove("runs/x");
    FAIL("a cancelled request succeeded");
  } catch (const remote::S3Error& e) {
    CHECK(e.code() == "cancelled");
    CHECK_FALSE(e.transient());
  }
  CHECK(server.requests().empty());
  cancel = false;
  client.remove("runs/x");  // DELETE answered 200
  REQUIRE(server.requests().size() == 1);
  CHECK(server.requests()[0].method == "DELETE");
  CHECK(server.requests()[0].header("authorization").find("AWS4-HMAC-SHA256") == 0);
}

TEST_CASE("an S3 request refused with ExpiredToken is signed again with fresh credentials, once", "[http][s3]") {
  std::atomic<int> expired_answers{1};
  HttpTestServer server([&](const HttpTestServer::Request&) {
    if (expired_answers-- > 0)
      return HttpTestServer::Response{400, "<Error><Code>ExpiredToken</Code><Message>The provided token has expired."
                                           "</Message></Error>", {}};
    return HttpTestServer::Response{204, "", {}};
  });
  int fetched = 0;
  remote::S3Config cfg = s3_config_for(server, remote::refreshing_credentials(
      [&](const std::atomic<bool>*) {
        ++fetched;
        return remote::Credentials{"ASIA" + std::to_string(fetched), "secret", "token-" + std::to_string(fetched),
                                   wall_now() + 3600};
      },
      "test"));
  remote::S3Client client(cfg, "bucket");
  client.remove("runs/x");
  auto reqs = server.requests();
  REQUIRE(reqs.size() == 2);
  CHECK(reqs[0].header("authorization").find("Credential=ASIA1/") != std::string::npos);
  CHECK(reqs[0].header("x-amz-security-token") == "token-1");
  CHECK(reqs[1].header("authorization").find("Credential=ASIA2/") != std::string::npos);
  CHECK(reqs[1].header("x-amz-security-token") == "token-2");
  // Refused again with the fresh ones: reported, as worth retrying later (the source renews them).
  expired_answers = 2;
  try {
    client.remove("runs/y");
    FAIL("an expired token was accepted");
  } catch (const remote::S3Error& e) {
    CHECK(e.code() == "ExpiredToken");
    CHECK(e.transient());
  }
  CHECK(server.requests().size() == 4);
  // Fixed keys that expired stay expired: not retried, not worth retrying.
  cfg.credentials = remote::fixed_credentials({"AKID", "secret", "token", 0}, "test");
  remote::S3Client fixed(cfg, "bucket");
  expired_answers = 5;
  try {
    fixed.remove("runs/z");
    FAIL("an expired token was accepted");
  } catch (const remote::S3Error& e) {
    CHECK_FALSE(e.transient());
  }
  CHECK(server.requests().size() == 5);
}

TEST_CASE("a long error page keeps its status: a 503 from a proxy is worth retrying, not malformed", "[http][s3]") {
  HttpTestServer server([](const HttpTestServer::Request&) {
    return HttpTestServer::Response{503, "<html>" + std::string(200000, 'x') + "</html>", {}};
  });
  remote::S3Client client(s3_config_for(server), "bucket");
  try {
    client.remove("runs/x");
    FAIL("a 503 was taken for success");
  } catch (const remote::S3Error& e) {
    CHECK(e.status() == 503);
    CHECK(e.code() != remote::kMalformed);
    CHECK(e.transient());
  }
  // A 200 whose body passes the cap is cut short: never taken for an answer.
  http::Request req;
  req.url = server.base() + "/x";
  req.max_body = 1000;
  const auto r = http::perform(req);
  CHECK(r.too_large);
  CHECK(r.status == 503);
}

TEST_CASE("a 2xx answer over the size cap is refused as malformed, not read cut short", "[http][s3]") {
  HttpTestServer server([](const HttpTestServer::Request&) {
    return HttpTestServer::Response{200, "<ListBucketResult>" + std::string(65 << 20, ' ') + "</ListBucketResult>", {}};
  });
  remote::S3Client client(s3_config_for(server), "bucket");
  try {
    client.list("runs/");
    FAIL("a listing over 64 MiB was read");
  } catch (const remote::S3Error& e) {
    CHECK(e.code() == remote::kMalformed);
    CHECK_FALSE(e.transient());
    CHECK_THAT(e.what(), Catch::Contains("larger than 67108864 bytes"));
  }
}

#endif  // DLRUN_HAVE_CURL
