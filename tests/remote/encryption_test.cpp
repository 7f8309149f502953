// Server-side encryption through the S3 client (src/remote/s3.h), against a fake service on
// 127.0.0.1: what is asked of every object written (single PUTs, each multipart upload, copies;
// never of the parts themselves, which S3 refuses), the service's answer checked to say it was
// applied, and an AccessDenied naming the permission the request needed. Against moto's S3 and
// KMS: tests/e2e/test_remote_security.py.
#include <catch2/catch.hpp>

#include <mutex>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "remote/s3.h"
#include "support/http_server.h"
#include "support/scratch_dir.h"

using namespace dlrun;
using Server = dlrun::test::HttpTestServer;

namespace {

remote::S3Config config_for(const Server& server, remote::Encryption sse) {
  remote::S3Config cfg;
  cfg.endpoint = server.base();
  cfg.region = "us-east-1";
  cfg.path_style = true;
  cfg.part_bytes = 5 << 20;
  cfg.credentials = remote::fixed_credentials({"AKIDEXAMPLE", "secret", "", 0}, "test");
  cfg.sse = std::move(sse);
  return cfg;
}

const remote::Encryption kKms{remote::kSseKms, "1234abcd-12ab-34cd-56ef-1234567890ab", true};

/// A service that applies what each request asks for and says so, as S3 does; `ignore` makes
/// it one that drops the headers (some S3-compatible services do).
struct Service {
  bool ignore = false;
  std::mutex mu;
  std::vector<Server::Request> seen;
  Server::Response answer(const Server::Request& r) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(r);
    std::vector<std::string> h;
    if (!ignore && !r.header("x-amz-server-side-encryption").empty()) {
      h.push_back("x-amz-server-side-encryption: " + r.header("x-amz-server-side-encryption"));
      if (!r.header("x-amz-server-side-encryption-aws-kms-key-id").empty())  // AWS answers with the key's ARN
        h.push_back("x-amz-server-side-encryption-aws-kms-key-id: arn:aws:kms:us-east-1:123456789012:key/" +
                    r.header("x-amz-server-side-encryption-aws-kms-key-id"));
    }
    if (r.method == "POST" && r.path.find("?uploads") != std::string::npos)
      return {200, "<InitiateMultipartUploadResult><UploadId>U1</UploadId></InitiateMultipartUploadResult>", h};
    if (r.method == "PUT" && r.path.find("partNumber=") != std::string::npos) {
      // A part is stored with its upload's encryption: S3 reports it on each part.
      if (!ignore) h = {"x-amz-server-side-encryption: aws:kms", "x-amz-server-side-encryption-aws-kms-key-id: " + kKms.kms_key_id};
      h.push_back("ETag: \"e\"");
      return {200, "", h};
    }
    if (r.method == "POST") return {200, "<CompleteMultipartUploadResult><ETag>x</ETag></CompleteMultipartUploadResult>",
                                    ignore ? std::vector<std::string>{} : std::vector<std::string>{"x-amz-server-side-encryption: aws:kms"}};
    if (!r.header("x-amz-copy-source").empty()) return {200, "<CopyObjectResult><ETag>c</ETag></CopyObjectResult>", h};
    return {200, "", h};
  }
};

}  // namespace

TEST_CASE("every object written asks for the server-side encryption configured, parts excepted", "[remote][s3]") {
  dlrun::testing::ScratchDir tmp;
  const std::string big(11 << 20, 'x');  // 3 parts of 5 MiB
  const std::string path = tmp.write("model.pt", big);
  Service svc;
  Server s3([&](const Server::Request& r) { return svc.answer(r); });
  remote::S3Client client(config_for(s3, kKms), "bucket");
  client.put_bytes("runs/LATEST", "step-00000001\n", "text/plain");
  client.put_file("runs/model.pt", path, big.size(), sha256_hex(big.data(), big.size()));
  client.copy("runs/LATEST", "runs/LATEST.copy", 14);
  std::lock_guard<std::mutex> lock(svc.mu);
  int asked = 0, parts = 0;
  for (const auto& r : svc.seen) {
    const bool part = r.path.find("partNumber=") != std::string::npos;
    const bool complete = r.method == "POST" && r.path.find("uploadId=") != std::string::npos;
    INFO(r.method << " " << r.path);
    if (part || complete) {  // S3 refuses SSE-KMS headers on a part: the upload's own apply
      CHECK(r.header("x-amz-server-side-encryption").empty());
      parts += part;
      continue;
    }
    ++asked;
    CHECK(r.header("x-amz-server-side-encryption") == "aws:kms");
    CHECK(r.header("x-amz-server-side-encryption-aws-kms-key-id") == kKms.kms_key_id);
    CHECK(r.header("x-amz-server-side-encryption-bucket-key-enabled") == "true");
    // Signed, like every header dlrun sends: a proxy cannot strip or change them unseen.
    CHECK(r.header("authorization").find("x-amz-server-side-encryption") != std::string::npos);
  }
  CHECK(asked == 3);  // the PUT, the multipart upload's start, the copy
  CHECK(parts == 3);
}

