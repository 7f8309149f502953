// The AWS credential chain (src/remote/credentials.h): its order and its refusals, the shared
// files and profiles, web identity (STS), the container endpoint and IMDSv2 against fake
// services on 127.0.0.1, and refreshing ahead of expiry or on ExpiredToken (a fake clock).
// Against a real S3 implementation: tests/e2e/test_remote_credentials.py.
#include <catch2/catch.hpp>

#include <atomic>
#include <fstream>
#include <string>

#include "base/error.h"
#include "base/iso8601.h"
#include "remote/aws_profile.h"
#include "remote/credentials.h"
#include "remote/s3_error.h"
#include "support/aws_env.h"
#include "support/env.h"
#include "support/errors.h"
#include "support/http_server.h"
#include "support/scratch_dir.h"

using namespace dlrun;
using dlrun::testing::CleanAwsEnv;
using dlrun::testing::ScopedEnv;
using Server = dlrun::test::HttpTestServer;

namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string creds_json(const std::string& key, const std::string& expiration) {
  return "{\"Code\": \"Success\", \"AccessKeyId\": \"" + key + "\", \"SecretAccessKey\": \"s-" + key +
         "\", \"Token\": \"t-" + key + "\", \"Expiration\": \"" + expiration + "\"}";
}

}  // namespace

TEST_CASE("the chain: environment first, then the shared files' profile", "[remote][credentials]") {
  CleanAwsEnv clean;
  dlrun::testing::ScratchDir tmp;
  const std::string creds = tmp.path("credentials"), conf = tmp.path("config");
  write(creds, "# comment\n[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = s1\n"
               "[dev]\naws_access_key_id=AKIDDEV\naws_secret_access_key=SECRET-DEV\naws_session_token = tok\n");
  write(conf, "[default]\nregion = eu-west-1\n[profile dev]\nregion = ap-south-1\ns3 =\n  max_concurrent_requests = 4\n"
              "[profile wi]\nrole_arn = arn:aws:iam::1:role/r\nweb_identity_token_file = /t\n"
              "[profile proc]\ncredential_process = /bin/creds --token abc\n[profile sso]\nsso_session = corp\n");
  ScopedEnv f1("AWS_SHARED_CREDENTIALS_FILE", creds.c_str()), f2("AWS_CONFIG_FILE", conf.c_str());
  {
    ScopedEnv id("AWS_ACCESS_KEY_ID", "AKIDENV"), secret("AWS_SECRET_ACCESS_KEY", "senv");
    auto p = remote::credential_chain("us-east-1");
    CHECK(p->get().access_key == "AKIDENV");
    CHECK_FALSE(p->refreshable());
    CHECK(p->source().find("environment") != std::string::npos);
  }
  auto p = remote::credential_chain("us-east-1");
  CHECK(p->get().access_key == "AKIDDEFAULT");
  CHECK(remote::profile_region() == "eu-west-1");
  {
    ScopedEnv prof("AWS_PROFILE", "dev");
    p = remote::credential_chain("us-east-1");
    const auto c = p->get();
    CHECK(c.access_key == "AKIDDEV");
    CHECK(c.secret_key == "SECRET-DEV");
    CHECK(c.session_token == "tok");
    CHECK(p->source().find("profile dev") != std::string::npos);
    CHECK(p->source().find("SECRET-DEV") == std::string::npos);  // a source names no secret (mkdtemp writes no hyphen)
    CHECK(remote::profile_region() == "ap-south-1");
    // Temporary keys in the file (a session token): the store's ExpiredToken reads the file again,
    // so keys a helper rewrote there are taken without a restart.
    CHECK(p->refreshable());
    write(creds, "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = s1\n"
                 "[dev]\naws_access_key_id=AKIDNEW\naws_secret_access_key=SECRET-NEW\naws_session_token = tok2\n");
    CHECK(p->get().access_key == "AKIDDEV");  // (nothing expired yet: the keys held)
    p->expired(c);
    const auto fresh = p->get();
    CHECK(fresh.access_key == "AKIDNEW");
    CHECK(fresh.session_token == "tok2");
  }
  {  // static keys without a session token do not expire: fixed
    CHECK_FALSE(remote::credential_chain("us-east-1")->refreshable());
  }
  {
    ScopedEnv prof("AWS_PROFILE", "wi");
    CHECK(remote::credential_chain("us-east-1")->source().find("web identity") != std::string::npos);
  }
  {
    ScopedEnv prof("AWS_PROFILE", "proc");  // run at the first get() (process_credentials_test.cpp)
    const std::string source = remote::credential_chain("us-east-1")->source();
    CHECK(source.find("credential_process of profile proc") != std::string::npos);
    CHECK(source.find("/bin/creds") != std::string::npos);
    CHECK(source.find("abc") == std::string::npos);  // the program, not its arguments
  }
  {
    ScopedEnv prof("AWS_PROFILE", "sso");
    dlrun::testing::require_error([] { remote::credential_chain("us-east-1"); },
                                  {"profile sso", "sso_session", "export-credentials"});
  }
  {
    ScopedEnv prof("AWS_PROFILE", "nope");
    dlrun::testing::require_error([] { remote::credential_chain("us-east-1"); }, {"AWS_PROFILE=nope", "no such profile"});
  }
  {
    ScopedEnv id("AWS_ACCESS_KEY_ID", "AKIDONLY");
    dlrun::testing::require_error([] { remote::credential_chain("us-east-1"); },
                                  {"sets AWS_ACCESS_KEY_ID but not AWS_SECRET_ACCESS_KEY"});
  }
}

