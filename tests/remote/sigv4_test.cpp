// AWS Signature Version 4 (src/remote/sigv4.h) against signatures botocore computes for the
// same requests: AWS's own example of a GET with a Range header, and the PUT with server-side
// encryption headers whose names prefix one another that libcurl 7.88's signer orders wrongly.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "remote/sigv4.h"

using namespace dlrun;

namespace {

const remote::Credentials kExample{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "", 0};
constexpr std::time_t k20130524 = 1369353600;  // 2013-05-24T00:00:00Z
const std::string kEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string authorization(const std::vector<std::string>& headers) {
  for (const auto& h : headers)
    if (h.rfind("Authorization: ", 0) == 0) return h.substr(15);
  return "";
}

}  // namespace

TEST_CASE("SigV4: AWS's example GET signs as AWS documents it", "[remote][s3]") {
  const auto h = remote::sigv4_headers("GET", "https://examplebucket.s3.amazonaws.com/test.txt",
                                       {"Range: bytes=0-9", "x-amz-content-sha256: " + kEmpty}, kEmpty, kExample,
                                       "us-east-1", "s3", k20130524);
  CHECK(h[0] == "Host: examplebucket.s3.amazonaws.com");
  CHECK(h[1] == "x-amz-date: 20130524T000000Z");
  CHECK(authorization(h) ==
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST_CASE("SigV4: headers are sorted by name, a name before the longer names it prefixes", "[remote][s3]") {
  // Given in the order libcurl 7.88 would sign them (as "name:value" lines): the service would
  // compute another signature.
  const auto h = remote::sigv4_headers(
      "PUT", "http://127.0.0.1:9000/bucket/runs/step-00000001/model.pt",
      {"x-amz-content-sha256: abc", "x-amz-server-side-encryption-aws-kms-key-id: k1",
       "x-amz-server-side-encryption-bucket-key-enabled: true", "x-amz-server-side-encryption:  aws:kms ",
       "Content-Type: text/plain"},
      "abc", kExample, "us-east-1", "s3", k20130524);
  CHECK(h[0] == "Host: 127.0.0.1:9000");
  CHECK(authorization(h) ==
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;x-amz-server-side-encryption;"
        "x-amz-server-side-encryption-aws-kms-key-id;x-amz-server-side-encryption-bucket-key-enabled, "
        "Signature=a51a70a6432fda851efa3f865f9cd595971a0ed894d689cd2375344ed93d91e2");
}

TEST_CASE("SigV4: a listing's canonical query is signed as the URL carries it", "[remote][s3]") {
  const auto h = remote::sigv4_headers("GET", "http://127.0.0.1:9000/bucket?encoding-type=url&list-type=2&prefix=runs%2F",
                                       {"x-amz-content-sha256: " + kEmpty}, kEmpty, kExample, "us-east-1", "s3",
                                       k20130524);
  CHECK_THAT(authorization(h),
             Catch::Matchers::EndsWith("Signature=aac7f071517fb6466416953841f8213bc767d71b08e44154b99ee9f132442c97"));
  for (const auto& line : h) CHECK(line.find(kExample.secret_key) == std::string::npos);
}
