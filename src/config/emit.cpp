// Config -> YAML text (`dlrun config show`, RUN_DIR/config.yaml). Written by hand rather
// than with YAML::Emitter so the output is stable and round-trips exactly through load().
#include <fmt/format.h>

#include <regex>

#include "config/loader.h"
#include "config/schema.h"

namespace dlrun::config {
namespace {

bool plain_ok(const std::string& s) {
  static const std::regex safe("^[A-Za-z_/.][A-Za-z0-9_./:+-]*$");
  static const char* reserved[] = {"true", "false", "True", "False", "TRUE", "FALSE", "null",
                                   "Null", "NULL", "yes", "no", "on", "off", "y", "n", "~"};
  // A trailing ':' would start a nested mapping (`name: cuda:`).
  if (!std::regex_match(s, safe) || s.back() == ':') return false;
  for (const char* r : reserved)
    if (s == r) return false;
  return true;
}

std::string quote(const std::string& raw) {
  if (plain_ok(raw)) return raw;
  // A literal "${" must not be read back as interpolation: the loader reads "$${" as "${".
  std::string s;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '$' && i + 1 < raw.size() && raw[i + 1] == '{') s += '$';
    s += raw[i];
  }
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else out += c;
  }
  return out + "\"";
}

std::string num(double v) {
  // Shortest representation that reads back to the same double; keep a '.' or exponent so
  // the text stays visibly a float.
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

template <typename T, typename F>
std::string list(const std::vector<T>& v, F f) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + f(v[i]);
  return out + "]";
}

// The field's doc, plus its choices and "required" where the doc does not say them.
std::string doc_line(const Field& f) {
  std::string doc = f.doc;
  if (!f.choices.empty() && doc.find(f.choices[0]) == std::string::npos) {
    std::string list;
    for (const auto& c : f.choices) list += (list.empty() ? "" : " | ") + c;
    doc += ": " + list;
  }
  if (f.required) doc += " (required)";
  return doc;
}

}  // namespace

std::string to_yaml(const Config& cfg_in, bool docs) {
  Config cfg = cfg_in;  // describe() needs a mutable Config; we only read through it
  std::string out;
  for (const auto& sec : describe(cfg)) {
    out += sec.name + ":";
    if (docs) out += "  # " + sec.doc;
    out += "\n";
    for (const auto& f : sec.fields) {
      std::string v;
      switch (f.kind) {
        case Kind::kBool: v = *static_cast<bool*>(f.ptr) ? "true" : "false"; break;
        case Kind::kInt: v = std::to_string(*static_cast<int64_t*>(f.ptr)); break;
        case Kind::kFloat: v = num(*static_cast<double*>(f.ptr)); break;
        case Kind::kString: {
          const auto& s = *static_cast<std::string*>(f.ptr);
          v = s.empty() ? (f.nullable ? "null" : "\"\"") : quote(s);
          break;
        }
        case Kind::kStringList: v = list(*static_cast<std::vector<std::string>*>(f.ptr), quote); break;
        case Kind::kIntList:
          v = list(*static_cast<std::vector<int64_t>*>(f.ptr), [](int64_t x) { return std::to_string(x); });
          break;
        case Kind::kFloatList: v = list(*static_cast<std::vector<double>*>(f.ptr), num); break;
      }
      std::string line = "  " + f.name + ": " + v;
      if (docs) {
        if (line.size() < 40) line.resize(40, ' ');
        line += "  # " + doc_line(f);
      }
      out += line + "\n";
    }
  }
  return out;
}

}  // namespace dlrun::config