TEST_CASE("the chain with nothing configured and the metadata service disabled is refused", "[remote][credentials]") {
  CleanAwsEnv clean;
  dlrun::testing::require_error([] { remote::credential_chain("us-east-1"); },
                                {"no AWS credentials", "AWS_EC2_METADATA_DISABLED=true"});
  ScopedEnv role("AWS_ROLE_ARN", "arn:aws:iam::1:role/r");
  dlrun::testing::require_error([] { remote::credential_chain("us-east-1"); }, {"AWS_WEB_IDENTITY_TOKEN_FILE"});
}

TEST_CASE("web identity: STS AssumeRoleWithWebIdentity with the token file read at each fetch", "[remote][credentials]") {
  CleanAwsEnv clean;
  dlrun::testing::ScratchDir tmp;
  const std::string token = tmp.path("token");
  write(token, "jwt-one\n");
  int calls = 0;
  Server sts([&](const Server::Request& r) {
    ++calls;
    if (r.body.find("WebIdentityToken=jwt-two") != std::string::npos)
      return Server::Response{400, "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>expired jwt"
                                   "</Message></Error></ErrorResponse>"};
    return Server::Response{200, "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
                                 "<AccessKeyId>ASIA" + std::to_string(calls) + "</AccessKeyId><SecretAccessKey>s"
                                 "</SecretAccessKey><SessionToken>t</SessionToken><Expiration>2099-01-01T00:00:00Z"
                                 "</Expiration></Credentials></AssumeRoleWithWebIdentityResult>"
                                 "</AssumeRoleWithWebIdentityResponse>"};
  });
  ScopedEnv tf("AWS_WEB_IDENTITY_TOKEN_FILE", token.c_str()), role("AWS_ROLE_ARN", "arn:aws:iam::1:role/ckpt"),
      ep("AWS_ENDPOINT_URL_STS", sts.base().c_str());
  auto p = remote::credential_chain("eu-west-1");
  CHECK(p->refreshable());
  const auto c = p->get();
  CHECK(c.access_key == "ASIA1");
  CHECK(c.expires == dlrun::parse_iso8601("2099-01-01T00:00:00Z"));
  const auto reqs = sts.requests();
  REQUIRE(reqs.size() == 1);
  CHECK(reqs[0].method == "POST");
  CHECK(reqs[0].body.find("Action=AssumeRoleWithWebIdentity") != std::string::npos);
  CHECK(reqs[0].body.find("RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2Fckpt") != std::string::npos);
  CHECK(reqs[0].body.find("WebIdentityToken=jwt-one") != std::string::npos);
  CHECK(p->get().access_key == "ASIA1");  // not due: no new request
  CHECK(sts.requests().size() == 1);
  p->expired(c);  // the service said ExpiredToken: fetched again, with the token file as it is now
  write(token, "jwt-three\n");
  CHECK(p->get().access_key == "ASIA2");
  CHECK(sts.requests().back().body.find("WebIdentityToken=jwt-three") != std::string::npos);
  // STS refusing: the message names STS and its code, not the token.
  write(token, "jwt-two\n");
  p->expired(p->get());
  try {
    p->get();
    FAIL("an STS refusal was not reported");
  } catch (const remote::S3Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("InvalidIdentityToken") && Catch::Contains("STS"));
    CHECK_THAT(e.what(), !Catch::Contains("jwt-two"));
    CHECK(e.transient());  // EKS writes a fresh token: worth another try
  }
}

TEST_CASE("container credentials: the authorization token, and the hosts an http:// endpoint may name", "[remote][credentials]") {
  CleanAwsEnv clean;
  dlrun::testing::ScratchDir tmp;
  const std::string auth = tmp.path("auth");
  write(auth, "Bearer abc\n");
  Server agent([&](const Server::Request& r) {
    if (r.header("authorization") != "Bearer abc") return Server::Response{403, "{\"Message\": \"no\"}"};
    return Server::Response{200, creds_json("ASIACONT", "2099-01-01T00:00:00Z")};
  });
  const std::string url = agent.base() + "/v2/credentials/x";
  ScopedEnv full("AWS_CONTAINER_CREDENTIALS_FULL_URI", url.c_str()), tok("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", auth.c_str());
  auto p = remote::credential_chain("us-east-1");
  CHECK(p->get().access_key == "ASIACONT");
  CHECK(agent.requests().at(0).path == "/v2/credentials/x");
  write(auth, "Bearer wrong\n");
  p->expired(p->get());
  CHECK_THROWS_AS(p->get(), remote::S3Error);
  for (const char* far : {"http://198.51.100.7/creds", "http://127.0.0.1@evil.example/creds",
                          "http://127.evil.example/creds", "ftp://127.0.0.1/creds"}) {
    ScopedEnv e("AWS_CONTAINER_CREDENTIALS_FULL_URI", far);
    dlrun::testing::require_error([] { remote::credential_chain("us-east-1"); }, {"loopback", "169.254.170.2"});
  }
  ScopedEnv tls("AWS_CONTAINER_CREDENTIALS_FULL_URI", "https://creds.example/v1");  // https: any host
  CHECK(remote::credential_chain("us-east-1")->refreshable());
}

