// The pieces of the S3 client that need no server: s3:// URLs, AWS's URI encoding (the
// canonical form libcurl signs as given), XML answers. The client against a real S3
// implementation: tests/e2e/test_remote.py; its settings: tests/config/remote_options_test.cpp.
#include <catch2/catch.hpp>

#include "base/error.h"
#include "remote/s3.h"
#include "support/env.h"
#include "support/errors.h"

using namespace dlrun;
using dlrun::testing::ScopedEnv;

TEST_CASE("s3:// URLs split into bucket and prefix", "[remote][s3]") {
  auto u = remote::parse_s3_url("s3://my-bucket/runs/exp1/");
  CHECK(u.bucket == "my-bucket");
  CHECK(u.prefix == "runs/exp1");
  CHECK(u.key("LATEST") == "runs/exp1/LATEST");
  CHECK(u.dir() == "runs/exp1/");
  CHECK(u.str("step-00000005") == "s3://my-bucket/runs/exp1/step-00000005");
  auto root = remote::parse_s3_url("s3://bucket.example");
  CHECK(root.prefix.empty());
  CHECK(root.key("LATEST") == "LATEST");
  CHECK(root.dir().empty());
  CHECK(root.str() == "s3://bucket.example");
  CHECK(remote::is_s3_url("s3://x"));
  CHECK_FALSE(remote::is_s3_url("/data/s3://x"));
  dlrun::testing::require_error([] { remote::parse_s3_url("http://bucket/x"); }, {"not an s3://BUCKET/PREFIX URL"});
  dlrun::testing::require_error([] { remote::parse_s3_url("s3://Bad_Bucket/x"); }, {"no valid bucket name"});
  dlrun::testing::require_error([] { remote::parse_s3_url("s3://ok-bucket/a//b"); }, {"empty path segment"});
}

TEST_CASE("URI encoding keeps unreserved characters and, in paths, slashes", "[remote][s3]") {
  CHECK(remote::uri_encode("runs/exp 1/step-00000005/model.pt", true) == "runs/exp%201/step-00000005/model.pt");
  CHECK(remote::uri_encode("a/b", false) == "a%2Fb");
  CHECK(remote::uri_encode("A-z_0.9~", false) == "A-z_0.9~");
  CHECK(remote::uri_encode("é+&=", false) == "%C3%A9%2B%26%3D");
}

TEST_CASE("XML answers: values, repeated blocks, entities", "[remote][s3]") {
  const std::string xml =
      "<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;1</NextContinuationToken>"
      "<Contents><Key>p/a&lt;b</Key><Size>12</Size></Contents><Contents><Key>p/&#233;</Key><Size>3</Size></Contents>"
      "<CommonPrefixes><Prefix>p/step-00000005/</Prefix></CommonPrefixes></ListBucketResult>";
  CHECK(remote::xml_value(xml, "IsTruncated") == "true");
  CHECK(remote::xml_value(xml, "NextContinuationToken") == "t&1");
  const auto items = remote::xml_blocks(xml, "Contents");
  REQUIRE(items.size() == 2);
  CHECK(remote::xml_value(items[0], "Key") == "p/a<b");
  CHECK(remote::xml_value(items[1], "Key") == "p/\xC3\xA9");
  CHECK(remote::xml_value(items[1], "Size") == "3");
  CHECK(remote::xml_value(xml, "Missing").empty());
  CHECK(remote::xml_blocks(xml, "CommonPrefixes").size() == 1);
}

TEST_CASE("which S3 failures are worth retrying", "[remote][s3]") {
  CHECK(remote::S3Error("x", 0, "").transient());
  CHECK(remote::S3Error("x", 503, "SlowDown").transient());
  CHECK(remote::S3Error("x", 500, "InternalError").transient());
  CHECK(remote::S3Error("x", 400, "RequestTimeout").transient());
  CHECK_FALSE(remote::S3Error("x", 403, "InvalidAccessKeyId").transient());
  CHECK_FALSE(remote::S3Error("x", 404, "NoSuchBucket").transient());
  CHECK_FALSE(remote::S3Error("x", 0, "cancelled").transient());  // abandoned on purpose
  CHECK_FALSE(remote::S3Error("x", 0, "local").transient());      // the local checkpoint is not there
}
