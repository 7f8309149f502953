// credential_process: an AWS profile names a program that prints credentials, and the SDKs run
// it (botocore's ProcessProvider): its command line split as shlex.split does and run without a
// shell, its output JSON {"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken"?,
// "Expiration"?}, run again ahead of the Expiration like the other refreshing sources. It is a
// program of the user's choosing: what it prints holds secrets and its error stream may, so
// neither is ever logged or put in a message (botocore puts the error stream in its exception;
// dlrun names the profile, the program and the exit status only), its error stream goes to
// /dev/null, and it gets a time limit (botocore has none; Go's SDK, one minute) and the
// request's cancel flag.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/error.h"
#include "base/iso8601.h"
#include "base/json_limits.h"
#include "base/shell_words.h"
#include "base/subprocess.h"
#include "remote/credential_sources.h"
#include "remote/s3_error.h"

namespace dlrun::remote {
namespace {

constexpr double kTimeoutS = 60;
constexpr size_t kMaxOutput = 64 * 1024;  // as the AWS SDK for Java's processOutputLimit
constexpr const char* kFailed = "CredentialProcessFailed";

CredentialFetch process_fetch(std::vector<std::string> argv, std::string what) {
  return [argv, what](const std::atomic<bool>* cancel) {
    ProgramLimits limits;
    limits.timeout_s = kTimeoutS;
    limits.max_output = kMaxOutput;
    limits.cancel = cancel;
    const ProgramResult r = run_program(argv, limits);
    using End = ProgramResult::End;
    switch (r.end) {
      case End::kExited:
        if (r.status == 0) {
          Credentials c = parse_process_credentials(r.output, what);
          // As the AWS CLI: credentials that have expired already are refused, not used until
          // the service says ExpiredToken and the program is run again at once, and again.
          if (c.expires > 0 && c.expires <= wall_now())
            throw S3Error(fmt::format("{}: the refreshed credentials are still expired (its Expiration is {:.0f} s in the "
                                      "past): fix the program or what it reads",
                                      what, wall_now() - c.expires),
                          0, kNoCredentials);
          return c;
        }
        throw S3Error(fmt::format("{} exited with status {} (what it printed is not shown: it may hold secrets)", what,
                                  r.status),
                      0, kFailed, false);
      case End::kSignalled: throw S3Error(fmt::format("{} was ended by signal {}", what, r.status), 0, kFailed, false);
      case End::kTimedOut:
        throw S3Error(fmt::format("{} did not finish within {:.0f} s and was stopped", what, kTimeoutS), 0, kFailed, true);
      case End::kTooMuch:
        throw S3Error(fmt::format("{} printed more than {} KiB", what, kMaxOutput / 1024), 0, kMalformed);
      case End::kCancelled: throw S3Error(what + ": cancelled", 0, kCancelled);
      case End::kNotStarted: throw S3Error(fmt::format("{} cannot be run: {}", what, r.error), 0, kNoCredentials);
      case End::kLost: break;
    }
    throw S3Error(what + ": its exit status was lost (collected elsewhere in this process)", 0, kFailed, false);
  };
}

}  // namespace

std::shared_ptr<CredentialProvider> process_credentials(const std::string& command, const std::string& where) {
  const auto argv = split_shell_words(command);
  DLRUN_CHECK_INPUT(argv.has_value(), "{}: credential_process is not a command line (a quote is not closed, or it ends "
                                      "in a lone backslash)", where);
  DLRUN_CHECK_INPUT(!argv->empty(), "{}: credential_process is empty", where);
  // Messages and the source name the program, never its arguments (they may hold a token).
  const std::string what = fmt::format("{}: credential_process {}", where, argv->front());
  return refreshing_credentials(process_fetch(*argv, what),
                                fmt::format("credential_process of {} ({})", where, argv->front()));
}

Credentials parse_process_credentials(const std::string& output, const std::string& where) {
  nlohmann::json j;
  try {
    j = parse_json_capped(output, 8);
  } catch (const std::exception&) {  // its message would quote the output
    j = nullptr;
  }
  if (!j.is_object()) throw S3Error(where + ": its output is not a JSON object", 0, kMalformed);
  const auto version = j.find("Version");
  if (version == j.end() || !version->is_number() || version->get<double>() != 1)
    throw S3Error(fmt::format("{}: Version is {}, not 1 (the one version of credential_process's output)", where,
                              version == j.end() ? "missing" : version->is_number() ? version->dump() : "not a number"),
                  0, kMalformed);
  const auto text = [&](const char* key) -> std::optional<std::string> {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::string();
    if (!it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  const auto id = text("AccessKeyId"), secret = text("SecretAccessKey"), token = text("SessionToken");
  const auto expiration = text("Expiration");
  if (!id || !secret || id->empty() || secret->empty())
    throw S3Error(where + ": its output has no AccessKeyId and SecretAccessKey strings", 0, kMalformed);
  if (!token || !expiration) throw S3Error(where + ": SessionToken or Expiration is not a string", 0, kMalformed);
  Credentials out{*id, *secret, *token, 0};
  if (!expiration->empty()) {
    const auto t = parse_iso8601(*expiration);
    if (!t) throw S3Error(where + ": Expiration is not an RFC 3339 time", 0, kMalformed);
    out.expires = *t;
  }
  return out;
}

}  // namespace dlrun::remote
