// Shell-like word splitting (src/base/shell_words.h). The expected words are what Python's
// shlex.split gives for the same lines (botocore splits credential_process with it).
#include <catch2/catch.hpp>

#include "base/shell_words.h"

using dlrun::split_shell_words;
using Words = std::vector<std::string>;

TEST_CASE("split_shell_words splits as shlex.split does", "[base][shell_words]") {
  CHECK(split_shell_words("/usr/bin/helper --profile dev") == Words{"/usr/bin/helper", "--profile", "dev"});
  CHECK(split_shell_words("  a   b  ") == Words{"a", "b"});
  CHECK(split_shell_words("tab\tsep\nnl\rcr") == Words{"tab", "sep", "nl", "cr"});
  CHECK(split_shell_words("'a b' c") == Words{"a b", "c"});
  CHECK(split_shell_words(R"("a \" b" c)") == Words{"a \" b", "c"});
  CHECK(split_shell_words(R"("a \b \\ c")") == Words{R"(a \b \ c)"});  // in "...", only \" and \\ escape
  CHECK(split_shell_words(R"("\$x")") == Words{R"(\$x)"});
  CHECK(split_shell_words(R"(a\ b)") == Words{"a b"});
  CHECK(split_shell_words(R"(\")") == Words{"\""});
  CHECK(split_shell_words("a'b c'd") == Words{"ab cd"});  // quotes join with what touches them
  CHECK(split_shell_words(R"(x="y z")") == Words{"x=y z"});
  CHECK(split_shell_words(R"("it's")") == Words{"it's"});
  CHECK(split_shell_words(R"("")") == Words{""});
  CHECK(split_shell_words("''") == Words{""});
  CHECK(split_shell_words(R"(a "" b)") == Words{"a", "", "b"});
  CHECK(split_shell_words("caf\xc3\xa9 x") == Words{"caf\xc3\xa9", "x"});
  CHECK(split_shell_words("") == Words{});
  CHECK(split_shell_words("   ") == Words{});
}

TEST_CASE("split_shell_words expands nothing: no variables, no ~, no globs, no operators", "[base][shell_words]") {
  CHECK(split_shell_words("$HOME ~/x *.py a|b;c >d") == Words{"$HOME", "~/x", "*.py", "a|b;c", ">d"});
}

TEST_CASE("split_shell_words refuses an unclosed quote or a lone trailing backslash", "[base][shell_words]") {
  for (const char* bad : {R"("unclosed)", "'unclosed", "trail\\", R"("esc at end\\)", R"('\'')", R"("a\)"}) {
    INFO(bad);
    CHECK_FALSE(split_shell_words(bad).has_value());
  }
}
