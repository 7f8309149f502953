// Fuzz target: what dlrun makes of a cloud metadata service's answer (AWS spot
// instance-action, GCP preempted, Azure Scheduled Events). Input: one byte picking the
// provider and the status (200 or another), then the response body.
#include <cstdint>
#include <string>

#include "preempt/providers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using dlrun::NoticeSource;
  const NoticeSource sources[] = {NoticeSource::kAws, NoticeSource::kGcp, NoticeSource::kAzure};
  const NoticeSource watch = sources[data[0] % 3];
  const int status = (data[0] / 3) % 4 == 0 ? 404 : 200;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto r = dlrun::preempt::parse_answer(watch, status, body, "http://127.0.0.1/fuzz");
  // A notice always says what it was; an error is never also a notice.
  if (r.notice && (r.detail.empty() || !r.error.empty())) __builtin_trap();
  return 0;
}
