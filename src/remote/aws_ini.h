// The INI dialect of AWS's shared files (~/.aws/credentials, ~/.aws/config), read as botocore
// (the AWS CLI, boto3) reads it: Python's configparser with its defaults. A reader that differs
// from botocore on a line gives a profile keys the CLI gives another profile ("[prod] ; note"
// was not a header here, and prod's keys landed in the profile above it); so the rules are
// botocore's, strict where it is strict:
//
//   - A line whose first non-blank character is '#' or ';' is a comment, wherever it stands.
//   - "[NAME]" starts a section: NAME runs to the last ']' and is kept as written (spaces
//     included); anything after that ']' is ignored ("[prod] ; production" is section "prod").
//   - "key = value" or "key: value" (the first '=' or ':' divides); keys are case-insensitive
//     (lower-cased), key and value trimmed. A '#' or ';' after a value is part of the value.
//   - A line indented deeper than its key's line continues that key's value on a new line
//     (the nested "s3 =" settings); blank lines do not end a value.
//   - [DEFAULT] gives its keys to every section that lacks them.
//   - Refused, naming the file and line but never the line's text (it may hold a secret): a
//     key before any section, a line that is neither a section nor a key, an empty key, a
//     section or a key given twice, a nested setting without '='.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dlrun::remote {

/// The keys of one [section] (lower case) and their values.
using IniSection = std::map<std::string, std::string>;

/// The sections of a file, in the file's order, by their names as written.
using IniSections = std::vector<std::pair<std::string, IniSection>>;

/// `text`, the contents of `path`, read as above. Throws dlrun::Error (exit 2) naming
/// `path` and the line when botocore would refuse the file.
IniSections parse_aws_ini(std::string_view text, const std::string& path);

}  // namespace dlrun::remote
