// The S3 client's multipart upload against a fake service on 127.0.0.1 (src/remote/s3.h): a
// file above part_bytes goes up in parts, each signed with the SHA-256 of its own bytes (which
// the service checks), then completed with the parts' ETags in order.
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

TEST_CASE("a multipart upload signs each part with its own SHA-256", "[remote][s3]") {
  dlrun::testing::ScratchDir tmp;
  std::string data;
  for (int i = 0; i < (11 << 20); ++i) data.push_back(static_cast<char>(i * 7 + (i >> 12)));  // 11 MiB: 3 parts
  const std::string path = tmp.write("model.pt", data);
  std::mutex mu;
  std::vector<std::string> part_bodies, part_hashes;
  std::string completion;
  Server s3([&](const Server::Request& r) {
    std::lock_guard<std::mutex> lock(mu);
    if (r.method == "POST" && r.path.find("?uploads") != std::string::npos)
      return Server::Response{200, "<InitiateMultipartUploadResult><UploadId>U1</UploadId>"
                                   "</InitiateMultipartUploadResult>"};
    if (r.method == "PUT" && r.path.find("partNumber=") != std::string::npos) {
      part_bodies.push_back(r.body);
      part_hashes.push_back(r.header("x-amz-content-sha256"));
      return Server::Response{200, "", {"ETag: \"e" + std::to_string(part_bodies.size()) + "\""}};
    }
    if (r.method == "POST" && r.path.find("uploadId=U1") != std::string::npos) {
      completion = r.body;
      return Server::Response{200, "<CompleteMultipartUploadResult><ETag>x</ETag></CompleteMultipartUploadResult>"};
    }
    return Server::Response{400, "<Error><Code>Unexpected</Code></Error>"};
  });
  remote::S3Config cfg;
  cfg.endpoint = s3.base();
  cfg.region = "us-east-1";
  cfg.path_style = true;
  cfg.part_bytes = 5 << 20;
  cfg.credentials = remote::fixed_credentials({"AKIDEXAMPLE", "secret", "", 0}, "test");
  remote::S3Client client(cfg, "bucket");
  client.put_file("runs/model.pt", path, data.size(), sha256_hex(data.data(), data.size()));
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(part_bodies.size() == 3);
  std::string joined;
  for (size_t i = 0; i < part_bodies.size(); ++i) {
    CHECK(part_hashes[i] == sha256_hex(part_bodies[i].data(), part_bodies[i].size()));
    joined += part_bodies[i];
  }
  CHECK(joined == data);
  CHECK(part_bodies[0].size() == 5u << 20);
  CHECK(completion.find("<PartNumber>3</PartNumber><ETag>\"e3\"</ETag>") != std::string::npos);
}
