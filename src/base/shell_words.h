// A command line split into words the way a POSIX shell quotes them, without running a shell:
// how the AWS SDKs (botocore's shlex.split) read a profile's credential_process, and how they
// read the name of a [profile NAME] section. No expansion of any kind ($VAR, ~, globs), no
// operators (|, ;, >): those characters are only characters.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dlrun {

/// Python's shlex.split(s) (POSIX mode): words separated by spaces, tabs, CR and LF; '...'
/// literal; "..." literal except \" and \\; a backslash outside quotes keeps the next character;
/// quotes join with what touches them, and "" or '' is an empty word. nullopt when a quote is
/// not closed or the line ends in a lone backslash (shlex's ValueError).
std::optional<std::vector<std::string>> split_shell_words(std::string_view s);

}  // namespace dlrun
