// AWS Signature Version 4 for the S3 client's requests. libcurl has a signer of its own
// (CURLOPT_AWS_SIGV4), which dlrun used until server-side encryption came: the libcurl of
// Debian 12 (7.88) sorts the canonical headers as whole "name:value" lines, so
// x-amz-server-side-encryption-aws-kms-key-id lands before x-amz-server-side-encryption and the
// service, which sorts by name, computes another signature (SignatureDoesNotMatch). Here the
// headers are sorted by name, as the specification says, and every header sent is signed.
#pragma once

#include <ctime>
#include <string>
#include <vector>

#include "remote/credentials.h"

namespace dlrun::remote {

/// The headers that sign a request, to send with it: "Host: ...", "x-amz-date: ...",
/// "Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...". `url`
/// has its path and query in canonical form already (encoded; the query's parameters sorted,
/// each with '='; S3Client::url makes it so); `headers` ("Name: value", no Host) are the other
/// headers sent, all signed; `payload_sha256` is the body's digest in hex; `now` the time of
/// signing (seconds since the epoch). The secret is used, never returned or logged.
std::vector<std::string> sigv4_headers(const std::string& method, const std::string& url,
                                       const std::vector<std::string>& headers, const std::string& payload_sha256,
                                       const Credentials& credentials, const std::string& region,
                                       const std::string& service, std::time_t now);

}  // namespace dlrun::remote
