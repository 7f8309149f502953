// Config -> text, all from the schema table: YAML (`dlrun config show`, RUN_DIR/config.yaml),
// written by hand rather than with YAML::Emitter so the output is stable and round-trips
// exactly through load(), and the Markdown key reference (`dlrun config docs`).
#include <fmt/format.h>

#include <cmath>
#include <algorithm>
#include <cctype>

#include "config/loader.h"
#include "config/schema.h"

namespace dlrun::config {
namespace {

bool plain_ok(const std::string& s) {
  // ^[A-Za-z_/.][A-Za-z0-9_./:+-]*$, scanned by hand (std::regex recurses per character).
  auto first_ok = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '/' || c == '.'; };
  auto rest_ok = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/' || c == ':' || c == '+' ||
           c == '-';
  };
  const bool safe = !s.empty() && first_ok(s[0]) && std::all_of(s.begin() + 1, s.end(), rest_ok);
  static const char* reserved[] = {"true", "false", "True", "False", "TRUE", "FALSE", "null",
                                   "Null", "NULL", "yes", "no", "on", "off", "y", "n", "~"};
  // A trailing ':' would start a nested mapping (`name: cuda:`).
  if (!safe || s.back() == ':') return false;
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

std::string range_text(const Field& f) {
  auto fmt_num = [](double v) { return fmt::format("{}", v); };
  const bool lo = std::isfinite(f.min), hi = std::isfinite(f.max);
  if (lo && hi) return fmt::format("{}{}, {}]", f.min_exclusive ? "(" : "[", fmt_num(f.min), fmt_num(f.max));
  if (lo) return fmt::format("{} {}", f.min_exclusive ? ">" : ">=", fmt_num(f.min));
  if (hi) return fmt::format("<= {}", fmt_num(f.max));
  return "any";
}

// A Markdown table cell: a literal '|' would end the cell.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

const char* type_text(Kind k) {
  switch (k) {
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kEnum: return "choice";
    case Kind::kStringList: return "list of strings";
    case Kind::kIntList: return "list of ints";
    case Kind::kFloatList: return "list of floats";
  }
  return "?";
}

}  // namespace

std::string value_text(const Field& f) {
  switch (f.kind) {
    case Kind::kBool: return *static_cast<bool*>(f.ptr) ? "true" : "false";
    case Kind::kInt: return std::to_string(*static_cast<int64_t*>(f.ptr));
    case Kind::kFloat: {
      const double v = *static_cast<double*>(f.ptr);
      return f.auto_ok && is_auto(v) ? "auto" : num(v);
    }
    case Kind::kString: {
      const auto& s = *static_cast<std::string*>(f.ptr);
      return s.empty() ? (f.nullable ? "null" : "\"\"") : quote(s);
    }
    case Kind::kEnum: return f.choices.at(static_cast<size_t>(f.get_index()));
    case Kind::kStringList: return list(*static_cast<std::vector<std::string>*>(f.ptr), quote);
    case Kind::kIntList:
      return list(*static_cast<std::vector<int64_t>*>(f.ptr), [](int64_t x) { return std::to_string(x); });
    case Kind::kFloatList: return list(*static_cast<std::vector<double>*>(f.ptr), num);
  }
  return "?";
}

std::string to_yaml(const Config& cfg_in, bool docs) {
  Config cfg = cfg_in;  // describe() needs a mutable Config; we only read through it
  std::string out;
  for (const auto& sec : describe(cfg)) {
    out += sec.name + ":";
    if (docs) out += "  # " + sec.doc;
    out += "\n";
    for (const auto& f : sec.fields) {
      std::string line = "  " + f.name + ": " + value_text(f);
      if (docs) {
        if (line.size() < 40) line.resize(40, ' ');
        line += "  # " + doc_line(f);
      }
      out += line + "\n";
    }
  }
  return out;
}

std::string reference_markdown() {
  Config defaults;
  std::string out;
  for (const auto& sec : describe(defaults)) {
    out += fmt::format("### `{}` — {}\n\n", sec.name, sec.doc);
    out += "| key | type | default | allowed | meaning |\n| --- | --- | --- | --- | --- |\n";
    for (const auto& f : sec.fields) {
      std::string allowed;
      if (!f.choices.empty()) {
        for (const auto& c : f.choices) allowed += (allowed.empty() ? "" : ", ") + ("`" + c + "`");
        if (f.kind == Kind::kStringList) allowed = "any of " + allowed;
      } else if (f.kind == Kind::kInt || f.kind == Kind::kFloat || f.kind == Kind::kIntList ||
                 f.kind == Kind::kFloatList) {
        allowed = range_text(f);
        if (f.auto_ok) allowed += " or `auto`";
      } else if (f.kind == Kind::kBool) {
        allowed = "`true`, `false`";
      } else {
        allowed = "any";
      }
      if (f.nullable && (f.kind == Kind::kString)) allowed += " or `null`";
      const std::string def = f.required ? "(required)" : "`" + value_text(f) + "`";
      out += fmt::format("| `{}.{}` | {} | {} | {} | {} |\n", sec.name, f.name, type_text(f.kind), cell(def), cell(allowed),
                         cell(f.doc));
    }
    out += "\n";
  }
  return out;
}

}  // namespace dlrun::config
