// The one way the S3 client refuses an answer that is not what S3 sends (S3Error code
// MalformedAnswer), shared by the requests (s3.cpp: listings past their bounds) and the parsers
// of the answers (s3_answers.cpp). Internal to src/remote/.
#pragma once

#include <string>

namespace dlrun::remote::detail {

/// Throws S3Error "WHAT: the service's answer is malformed: WHY" (not transient).
[[noreturn]] void malformed(const std::string& what, const std::string& why);

}  // namespace dlrun::remote::detail
