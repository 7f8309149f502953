// A profile's credential_process (src/remote/process_credentials.cpp) with real helper
// programs: /bin/sh scripts the test writes to a scratch directory. What a user relies on:
// the keys it prints are used, it is run as botocore runs it (words split as shlex does, no
// shell), it comes where botocore puts it in the profile, its output and error stream never
// reach a message or the log, and a stop ends it.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <string>

#include "base/error.h"
#include "remote/credentials.h"
#include "remote/s3_error.h"
#include "support/aws_env.h"
#include "support/capture.h"
#include "support/env.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/scratch_dir.h"
#include "support/stop_during.h"

using namespace dlrun;
using dlrun::testing::ScopedEnv;

namespace {

/// A scratch directory with a helper script, and the chain's environment pointed at a config
/// file whose [profile proc] runs it.
struct Helper {
  explicit Helper(const std::string& body, const std::string& args = "", const std::string& credentials = "")
      : script(tmp.write("helper dir/helper.sh", "#!/bin/sh\n" + body)),
        config(tmp.write("config", "[profile proc]\ncredential_process = \"" + script + "\" " + args + "\n")),
        creds(tmp.write("credentials", credentials)),
        creds_env("AWS_SHARED_CREDENTIALS_FILE", creds.c_str()),
        config_env("AWS_CONFIG_FILE", config.c_str()) {
    ::chmod(script.c_str(), 0755);
  }
  dlrun::testing::CleanAwsEnv clean;
  dlrun::testing::ScratchDir tmp;
  std::string script, config, creds;
  ScopedEnv creds_env, config_env, profile{"AWS_PROFILE", "proc"};
};

/// The S3Error that `p->get()` throws (a FAIL when it does not).
remote::S3Error get_error(remote::CredentialProvider& p) {
  try {
    p.get();
  } catch (const remote::S3Error& e) {
    return e;
  }
  FAIL("the helper's credentials were accepted");
  throw;
}

constexpr const char* kPrint =
    "echo '{\"Version\": 1, \"AccessKeyId\": \"AKIDPROC\", \"SecretAccessKey\": \"SECRET-KEY\", "
    "\"SessionToken\": \"TOKEN\", \"Expiration\": \"2099-01-01T00:00:00Z\"}'\n";

}  // namespace

TEST_CASE("credential_process: the keys a helper program prints sign the requests", "[remote][credentials][process]") {
  Helper h(kPrint);
  auto p = remote::credential_chain("us-east-1");
  const remote::Credentials c = p->get();
  CHECK(c.access_key == "AKIDPROC");
  CHECK(c.secret_key == "SECRET-KEY");
  CHECK(c.session_token == "TOKEN");
  CHECK(c.expires == 4070908800.0);
  CHECK(p->refreshable());  // run again ahead of Expiration, or when the service says ExpiredToken
  CHECK(p->source().find("credential_process of profile proc in " + h.config) != std::string::npos);
  // Without Expiration and SessionToken: kept (never due), fetched again only on ExpiredToken.
  const std::string count = h.tmp / "runs";
  Helper plain("echo run >> '" + count + "'\necho '{\"Version\": 1, \"AccessKeyId\": \"AKIDPLAIN\", "
               "\"SecretAccessKey\": \"s\"}'\n");
  auto q = remote::credential_chain("us-east-1");
  const remote::Credentials first = q->get();
  CHECK(first.access_key == "AKIDPLAIN");
  CHECK(first.session_token.empty());
  CHECK(first.expires == 0);
  CHECK(q->get().access_key == "AKIDPLAIN");
  CHECK(dlrun::testing::read_text(count) == "run\n");
  q->expired(first);
  CHECK(q->get().access_key == "AKIDPLAIN");
  CHECK(dlrun::testing::read_text(count) == "run\nrun\n");
}

TEST_CASE("credential_process is split as shlex.split does and run without a shell", "[remote][credentials][process]") {
  dlrun::testing::ScratchDir other;
  const std::string marker = other / "shell-ran";
  // The script prints its arguments as the key; ';', '$HOME' and '>' are arguments, not shell.
  Helper h("printf '{\"Version\": 1, \"AccessKeyId\": \"%s|%s|%s|%s\", \"SecretAccessKey\": \"s\"}' \"$1\" \"$2\" "
           "\"$3\" \"$4\"\n",
           "'a b' \"c'd\" ; $HOME >" + marker);
  CHECK(remote::credential_chain("us-east-1")->get().access_key == "a b|c'd|;|$HOME");
  CHECK(dlrun::testing::read_text(marker).empty());
}

TEST_CASE("credential_process comes where botocore puts it in a profile", "[remote][credentials][process]") {
  const std::string keys = "aws_access_key_id = AKIDFILE\naws_secret_access_key = s\n";
  {  // the credentials file's keys come first
    Helper h(kPrint, "", "[proc]\n" + keys);
    CHECK(remote::credential_chain("us-east-1")->get().access_key == "AKIDFILE");
  }
  {  // then credential_process, before the config file's keys
    Helper h(kPrint);
    dlrun::testing::write_text(h.config, "[profile proc]\n" + keys + "credential_process = '" + h.script + "'\n");
    CHECK(remote::credential_chain("us-east-1")->get().access_key == "AKIDPROC");
  }
  {  // the credentials file's credential_process over the config file's
    Helper h(kPrint, "", "[proc]\ncredential_process = /nonexistent/helper\n");
    CHECK(remote::credential_chain("us-east-1")->source().find("/nonexistent/helper") != std::string::npos);
  }
  {  // the environment's keys before any profile
    Helper h(kPrint);
    ScopedEnv id("AWS_ACCESS_KEY_ID", "AKIDENV"), secret("AWS_SECRET_ACCESS_KEY", "s");
    CHECK(remote::credential_chain("us-east-1")->get().access_key == "AKIDENV");
  }
}

