// The cloud notice sources, one function each. What counts as a notice:
//   aws    IMDSv2 token (PUT), then GET spot/instance-action: 200 with {"action": ...};
//          404 means none. If the token request fails, the GET is tried without a token
//          (IMDSv1).
//   gcp    GET instance/preempted with "Metadata-Flavor: Google": body "TRUE".
//   azure  GET Scheduled Events with "Metadata: true": an event with EventType "Preempt".
//   file   the path exists and was not last modified more than kStaleMarginS before this
//          process started (its first line, if any, is the detail). An older file is a notice
//          to an earlier process (a run that was requeued on the same machine): it is ignored,
//          and the watcher says so once. The margin absorbs the file system's coarse
//          timestamps; a notice that arrives during start-up is always honoured.
#include <sys/stat.h>
#include <time.h>

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/error.h"
#include "base/http.h"
#include "base/iso8601.h"
#include "base/json_limits.h"
#include "base/strings.h"
#include "preempt/preempt.h"
#include "preempt/providers.h"

namespace dlrun::preempt {
namespace {

/// A JSON field as text: strings as they are, anything else dumped, "?" when absent.
std::string field(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end()) return "?";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

/// Turns a non-answer into PollResult::error; true when the source answered.
/// One metadata request: connect timeout 1 s, total 2 s.
http::Response metadata_request(const std::string& method, const std::string& url, std::vector<std::string> headers) {
  http::Request req;
  req.method = method;
  req.url = url;
  req.headers = std::move(headers);
  return http::perform(req);
}

bool answered(const http::Response& r, const std::string& url, PollResult* out) {
  if (r.status == 0) {
    out->error = url + ": " + r.error;
    return false;
  }
  return true;
}

}  // namespace

double parse_notice_time(const std::string& text) {
  if (text.size() > 64) return 0;
  if (const auto t = parse_iso8601(text)) return *t > 0 ? *t : 0;
  // RFC 1123: strptime reads the words; the fields' ranges are checked as strictly as above
  // (strptime takes 31 February, which timegm would make 3 March).
  std::tm tm{};
  const char* end = ::strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0') return 0;
  const auto t = utc_seconds(tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return t && *t > 0 ? static_cast<double>(*t) : 0;
}

// What a metadata service's answer means, apart from the transport (the fuzzed part).
PollResult parse_answer(NoticeSource watch, int status, const std::string& body, const std::string& url) {
  PollResult out;
  // JSON nested deeper than any real answer counts as not JSON (base/json_limits.h).
  auto parse = [](const std::string& text) {
    try {
      return parse_json_capped(text, 16);
    } catch (const std::exception&) {
      return nlohmann::json(nlohmann::json::value_t::discarded);
    }
  };
  switch (watch) {
    case NoticeSource::kAws: {
      if (status != 200) {
        if (status != 404) out.error = url + ": HTTP " + std::to_string(status);
        return out;
      }
      auto j = parse(body);
      if (j.is_discarded() || !j.is_object() || !j.contains("action")) {
        out.error = url + ": HTTP 200 without an \"action\" field";
        return out;
      }
      out.notice = true;
      out.detail = "action=" + field(j, "action") + " time=" + field(j, "time");
      out.action_time = parse_notice_time(field(j, "time"));
      return out;
    }
    case NoticeSource::kGcp:
      if (status != 200) {
        out.error = url + ": HTTP " + std::to_string(status);
        return out;
      }
      out.notice = trim(body) == "TRUE";
      if (out.notice) out.detail = "instance/preempted=TRUE";
      return out;
    case NoticeSource::kAzure: {
      auto j = parse(body);
      if (status != 200 || j.is_discarded() || !j.is_object()) {
        out.error = url + ": HTTP " + std::to_string(status) + (status == 200 ? " (not JSON)" : "");
        return out;
      }
      auto events = j.find("Events");
      if (events == j.end() || !events->is_array()) return out;
      for (const auto& e : *events) {
        if (!e.is_object() || field(e, "EventType") != "Preempt") continue;
        out.notice = true;
        out.detail = "EventId=" + field(e, "EventId") + " NotBefore=" + field(e, "NotBefore");
        out.action_time = parse_notice_time(field(e, "NotBefore"));
        return out;
      }
      return out;
    }
    default:
      out.error = url + ": not an HTTP notice source";
      return out;
  }
}

namespace {

PollResult poll_aws(const std::string& base_in) {
  const std::string base = strip_trailing(base_in, '/');
  PollResult out;
  std::vector<std::string> headers;
  http::Response tok = metadata_request("PUT", base + "/latest/api/token",
                                        {"X-aws-ec2-metadata-token-ttl-seconds: 21600"});
  if (tok.status == 200 && !trim(tok.body).empty())
    headers.push_back("X-aws-ec2-metadata-token: " + trim(tok.body));
  const std::string url = base + "/latest/meta-data/spot/instance-action";
  http::Response r = metadata_request("GET", url, headers);
  if (!answered(r, url, &out)) return out;
  return parse_answer(NoticeSource::kAws, r.status, r.body, url);
}

PollResult poll_gcp(const std::string& url) {
  PollResult out;
  http::Response r = metadata_request("GET", url, {"Metadata-Flavor: Google"});
  if (!answered(r, url, &out)) return out;
  return parse_answer(NoticeSource::kGcp, r.status, r.body, url);
}

PollResult poll_azure(const std::string& url) {
  PollResult out;
  http::Response r = metadata_request("GET", url, {"Metadata: true"});
  if (!answered(r, url, &out)) return out;
  return parse_answer(NoticeSource::kAzure, r.status, r.body, url);
}

constexpr double kStaleMarginS = 1.0;

PollResult poll_file(const std::string& path) {
  PollResult out;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return out;  // absent
  const double mtime = static_cast<double>(st.st_mtim.tv_sec) + 1e-9 * static_cast<double>(st.st_mtim.tv_nsec);
  if (mtime < process_start_wall() - kStaleMarginS) {
    out.note = fmt::format("ignoring the notice file {}: it was written before this process started (a notice for an "
                           "earlier run); remove it, or touch it again to stop this run", path);
    return out;
  }
  std::ifstream f(path);
  if (!f) return out;  // unreadable: the user will notice when creating it
  std::string line;
  std::getline(f, line);
  line = trim(line);
  out.notice = true;
  out.detail = line.empty() ? path : path + ": " + line.substr(0, 200);
  return out;
}

}  // namespace

std::string default_endpoint(NoticeSource watch) {
  switch (watch) {
    case NoticeSource::kAws: return "http://169.254.169.254";
    case NoticeSource::kGcp: return "http://metadata.google.internal/computeMetadata/v1/instance/preempted";
    case NoticeSource::kAzure: return "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01";
    case NoticeSource::kFile:
    case NoticeSource::kNone: return "";
  }
  return "";
}

void check_source(NoticeSource watch, const std::string& endpoint) {
  DLRUN_CHECK_INPUT(watch != NoticeSource::kNone, "preemption.watch: none has nothing to poll");
  if (watch == NoticeSource::kFile) {
    DLRUN_CHECK_INPUT(!endpoint.empty(),
                      "preemption.endpoint: preemption.watch=file needs the path to watch");
    return;
  }
  DLRUN_CHECK_INPUT(http::available(),
                    "preemption.watch: {} needs libcurl, and dlrun was built without it "
                    "(install libcurl and rebuild, or use preemption.watch: file)", name_of(watch));
}

PollResult poll_source(NoticeSource watch, const std::string& endpoint) {
  const std::string ep = endpoint.empty() ? default_endpoint(watch) : endpoint;
  check_source(watch, ep);
  switch (watch) {
    case NoticeSource::kFile: return poll_file(ep);
    case NoticeSource::kAws: return poll_aws(ep);
    case NoticeSource::kGcp: return poll_gcp(ep);
    default: return poll_azure(ep);
  }
}

bool poll_once(NoticeSource watch, const std::string& endpoint, std::string* detail) {
  PollResult r = poll_source(watch, endpoint);
  if (detail) *detail = r.detail;
  return r.notice;
}

}  // namespace dlrun::preempt
