// Fuzz target: what dlrun makes of an object store's answers, which it treats as untrusted input
// (src/remote/s3.h): ListObjectsV2 pages, ListMultipartUploads pages, the UploadId of a new
// multipart upload, error documents, STS's AssumeRoleWithWebIdentity credentials and the
// container / instance-metadata credentials JSON. Input: one byte picking the parser, then the
// body. The one expected failure is remote::S3Error with code MalformedAnswer; anything else
// that escapes (std::out_of_range, std::bad_alloc, a crash, a sanitizer report) is a finding.
#include <cstdint>
#include <string>

#include "remote/credentials.h"
#include "remote/s3.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace dlrun::remote;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string prefix = data[0] & 0x80 ? "runs/exp1/" : "";
  try {
    switch (data[0] % 7) {
      case 0: {
        const ListPage p = parse_list_page(body, prefix, "fuzz");
        for (const auto& o : p.listing.objects)  // every key is under the prefix asked for
          if (o.key.compare(0, prefix.size(), prefix) != 0) __builtin_trap();
        if (p.truncated && p.next_token.empty()) __builtin_trap();  // never a silent end
        break;
      }
      case 1: parse_uploads_page(body, prefix, "fuzz"); break;
      case 2:
        if (parse_upload_id(body, "fuzz").empty()) __builtin_trap();
        break;
      case 3: parse_error_answer(body); break;  // never throws
      case 4: parse_sts_credentials(body, "fuzz"); break;
      case 5: parse_json_credentials(body, "fuzz"); break;
      default: url_decode(body, "fuzz"); break;
    }
  } catch (const S3Error& e) {
    if (e.code() != kMalformed && e.code() != "CredentialsRefused") __builtin_trap();
  }
  return 0;
}