TEST_CASE("a service that does not apply the encryption asked for is refused, not retried", "[remote][s3]") {
  Service svc;
  svc.ignore = true;
  Server s3([&](const Server::Request& r) { return svc.answer(r); });
  remote::S3Client client(config_for(s3, {remote::kSseS3, "", false}), "bucket");
  try {
    client.put_bytes("runs/LATEST", "x", "text/plain");
    FAIL("an unencrypted PUT passed");
  } catch (const remote::S3Error& e) {
    CHECK(e.code() == remote::kNotEncrypted);
    CHECK_FALSE(e.transient());
    CHECK_THAT(e.what(), Catch::Matchers::Contains("server-side encryption none, not the AES256 asked for"));
  }
  // Nothing asked: nothing sent, nothing checked (the bucket's default applies).
  remote::S3Client plain(config_for(s3, {}), "bucket");
  plain.put_bytes("runs/LATEST", "x", "text/plain");
  std::lock_guard<std::mutex> lock(svc.mu);
  CHECK(svc.seen.back().header("x-amz-server-side-encryption").empty());
}

TEST_CASE("a read reports the object's encryption, and keys compare as ids, ARNs and aliases", "[remote][s3]") {
  Server s3([](const Server::Request&) {
    return Server::Response{200, "bytes", {"x-amz-server-side-encryption: aws:kms",
                                           "x-amz-server-side-encryption-aws-kms-key-id: arn:aws:kms:eu-west-1:1:key/k1",
                                           "x-amz-server-side-encryption-bucket-key-enabled: true"}};
  });
  remote::S3Client client(config_for(s3, {}), "bucket");
  const remote::Encryption got = client.get("runs/model.pt", [](const char*, size_t) {});
  CHECK(got.algorithm == "aws:kms");
  CHECK(got.bucket_key);
  CHECK(got.describe() == "aws:kms (key arn:aws:kms:eu-west-1:1:key/k1, bucket key)");
  CHECK(remote::satisfies(got, {"aws:kms", "k1", false}));
  CHECK(remote::satisfies(got, {"aws:kms", "arn:aws:kms:eu-west-1:1:key/k1", false}));
  CHECK(remote::satisfies(got, {"aws:kms", "alias/ckpt", false}));  // an alias names no key to compare
  CHECK(remote::satisfies(got, {}));
  CHECK_FALSE(remote::satisfies(got, {"aws:kms", "k2", false}));
  CHECK_FALSE(remote::satisfies(got, {"aws:kms", "1", false}));  // not the ARN's id, only its end
  CHECK_FALSE(remote::satisfies(got, {"AES256", "", false}));
  CHECK_FALSE(remote::satisfies({}, {"AES256", "", false}));
}

TEST_CASE("an AccessDenied names the permission the request needed", "[remote][s3]") {
  Server s3([](const Server::Request&) {
    return Server::Response{403, "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>", {}};
  });
  remote::S3Client client(config_for(s3, kKms), "bucket");
  auto message = [&](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const remote::S3Error& e) {
      CHECK_FALSE(e.transient());
      return e.what();
    }
    return "no error";
  };
  CHECK_THAT(message([&] { client.put_bytes("runs/LATEST", "x"); }),
             Catch::Matchers::Contains("HTTP 403 AccessDenied: Access Denied (this request needs s3:PutObject on "
                                       "arn:aws:s3:::bucket/runs/LATEST and kms:GenerateDataKey, kms:Decrypt on the KMS key)"));
  CHECK_THAT(message([&] { client.list("runs/"); }),
             Catch::Matchers::Contains("needs s3:ListBucket on arn:aws:s3:::bucket (prefix runs/)"));
  CHECK_THAT(message([&] { client.get_bytes("runs/LATEST"); }),
             Catch::Matchers::Contains("needs s3:GetObject on arn:aws:s3:::bucket/runs/LATEST (and kms:Decrypt"));
  CHECK_THAT(message([&] { client.remove("runs/x"); }), Catch::Matchers::Contains("needs s3:DeleteObject on"));
  CHECK_THAT(message([&] { client.pending_uploads("runs/"); }),
             Catch::Matchers::Contains("needs s3:ListBucketMultipartUploads on arn:aws:s3:::bucket"));
  CHECK_THAT(message([&] { client.abort_upload({"runs/x", "U1"}); }),
             Catch::Matchers::Contains("needs s3:AbortMultipartUpload on arn:aws:s3:::bucket/runs/x"));
}