TEST_CASE("credential_process failures name the profile and the exit status, never the output",
          "[remote][credentials][process]") {
  const std::string leak = "echo SECRET-STDOUT; echo SECRET-STDERR >&2\n";
  std::string log = dlrun::testing::capture_stderr([&] {
    for (const auto& [body, code, words] : {
             std::tuple{leak + "exit 3\n", "CredentialProcessFailed", "exited with status 3"},
             std::tuple{leak + "kill -KILL $$\n", "CredentialProcessFailed", "ended by signal 9"},
             std::tuple{leak, remote::kMalformed, "not a JSON object"},
             std::tuple{std::string("echo '{\"Version\": 2, \"AccessKeyId\": \"SECRET-A\", \"SecretAccessKey\": \"b\"}'\n"),
                        remote::kMalformed, "Version is 2, not 1"},
             std::tuple{std::string("echo '{\"AccessKeyId\": \"SECRET-A\", \"SecretAccessKey\": \"b\"}'\n"),
                        remote::kMalformed, "Version is missing"},
             std::tuple{std::string("echo '{\"Version\": 1, \"AccessKeyId\": \"SECRET-A\"}'\n"), remote::kMalformed,
                        "no AccessKeyId and SecretAccessKey"},
             std::tuple{std::string("echo '{\"Version\": 1, \"AccessKeyId\": \"SECRET-A\", \"SecretAccessKey\": \"b\", "
                                    "\"Expiration\": \"2026-02-31T00:00:00Z\"}'\n"),
                        remote::kMalformed, "Expiration is not an RFC 3339 time"},
             std::tuple{std::string("yes SECRET-STDOUT\n"), remote::kMalformed, "more than 64 KiB"},
         }) {
      INFO(body);
      Helper h(body);
      auto p = remote::credential_chain("us-east-1");
      const remote::S3Error e = get_error(*p);
      CHECK(e.code() == code);
      CHECK_FALSE(e.transient());
      CHECK_THAT(e.what(), Catch::Contains("profile proc") && Catch::Contains("helper.sh") && Catch::Contains(words));
      CHECK_THAT(e.what(), !Catch::Contains("SECRET"));
    }
  });
  CHECK(log.find("SECRET") == std::string::npos);  // neither logged nor passed through to dlrun's stderr
  {
    Helper h(kPrint);
    dlrun::testing::write_text(h.config, "[profile proc]\ncredential_process = /nonexistent/helper --x\n");
    const remote::S3Error e = get_error(*remote::credential_chain("us-east-1"));
    CHECK(e.code() == remote::kNoCredentials);
    CHECK_THAT(e.what(), Catch::Contains("/nonexistent/helper cannot be run"));
  }
  {  // what botocore could not run is refused at start-up, exit 2
    Helper h(kPrint);
    dlrun::testing::write_text(h.config, "[profile proc]\ncredential_process = \"/bin/helper --x\n");
    dlrun::testing::require_error([] { remote::credential_chain("us-east-1"); },
                                  {"profile proc", "credential_process is not a command line"});
    dlrun::testing::write_text(h.config, "[profile proc]\ncredential_process =\n");
    dlrun::testing::require_error([] { remote::credential_chain("us-east-1"); }, {"credential_process is empty"});
  }
}

TEST_CASE("credential_process: credentials already expired are refused, naming the profile", "[remote][credentials][process]") {
  // (The AWS CLI: "the refreshed credentials are still expired"; before, they were used, refused by
  // the service as expired, and the program run again at once, 16 times in 5 s.)
  dlrun::testing::ScratchDir runs;
  const std::string count = runs / "runs";
  Helper h("echo run >> '" + count + "'\necho '{\"Version\": 1, \"AccessKeyId\": \"AKIDOLD\", \"SecretAccessKey\": "
           "\"s\", \"SessionToken\": \"t\", \"Expiration\": \"2020-01-01T00:00:00Z\"}'\n");
  auto p = remote::credential_chain("us-east-1");
  const remote::S3Error e = get_error(*p);
  CHECK(e.code() == remote::kNoCredentials);
  CHECK_FALSE(e.transient());
  CHECK_THAT(e.what(), Catch::Contains("profile proc") && Catch::Contains("the refreshed credentials are still expired"));
  CHECK(dlrun::testing::read_text(count) == "run\n");  // run once for this request, not again and again
}

TEST_CASE("a stop ends a credential_process under way", "[remote][credentials][process]") {
  dlrun::testing::ScratchDir marks;
  const std::string started = marks / "started";
  Helper h("echo x > '" + started + "'\nsleep 30\n" + kPrint);
  auto p = remote::credential_chain("us-east-1");
  const auto o = dlrun::testing::get_with_stop(*p, [&] { return !dlrun::testing::read_text(started).empty(); });
  CHECK(o.code == remote::kCancelled);
  CHECK(o.seconds < 10);  // not the helper's 30 s
}
