// The shared files as botocore reads them (src/remote/aws_ini.h, aws_profile.h): each profile
// gets its own keys whatever comments stand beside its header, and what the AWS CLI refuses is
// refused. The expected sections are what botocore's raw_config_parse and build_profile_map
// give for the same text (botocore 1.44).
#include <catch2/catch.hpp>

#include <string>

#include "base/error.h"
#include "remote/aws_ini.h"
#include "remote/aws_profile.h"
#include "remote/credentials.h"
#include "support/aws_env.h"
#include "support/env.h"
#include "support/errors.h"
#include "support/scratch_dir.h"

using namespace dlrun;
using dlrun::testing::ScopedEnv;

namespace {

/// The chain's variables unset, the shared files pointed at `creds` and `config`.
struct SharedFiles {
  SharedFiles(const std::string& creds, const std::string& config)
      : creds_file("AWS_SHARED_CREDENTIALS_FILE", creds.c_str()), config_file("AWS_CONFIG_FILE", config.c_str()) {}
  dlrun::testing::CleanAwsEnv clean;
  ScopedEnv creds_file, config_file;
};

const remote::IniSection& section(const remote::IniSections& all, const std::string& name) {
  for (const auto& [n, keys] : all)
    if (n == name) return keys;
  FAIL("no section [" << name << "]");
  throw;
}

}  // namespace

TEST_CASE("a comment after a section header: each profile signs with its own keys", "[remote][credentials][ini]") {
  dlrun::testing::ScratchDir tmp;
  // Before the fix, "[prod] ; production" was no header: prod's keys overwrote default's, and
  // AWS_PROFILE=prod or dev was "no such profile".
  const std::string creds = tmp.write("credentials",
                                      "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = sdefault\n"
                                      "[prod] ; production\naws_access_key_id = AKIDPROD\naws_secret_access_key = sprod\n"
                                      "[dev]   # the dev account\naws_access_key_id=AKIDDEV\naws_secret_access_key=sdev\n");
  const std::string config = tmp.write("config", "[default] ; note\nregion = eu-west-1\n[profile prod] ; p\n"
                                                 "region = us-west-2\n[profile dev] # d\nregion = ap-south-1\n");
  SharedFiles files(creds, config);
  for (const auto& [profile, key, secret, region] :
       {std::tuple{"", "AKIDDEFAULT", "sdefault", "eu-west-1"}, std::tuple{"default", "AKIDDEFAULT", "sdefault", "eu-west-1"},
        std::tuple{"prod", "AKIDPROD", "sprod", "us-west-2"}, std::tuple{"dev", "AKIDDEV", "sdev", "ap-south-1"}}) {
    INFO("AWS_PROFILE=" << profile);
    ScopedEnv p("AWS_PROFILE", *profile ? profile : nullptr);
    const remote::Credentials c = remote::credential_chain("us-east-1")->get();
    CHECK(c.access_key == key);
    CHECK(c.secret_key == secret);
    CHECK(remote::profile_region() == region);
  }
  // A file whose first line is such a header: [default] is found (it was "no profile 'default'").
  const std::string first = tmp.write("credentials2", "[default] ; the workstation's keys\n"
                                                      "aws_access_key_id = AKIDFIRST\naws_secret_access_key = sfirst\n");
  SharedFiles only_first(first, config);
  CHECK(remote::credential_chain("us-east-1")->get().access_key == "AKIDFIRST");
}

