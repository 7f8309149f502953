// ${env:...} interpolation (interpolate.h).
#include "config/interpolate.h"

#include "base/env.h"

namespace dlrun::config {

std::string interpolate(const std::string& s, const SourceLoc& loc, const std::string& key) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t start = s.find("${", i);
    if (start == std::string::npos) {
      out += s.substr(i);
      break;
    }
    if (start > i && s[start - 1] == '$') {  // "$${" is a literal "${"
      out += s.substr(i, start - i - 1) + "${";
      i = start + 2;
      continue;
    }
    out += s.substr(i, start - i);
    size_t end = s.find('}', start);
    if (end == std::string::npos) fail_at(loc, key, "unterminated '${' in '" + s + "'");
    std::string body = s.substr(start + 2, end - start - 2);
    if (body.rfind("env:", 0) != 0)
      fail_at(loc, key, "unsupported interpolation '${" + body + "}'",
          "only ${env:NAME} and ${env:NAME,default} are supported; write $${ for a literal ${");
    std::string spec = body.substr(4);
    size_t comma = spec.find(',');
    std::string name = spec.substr(0, comma);
    if (name.empty()) fail_at(loc, key, "empty variable name in '${" + body + "}'");
    if (const auto v = env_if_set(name.c_str())) out += *v;
    else if (comma != std::string::npos) out += spec.substr(comma + 1);
    else fail_at(loc, key, "environment variable " + name + " is not set", "give a default: ${env:" + name + ",value}");
    i = end + 1;
  }
  return out;
}

void interpolate_tree(Tree& t, const std::string& key) {
  if (t.type == Tree::Type::kScalar && t.scalar.find("${") != std::string::npos) {
    t.scalar = interpolate(t.scalar, t.loc, key);
    t.quoted = false;  // "${env:EPOCHS,3}" may feed an integer field
  }
  for (auto& [k, v] : t.map) {
    auto copy = std::make_shared<Tree>(*v);  // children may be shared with other trees
    v = copy;
    interpolate_tree(*v, key.empty() ? k : key + "." + k);
  }
  for (size_t i = 0; i < t.list.size(); ++i) {
    t.list[i] = std::make_shared<Tree>(*t.list[i]);
    interpolate_tree(*t.list[i], key + "[" + std::to_string(i) + "]");
  }
}

}  // namespace dlrun::config
