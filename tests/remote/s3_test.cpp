// The pieces of the S3 client that need no server: s3:// URLs, AWS's URI encoding (the
// canonical form libcurl signs as given), the service's answers as untrusted input. The client against a real S3
// implementation: tests/e2e/test_remote.py; its settings: tests/config/remote_options_test.cpp.
#include <catch2/catch.hpp>

#include <functional>

#include "base/error.h"
#include "remote/s3.h"
#include "remote/xml.h"
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

namespace {

/// The S3Error a call throws, or a failed check when it throws nothing (or something else).
remote::S3Error s3_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const remote::S3Error& e) {
    return e;
  }
  FAIL("no S3Error");
  return remote::S3Error("", 0, "");
}

}  // namespace

TEST_CASE("XML answers: elements, text, entities, CDATA, self-closing elements, namespaces", "[remote][xml]") {
  const auto root = remote::parse_xml(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Contents><Key>p/a&lt;b&#233;</Key><Size>12</Size></Contents><Contents><Key><![CDATA[p/x&y]]></Key></Contents>"
      "<NextContinuationToken/><s3:Marker xmlns:s3=\"u\">m</s3:Marker></ListBucketResult>");
  CHECK(root.name == "ListBucketResult");
  const auto items = root.all("Contents");
  REQUIRE(items.size() == 2);
  CHECK(items[0]->child_text("Key") == "p/a<b\xC3\xA9");
  CHECK(items[0]->child_text("Size") == "12");
  CHECK(items[1]->child_text("Key") == "p/x&y");
  REQUIRE(root.child("NextContinuationToken") != nullptr);
  CHECK(root.child_text("NextContinuationToken").empty());
  CHECK(root.child_text("Marker") == "m");  // the namespace prefix dropped
  CHECK(root.child("Missing") == nullptr);
}

TEST_CASE("XML that is not well-formed, declares a document type or passes the bounds is refused", "[remote][xml]") {
  auto refused = [](const std::string& body, const std::string& says) {
    try {
      remote::parse_xml(body);
      FAIL("accepted: " << body.substr(0, 80));
    } catch (const remote::XmlError& e) {
      CHECK_THAT(e.what(), Catch::Contains(says));
    }
  };
  refused("<a><b></a>", "well-formed");
  refused("", "well-formed");
  refused("<a>&undefined;</a>", "well-formed");
  refused("<!DOCTYPE a [<!ENTITY x \"xxxxxxxx\">]><a>&x;</a>", "document type");
  std::string deep;
  for (int i = 0; i < remote::kMaxXmlDepth + 1; ++i) deep += "<a>";
  refused(deep, "nested deeper than");
  std::string wide = "<a>";
  for (size_t i = 0; i <= remote::kMaxXmlElements; ++i) wide += "<b/>";
  refused(wide + "</a>", "more than 200000 elements");
  std::string amps = "<a>";
  for (size_t i = 0; i <= remote::kMaxXmlText / 2; ++i) amps += "&amp;&lt;";  // two bytes of text each
  refused(amps + "</a>", "text longer than 262144 bytes");
}

