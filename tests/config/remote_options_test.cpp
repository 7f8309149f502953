// checkpoint.remote_* and the AWS environment as the S3 client's settings (src/config/remote_options.h).
#include <catch2/catch.hpp>

#include "base/error.h"
#include "config/remote_options.h"
#include "support/env.h"
#include "support/errors.h"

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