TEST_CASE("a malformed credentials answer is refused without quoting it: it may hold a secret", "[remote][credentials]") {
  CleanAwsEnv clean;
  // The answer breaks off inside its secret; JSON parsers quote the text they last read.
  Server agent([](const Server::Request&) {
    return Server::Response{200, "{\"AccessKeyId\": \"ASIAX\", \"SecretAccessKey\": \"s3cr3tSECRETs3cr3t"};
  });
  const std::string url = agent.base() + "/v2/credentials/x";
  ScopedEnv full("AWS_CONTAINER_CREDENTIALS_FULL_URI", url.c_str());
  try {
    remote::credential_chain("us-east-1")->get();
    FAIL("a truncated answer was taken");
  } catch (const remote::S3Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("not JSON"));
    CHECK_THAT(std::string(e.what()), !Catch::Contains("s3cr3t") && !Catch::Contains("SECRET"));
  }
}

TEST_CASE("the instance role through IMDSv2: a session token first, then the role, then its credentials", "[remote][credentials]") {
  CleanAwsEnv clean;
  std::atomic<bool> has_role{true};
  Server imds([&](const Server::Request& r) {
    if (r.method == "PUT" && r.path == "/latest/api/token") {
      if (r.header("x-aws-ec2-metadata-token-ttl-seconds").empty()) return Server::Response{400, ""};
      return Server::Response{200, "SESSION"};
    }
    if (r.header("x-aws-ec2-metadata-token") != "SESSION") return Server::Response{401, ""};
    if (r.path == "/latest/meta-data/iam/security-credentials/")
      return has_role ? Server::Response{200, "ckpt-role"} : Server::Response{404, ""};
    if (r.path == "/latest/meta-data/iam/security-credentials/ckpt-role")
      return Server::Response{200, creds_json("ASIAIMDS", "2099-01-01T00:00:00Z")};
    return Server::Response{404, ""};
  });
  ScopedEnv on("AWS_EC2_METADATA_DISABLED", nullptr), ep("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.base().c_str());
  auto p = remote::credential_chain("us-east-1");
  CHECK(p->source().find(imds.base()) != std::string::npos);
  CHECK(imds.requests().empty());  // asked only when the credentials are needed
  const auto c = p->get();
  CHECK(c.access_key == "ASIAIMDS");
  CHECK(c.session_token == "t-ASIAIMDS");
  const auto reqs = imds.requests();
  REQUIRE(reqs.size() == 3);
  CHECK(reqs[0].method == "PUT");
  has_role = false;
  auto q = remote::credential_chain("us-east-1");
  try {
    q->get();
    FAIL("an instance without a role gave credentials");
  } catch (const remote::S3Error& e) {
    CHECK(e.code() == remote::kNoCredentials);  // not worth retrying: a requeue would loop
    CHECK_THAT(e.what(), Catch::Contains("no IAM role"));
  }
}

TEST_CASE("temporary credentials are fetched again ahead of expiry, and kept while a refresh fails", "[remote][credentials]") {
  double now = 1000;
  int fetches = 0;
  bool fail = false;
  auto p = remote::refreshing_credentials(
      [&](const std::atomic<bool>*) {
        if (fail) throw remote::S3Error("the service did not answer", 0, "");
        ++fetches;
        return remote::Credentials{"K" + std::to_string(fetches), "s", "t", now + 60};  // a 60 s lifetime
      },
      "test", [&] { return now; }, 5);
  CHECK(p->get().access_key == "K1");
  now = 1044;  // under a quarter of the lifetime (15 s) before expiry: not yet
  CHECK(p->get().access_key == "K1");
  now = 1046;  // within it: fetched again
  CHECK(p->get().access_key == "K2");
  CHECK(fetches == 2);
  now = 1046 + 50;  // due again, and the service is down: the current ones while they last
  fail = true;
  CHECK(p->get().access_key == "K2");
  now += 10;  // expired, and the service still down: the failure is reported
  CHECK_THROWS_AS(p->get(), remote::S3Error);
  fail = false;
  CHECK(p->get().access_key == "K3");
  const auto k3 = p->get();
  p->expired(k3);  // refused as expired long before their time (revoked): fetched at once
  CHECK(p->get().access_key == "K4");
  p->expired(k3);  // a late refusal of the old ones (another thread's) leaves the new ones alone
  CHECK(p->get().access_key == "K4");
  CHECK(fetches == 4);
  auto fixed = remote::fixed_credentials({"A", "B", "", 0}, "fixed");
  fixed->expired(fixed->get());
  CHECK(fixed->get().access_key == "A");
}