TEST_CASE("the INI rules are botocore's: comments, delimiters, continuations, [DEFAULT]", "[remote][ini]") {
  const std::string text =
      "# comment\n; comment\n[default] ; note\naws_access_key_id = AKID ; not a comment\nRegion: eu-west-1\n"
      "  # indented comment\ns3 =\n  max_concurrent_requests = 4\n\n  addressing_style = path\n\n"
      "[ spaced ]\nkey=value=with=equals\nurl = http://x:80/a\n[DEFAULT]\ninherited = yes\nregion = from-default\n"
      "[profile dev] [extra]\nx = 1\n[profile  \"my dev\"]   # quoted\naws_access_key_id = QUOTED\n"
      "continued = first\n   second line\n[profile dev]\ny = 2\n";
  const remote::IniSections all = remote::parse_aws_ini(text, "tricky.ini");
  REQUIRE(all.size() == 5);
  CHECK(all[0].first == "default");
  CHECK(all[1].first == " spaced ");  // kept as written
  CHECK(all[2].first == "profile dev] [extra");  // to the last ']'
  CHECK(all[3].first == "profile  \"my dev\"");
  CHECK(all[4].first == "profile dev");
  CHECK(section(all, "default") == remote::IniSection{{"aws_access_key_id", "AKID ; not a comment"},
                                                      {"region", "eu-west-1"},
                                                      {"s3", "\nmax_concurrent_requests = 4\n\naddressing_style = path"},
                                                      {"inherited", "yes"}});
  CHECK(section(all, " spaced ") == remote::IniSection{{"key", "value=with=equals"}, {"url", "http://x:80/a"},
                                                       {"inherited", "yes"}, {"region", "from-default"}});
  CHECK(section(all, "profile  \"my dev\"").at("continued") == "first\nsecond line");
  // Line ends of any kind; an indented header after a key is part of its value.
  const auto cr = remote::parse_aws_ini("[default]\ra = 1\r\n[prod]\rb=2\r", "cr.ini");
  REQUIRE(cr.size() == 2);
  CHECK(cr[1].second.at("b") == "2");
  const auto nested = remote::parse_aws_ini("[default]\na = 1\n  [prod]\nb = 2\n   c = 3\n", "nested.ini");
  REQUIRE(nested.size() == 1);
  CHECK(nested[0].second == remote::IniSection{{"a", "1\n[prod]"}, {"b", "2\nc = 3"}});
  CHECK(remote::parse_aws_ini("[default]\n   a = 1\n   b = 2\n", "i.ini")[0].second.size() == 2);
  CHECK(remote::parse_aws_ini("[DEFAULT]\na=1\n[DEFAULT]\nb=2\n[x]\n", "d.ini")[0].second ==
        remote::IniSection{{"a", "1"}, {"b", "2"}});
}

TEST_CASE("a file the AWS CLI refuses is refused, naming the line but not its text", "[remote][ini]") {
  for (const auto& [text, line, what] : {
           std::tuple{"a = 1\n[default]\n", 1, "before the first [section]"},
           std::tuple{"[default]\nSECRETLINE\n", 2, "neither a [section] nor a key"},
           std::tuple{"[default]\na=1\n[default]\nb=2\n", 3, "section [default] appears twice"},
           std::tuple{"[default]\na=1\nA=2\n", 3, "key a appears twice"},
           std::tuple{"[DEFAULT]\na=1\n[DEFAULT]\na=2\n", 4, "key a appears twice"},
           std::tuple{"[default]\n= SECRETLINE\n", 2, "a value without a key"},
           std::tuple{"[default]\n[]\n", 2, "neither a [section] nor a key"},
           std::tuple{"\xef\xbb\xbf[default]\na=1\n", 1, "before the first [section]"},  // a BOM, as botocore
       }) {
    INFO(text);
    const std::string body = text;  // a structured binding cannot be captured in C++17 (clang refuses)
    dlrun::testing::require_error([&] { remote::parse_aws_ini(body, "bad.ini"); },
                                  {"bad.ini:" + std::to_string(line) + ": ", what, "AWS CLI refuses"});
    try {
      remote::parse_aws_ini(text, "bad.ini");
    } catch (const Error& e) {
      CHECK(e.message().find("SECRETLINE") == std::string::npos);
    }
  }
  dlrun::testing::require_error([] { remote::parse_aws_ini("[default]\ns3 =\n  foo\n", "bad.ini"); },
                                {"bad.ini", "[default]", "s3", "nested setting without '='"});
  // Through the chain: the file and line, exit 2.
  dlrun::testing::ScratchDir tmp;
  SharedFiles files(tmp.write("credentials", "[default]\naws_access_key_id AKID\n"), tmp.path("none"));
  dlrun::testing::require_error([] { remote::credential_chain("us-east-1"); }, {"credentials:2:"});
}

TEST_CASE("which config-file section is a profile: [default], [profile NAME] as shlex splits it, the last one",
          "[remote][ini]") {
  dlrun::testing::ScratchDir tmp;
  const std::string config = tmp.write("config",
                                       "[profile dev]\nregion = first\n[profile  dev]\nregion = second\n"
                                       "[profile \"my dev\"]\nregion = quoted\n[profile a b]\nregion = three-words\n"
                                       "[prod]\nregion = not-a-profile\n[default]\nregion = d1\n[profile default]\n"
                                       "region = d2\n");
  SharedFiles files(tmp.path("none"), config);
  for (const auto& [profile, region] : {std::pair{"dev", "second"}, std::pair{"my dev", "quoted"},
                                        std::pair{"prod", ""}, std::pair{"a", ""}, std::pair{"default", "d2"}}) {
    INFO(profile);
    ScopedEnv p("AWS_PROFILE", profile);
    CHECK(remote::profile_region() == region);
  }
}
