// checkpoint.remote_* and the AWS environment as the S3 client's settings (src/config/remote_options.h).
#include <catch2/catch.hpp>

#include "base/error.h"
#include "config/remote_options.h"
#include "support/capture.h"
#include "support/env.h"
#include "support/errors.h"
#include "support/scratch_dir.h"

using namespace dlrun;
using dlrun::testing::ScopedEnv;

TEST_CASE("the S3 configuration comes from the options and the environment", "[remote][s3]") {
  ScopedEnv id("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"), secret("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
      token("AWS_SESSION_TOKEN", nullptr), region("AWS_REGION", "eu-west-3"), region2("AWS_DEFAULT_REGION", nullptr),
      ep("AWS_ENDPOINT_URL_S3", nullptr), ep2("AWS_ENDPOINT_URL", nullptr);
  CheckpointOptions o;
  auto c = config::s3_config(o);
  CHECK(c.region == "eu-west-3");
  CHECK(c.endpoint == "https://s3.eu-west-3.amazonaws.com");
  CHECK_FALSE(c.path_style);  // AWS: the bucket in the host name
  CHECK(c.part_bytes == 512ull << 20);
  o.remote_endpoint = "http://127.0.0.1:9000/";
  o.remote_region = "auto-r2";
  c = config::s3_config(o);
  CHECK(c.endpoint == "http://127.0.0.1:9000");
  CHECK(c.region == "auto-r2");
  CHECK(c.path_style);  // any other endpoint: the bucket in the path, unless asked otherwise
  o.remote_addressing = S3Addressing::kVirtual;
  CHECK_FALSE(config::s3_config(o).path_style);
  {
    ScopedEnv env_ep("AWS_ENDPOINT_URL_S3", "https://storage.googleapis.com");
    CheckpointOptions g;
    CHECK(config::s3_config(g).endpoint == "https://storage.googleapis.com");
  }
  // Credentials come from AWS's chain (tests/remote/credentials_test.cpp), never from the config.
  CHECK(config::s3_config(o).credentials->source().find("environment") != std::string::npos);
  ScopedEnv no_secret("AWS_SECRET_ACCESS_KEY", nullptr);
  dlrun::testing::require_error([&] { config::s3_config(o); }, {"sets AWS_ACCESS_KEY_ID but not AWS_SECRET_ACCESS_KEY"});
}

TEST_CASE("TLS, plain http and server-side encryption settings reach the S3 client", "[remote][s3]") {
  ScopedEnv id("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"), secret("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
      token("AWS_SESSION_TOKEN", nullptr), ep("AWS_ENDPOINT_URL_S3", nullptr), ep2("AWS_ENDPOINT_URL", nullptr),
      bundle("AWS_CA_BUNDLE", nullptr);
  dlrun::testing::ScratchDir tmp;
  const std::string ca = tmp.write("ca.pem", "-----BEGIN CERTIFICATE-----\n");
  CheckpointOptions o;
  auto c = config::s3_config(o);
  CHECK(c.ca_file.empty());  // the system's store
  CHECK(c.tls_min == http::Tls::k1_2);
  CHECK(c.sse.algorithm.empty());
  // Plain http: to this machine, or where the user accepts the risk by name.
  for (const char* local : {"http://127.0.0.1:9000", "http://localhost:9000", "http://[::1]:9000", "https://minio.lan"}) {
    o.remote_endpoint = local;
    CHECK(config::s3_config(o).endpoint == local);
  }
  o.remote_endpoint = "http://minio.lan:9000";
  dlrun::testing::require_error([&] { config::s3_config(o); },
                                {"checkpoint.remote_endpoint: http://minio.lan:9000 is plain http to another host",
                                 "checkpoint.remote_allow_unencrypted_http: true"});
  o.remote_endpoint = "http://127.0.0.1.example.com";  // a name, not a loopback address
  dlrun::testing::require_error([&] { config::s3_config(o); }, {"is plain http to another host"});
  o.remote_allow_unencrypted_http = true;
  CHECK(config::s3_config(o).endpoint == "http://127.0.0.1.example.com");
  {
    ScopedEnv env_ep("AWS_ENDPOINT_URL", "http://10.0.0.5:9000");
    CheckpointOptions e;
    dlrun::testing::require_error([&] { config::s3_config(e); }, {"AWS_ENDPOINT_URL: http://10.0.0.5:9000 is plain http"});
  }
  // The CAs: the key, else AWS_CA_BUNDLE as the SDKs read it; a file that is not there is exit 2.
  o.remote_ca_bundle = ca;
  CHECK(config::s3_config(o).ca_file == ca);
  o.remote_ca_bundle.clear();
  {
    ScopedEnv env_ca("AWS_CA_BUNDLE", ca.c_str());
    CHECK(config::s3_config(o).ca_file == ca);
    o.remote_ca_bundle = "/nonexistent/ca.pem";  // the key wins
    dlrun::testing::require_error([&] { config::s3_config(o); }, {"checkpoint.remote_ca_bundle: /nonexistent/ca.pem is not a readable file"});
    o.remote_ca_bundle.clear();
  }
  {
    ScopedEnv env_ca("AWS_CA_BUNDLE", "/nonexistent/ca.pem");
    dlrun::testing::require_error([&] { config::s3_config(o); }, {"AWS_CA_BUNDLE: /nonexistent/ca.pem is not a readable file"});
  }
  o.remote_tls_min = TlsFloor::k1_3;
  CHECK(config::s3_config(o).tls_min == http::Tls::k1_3);
  o.remote_sse = ServerSideEncryption::kKms;
  o.remote_sse_kms_key_id = "alias/ckpt";
  o.remote_sse_bucket_key = true;
  c = config::s3_config(o);
  CHECK(c.sse.algorithm == "aws:kms");
  CHECK(c.sse.kms_key_id == "alias/ckpt");
  CHECK(c.sse.bucket_key);
  o.remote_sse = ServerSideEncryption::kS3;
  CHECK(config::s3_config(o).sse.algorithm == "AES256");
}

TEST_CASE("the run log says when S3 traffic is unencrypted, once per endpoint", "[remote][s3]") {
  ScopedEnv id("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE"), secret("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
      token("AWS_SESSION_TOKEN", nullptr), ep("AWS_ENDPOINT_URL_S3", nullptr), ep2("AWS_ENDPOINT_URL", nullptr),
      bundle("AWS_CA_BUNDLE", nullptr);
  CheckpointOptions o;
  // Another host, accepted by name (nothing is contacted: s3_config only makes the settings).
  o.remote_endpoint = "http://unencrypted-log-test.example:9000";
  o.remote_allow_unencrypted_http = true;
  std::string err = dlrun::testing::capture_stderr([&] { config::s3_config(o); });
  CHECK_THAT(err, Catch::Contains("S3 at http://unencrypted-log-test.example:9000: plain http") &&
                      Catch::Contains("travel UNENCRYPTED") && Catch::Contains("checkpoint.remote_allow_unencrypted_http"));
  CHECK(dlrun::testing::capture_stderr([&] { config::s3_config(o); }).find("UNENCRYPTED") == std::string::npos);
  // https: nothing to say.
  o.remote_endpoint = "https://minio.example:9000";
  CHECK(dlrun::testing::capture_stderr([&] { config::s3_config(o); }).find("plain http") == std::string::npos);
}
