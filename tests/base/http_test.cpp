// The HTTP client's controls that the S3 store relies on: a cancel flag that abandons a
// transfer under way (a stop that gave up waiting must not be held up by a hung upload),
// and an exception from a response sink ending the transfer and reaching the caller; a server
// TLS refuses told apart from a network that fails (the first is exit 2, the second a retry).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#ifdef DLRUN_HAVE_CURL
#include <curl/curl.h>
#endif

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


TEST_CASE("TLS refusing the server is told apart from a network that fails", "[http]") {
  // The certificate: an unknown CA, expired, another host's name -- all CURLE_PEER_FAILED_VERIFICATION.
  CHECK(http::tls_refusal(CURLE_PEER_FAILED_VERIFICATION, "SSL certificate problem: certificate has expired"));
  CHECK(http::tls_refusal(CURLE_SSL_CACERT_BADFILE, "error setting certificate file: /x.pem"));
  // A handshake that fails over the version is refused; one cut by the network is not.
  CHECK(http::tls_refusal(CURLE_SSL_CONNECT_ERROR, "OpenSSL/3.0.19: error:0A00042E:SSL routines::tlsv1 alert protocol version"));
  CHECK(http::tls_refusal(CURLE_SSL_CONNECT_ERROR, "error:0A00010B:SSL routines::wrong version number"));  // https to http
  CHECK_FALSE(http::tls_refusal(CURLE_SSL_CONNECT_ERROR, "OpenSSL SSL_connect: SSL_ERROR_SYSCALL in connection to x:443"));
  CHECK_FALSE(http::tls_refusal(CURLE_SSL_CONNECT_ERROR, "Connection reset by peer"));
  CHECK_FALSE(http::tls_refusal(CURLE_COULDNT_CONNECT, "Failed to connect to 127.0.0.1 port 9: Connection refused"));
  CHECK_FALSE(http::tls_refusal(CURLE_OPERATION_TIMEDOUT, "Operation timed out"));
  CHECK(http::url_host("https://s3.eu-west-1.amazonaws.com/bucket?x") == "s3.eu-west-1.amazonaws.com");
  CHECK(http::url_host("http://127.0.0.1:9000") == "127.0.0.1");
  CHECK(http::url_host("http://[::1]:9000/x") == "[::1]");
  CHECK(http::url_host("http://user:pw@127.0.0.1/") == "");  // no user:password@ tricks
  CHECK(http::url_host("127.0.0.1") == "");
  for (const char* local : {"127.0.0.1", "127.1.2.3", "localhost", "LocalHost", "[::1]"}) CHECK(http::is_loopback_host(local));
  for (const char* other : {"127.0.0.1.nip.io", "10.0.0.1", "[::2]", "", "s3.amazonaws.com", "127.0.0.1a"})
    CHECK_FALSE(http::is_loopback_host(other));
}

namespace {
/// A plain HTTP server that answers every connection at once, before reading anything (a
/// TLS ClientHello too), and hangs up: an https endpoint that is really http.
struct EagerHttpServer {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
  std::atomic<bool> stop{false};
  std::thread thread;
  EagerHttpServer() {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(fd, 4) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port = ntohs(addr.sin_port);
    thread = std::thread([this] {
      static const char answer[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      while (!stop) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0) continue;
        const int c = ::accept(fd, nullptr, nullptr);
        if (c < 0) continue;
        (void)::send(c, answer, sizeof(answer) - 1, MSG_NOSIGNAL);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the client read it first
        ::close(c);
      }
    });
  }
  ~EagerHttpServer() {
    stop = true;
    thread.join();
    ::close(fd);
  }
};
}  // namespace

TEST_CASE("an https request to a plain http server is refused as TLS, not retried as a store that is down", "[http][s3]") {
  EagerHttpServer server;
  HttpTestServer unused([](const HttpTestServer::Request&) { return HttpTestServer::Response{200, "", {}}; });
  remote::S3Config cfg = s3_config_for(unused);
  cfg.endpoint = "https://127.0.0.1:" + std::to_string(server.port);
  remote::S3Client client(cfg, "bucket");
  try {
    client.list("runs/");
    FAIL("an https request to an http server succeeded");
  } catch (const remote::S3Error& e) {
    INFO(e.what());
    CHECK_FALSE(e.transient());
    CHECK(e.code() == remote::kTlsRefused);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("TLS refused the service at " + cfg.endpoint + ": "));
  }
}

#endif  // DLRUN_HAVE_CURL