TEST_CASE("listing pages: keys URL-decoded and under the prefix, sizes, continuation", "[remote][s3]") {
  const std::string page =
      "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
      "<NextContinuationToken>t+1/=</NextContinuationToken>"
      "<Contents><Key>runs/exp%201/step-00000005/model.pt</Key><Size>30344</Size></Contents>"
      "<Contents><Key>runs/exp+1/a%2Bb</Key><Size>0</Size></Contents>"
      "<CommonPrefixes><Prefix>runs/exp%201/step-00000010/</Prefix></CommonPrefixes></ListBucketResult>";
  const auto p = remote::parse_list_page(page, "runs/exp 1/", "list");
  REQUIRE(p.listing.objects.size() == 2);
  CHECK(p.listing.objects[0].key == "runs/exp 1/step-00000005/model.pt");
  CHECK(p.listing.objects[0].size == 30344);
  CHECK(p.listing.objects[1].key == "runs/exp 1/a+b");
  CHECK(p.listing.prefixes == std::vector<std::string>{"runs/exp 1/step-00000010/"});
  CHECK(p.truncated);
  CHECK(p.next_token == "t+1/=");  // tokens are not URL-encoded
  // Without encoding-type in the answer, keys are taken as they are.
  const auto plain = remote::parse_list_page("<ListBucketResult><Contents><Key>a%20b</Key><Size>1</Size></Contents>"
                                             "</ListBucketResult>", "", "list");
  CHECK(plain.listing.objects.at(0).key == "a%20b");
  CHECK_FALSE(plain.truncated);

  auto malformed = [](const std::string& body, const std::string& prefix, const std::string& says) {
    const auto e = s3_error_of([&] { remote::parse_list_page(body, prefix, "list s3://b/p"); });
    CHECK(e.code() == remote::kMalformed);
    CHECK_FALSE(e.transient());
    CHECK_THAT(e.what(), Catch::Contains("list s3://b/p") && Catch::Contains(says));
  };
  malformed("<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken/></ListBucketResult>", "",
            "NextContinuationToken is empty");
  malformed("<ListBucketResult><Contents><Key>r</Key><Size>1</Size></Contents></ListBucketResult>", "runs/exp/",
            "not under the prefix");  // once an out_of_range, exit 1
  malformed("<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>", "", "Size");
  malformed("<ListBucketResult><Contents><Key>a</Key><Size>99999999999999999999</Size></Contents></ListBucketResult>",
            "", "Size");
  malformed("<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>", "", "without a <Key>");
  malformed("<ListBucketResult><Contents><Key>" + std::string(1025, 'k') + "</Key><Size>1</Size></Contents>"
            "</ListBucketResult>", "", "at most 1024");
  malformed("<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>a%2</Key><Size>1</Size></Contents>"
            "</ListBucketResult>", "", "%-escape");
  malformed("<Error><Code>AccessDenied</Code></Error>", "", "<Error> where <ListBucketResult> belongs");
  malformed("<html>502", "", "well-formed");
}

TEST_CASE("error documents, multipart upload ids and unfinished uploads", "[remote][s3]") {
  auto e = remote::parse_error_answer("<?xml version=\"1.0\"?><Error><Code>ExpiredToken</Code><Message>The provided "
                                      "token has expired.</Message></Error>");
  CHECK(e.code == "ExpiredToken");
  CHECK(e.message == "The provided token has expired.");
  e = remote::parse_error_answer("<ErrorResponse><Error><Code>InvalidIdentityToken</Code></Error></ErrorResponse>");
  CHECK(e.code == "InvalidIdentityToken");
  CHECK(remote::parse_error_answer("<html>Bad Gateway").code.empty());  // never throws
  CHECK(remote::parse_error_answer("").code.empty());

  CHECK(remote::parse_upload_id("<InitiateMultipartUploadResult><UploadId>VXA=</UploadId>"
                                "</InitiateMultipartUploadResult>", "start") == "VXA=");
  CHECK(s3_error_of([] { remote::parse_upload_id("<InitiateMultipartUploadResult/>", "start"); }).code() ==
        remote::kMalformed);

  const auto u = remote::parse_uploads_page(
      "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated><NextKeyMarker>p/b</NextKeyMarker>"
      "<NextUploadIdMarker>2</NextUploadIdMarker><Upload><Key>p/a</Key><UploadId>1</UploadId></Upload>"
      "</ListMultipartUploadsResult>", "p/", "uploads");
  REQUIRE(u.uploads.size() == 1);
  CHECK(u.uploads[0].key == "p/a");
  CHECK(u.uploads[0].upload_id == "1");
  CHECK(u.truncated);
  CHECK(u.next_key_marker == "p/b");
  CHECK(s3_error_of([] {
          remote::parse_uploads_page("<ListMultipartUploadsResult><Upload><Key>q/a</Key><UploadId>1</UploadId>"
                                     "</Upload></ListMultipartUploadsResult>", "p/", "uploads");
        }).code() == remote::kMalformed);
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
  CHECK_FALSE(remote::S3Error("x", 200, remote::kMalformed).transient());  // asking again gets the same
  CHECK_FALSE(remote::S3Error("x", 0, remote::kNoCredentials).transient());
  CHECK_FALSE(remote::S3Error("x", 400, "ExpiredToken").transient());      // fixed keys: they stay expired
  CHECK(remote::S3Error("x", 400, "ExpiredToken", true).transient());      // a source that hands out new ones
  CHECK_FALSE(remote::S3Error("x", 0, remote::kTlsRefused).transient());   // an unknown CA stays unknown
  CHECK_FALSE(remote::S3Error("x", 200, remote::kNotEncrypted).transient());
}
