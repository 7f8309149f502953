// Binding a config's tree to the typed options (bind.h).
#include "config/bind.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <set>
#include <limits>
#include <vector>

#include "config/loader.h"
#include "config/schema.h"

namespace dlrun::config {
namespace {

std::string fmt_num(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{}", v);
}

void check_range(const Field& f, double v, const SourceLoc& loc, const std::string& key) {
  bool low = f.min_exclusive ? !(v > f.min) : v < f.min;
  if (low || v > f.max) {
    std::string range;
    if (std::isinf(f.max)) range = fmt::format("must be {} {}", f.min_exclusive ? ">" : ">=", fmt_num(f.min));
    else if (std::isinf(f.min)) range = fmt::format("must be <= {}", fmt_num(f.max));
    else range = fmt::format("must be in {}{}, {}]", f.min_exclusive ? "(" : "[", fmt_num(f.min), fmt_num(f.max));
    fail_at(loc, key, fmt::format("value {} is out of range ({})", fmt_num(v), range));
  }
}

bool parse_bool(const Tree& t, bool& out) {
  if (t.type != Tree::Type::kScalar || t.quoted) return false;
  const auto& s = t.scalar;
  if (s == "true" || s == "True" || s == "TRUE") { out = true; return true; }
  if (s == "false" || s == "False" || s == "FALSE") { out = false; return true; }
  return false;
}

// Scanners for the number forms below, by hand rather than with std::regex: libstdc++'s
// regex_match recurses once per character, so a long scalar (a few thousand digits) in a
// config overflowed the stack (found while writing the config fuzz target, docs/reliability.md).
size_t scan_digits(const std::string& s, size_t i) {
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  return i;
}
size_t scan_sign(const std::string& s, size_t i) { return i < s.size() && (s[i] == '+' || s[i] == '-') ? i + 1 : i; }

/// [+-]?[0-9]+
bool is_int_literal(const std::string& s) {
  const size_t b = scan_sign(s, 0), e = scan_digits(s, b);
  return e > b && e == s.size();
}

/// [+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?
bool is_decimal_literal(const std::string& s) {
  size_t i = scan_sign(s, 0);
  const size_t int_end = scan_digits(s, i);
  bool mantissa = int_end > i;
  i = int_end;
  if (i < s.size() && s[i] == '.') {
    const size_t frac_end = scan_digits(s, i + 1);
    mantissa = mantissa || frac_end > i + 1;
    i = frac_end;
  }
  if (!mantissa) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    const size_t b = scan_sign(s, i + 1), e = scan_digits(s, b);
    if (e == b) return false;
    i = e;
  }
  return i == s.size();
}

// Numbers are YAML 1.2 decimal literals: no hex/octal, no `.inf`/`.nan`, no `1_000`.
bool parse_double(const Tree& t, double& out) {
  if (t.type != Tree::Type::kScalar || t.quoted || !is_decimal_literal(t.scalar)) return false;
  errno = 0;
  double v = std::strtod(t.scalar.c_str(), nullptr);
  if (errno == ERANGE && std::isinf(v)) return false;
  out = v;
  return true;
}

// Integers are written as integers: `3`, not `3.0` or `3e0`.
bool parse_int(const Tree& t, int64_t& out) {
  if (t.type != Tree::Type::kScalar || t.quoted || !is_int_literal(t.scalar)) return false;
  errno = 0;
  long long v = std::strtoll(t.scalar.c_str(), nullptr, 10);
  if (errno == ERANGE) return false;
  out = static_cast<int64_t>(v);
  return true;
}

void check_choice(const Field& f, const std::string& v, const SourceLoc& loc, const std::string& key) {
  if (f.choices.empty()) return;
  if (std::find(f.choices.begin(), f.choices.end(), v) != f.choices.end()) return;
  std::string list;
  for (const auto& c : f.choices) list += (list.empty() ? "" : ", ") + c;
  std::string close = did_you_mean(v, f.choices);
  fail_at(loc, key, fmt::format("invalid value '{}' (valid: {})", v, list),
      close.empty() ? std::string() : "did you mean '" + close + "'?");
}

void bind_field(const Field& f, const Tree& t, const std::string& key) {
  const SourceLoc& loc = t.loc;
  auto type_error = [&]() {
    std::string hint;
    if (f.kind == Kind::kBool) hint = "write true or false (unquoted)";
    else if (f.kind == Kind::kInt && t.type == Tree::Type::kScalar && !t.quoted)
      hint = "write a whole number without a decimal point or exponent, e.g. 3";
    else if (t.quoted) hint = "remove the quotes";
    else if ((f.kind == Kind::kStringList || f.kind == Kind::kIntList || f.kind == Kind::kFloatList) &&
             t.type == Tree::Type::kScalar)
      hint = "write a list: [" + t.scalar + "]";
    fail_at(loc, key, fmt::format("expected {}, got {}{}", kind_name(f.kind), describe_value(t),
                                  t.quoted ? " (quoted, so a string)" : ""), hint);
  };
  if (t.type == Tree::Type::kNull && !f.nullable)
    fail_at(loc, key, fmt::format("cannot be null (expected {})", kind_name(f.kind)));
  switch (f.kind) {
    case Kind::kBool: {
      bool v;
      if (!parse_bool(t, v)) type_error();
      *static_cast<bool*>(f.ptr) = v;
      break;
    }
    case Kind::kInt: {
      int64_t v;
      if (!parse_int(t, v)) type_error();
      check_range(f, static_cast<double>(v), loc, key);
      *static_cast<int64_t*>(f.ptr) = v;
      break;
    }
    case Kind::kFloat: {
      double v;
      if (f.auto_ok && t.type == Tree::Type::kScalar && !t.quoted && t.scalar == "auto") {
        *static_cast<double*>(f.ptr) = std::numeric_limits<double>::quiet_NaN();
        break;
      }
      if (!parse_double(t, v)) type_error();
      check_range(f, v, loc, key);
      *static_cast<double*>(f.ptr) = v;
      break;
    }
    case Kind::kString: {
      if (t.type == Tree::Type::kNull) {
        static_cast<std::string*>(f.ptr)->clear();
        break;
      }
      if (t.type != Tree::Type::kScalar) type_error();
      check_choice(f, t.scalar, loc, key);
      *static_cast<std::string*>(f.ptr) = t.scalar;
      break;
    }
    case Kind::kEnum: {
      if (t.type != Tree::Type::kScalar) type_error();
      check_choice(f, t.scalar, loc, key);
      const auto it = std::find(f.choices.begin(), f.choices.end(), t.scalar);
      f.set_index(static_cast<int>(it - f.choices.begin()));
      break;
    }
    case Kind::kStringList:
    case Kind::kIntList:
    case Kind::kFloatList: {
      if (t.type != Tree::Type::kList && t.type != Tree::Type::kNull) type_error();
      std::vector<std::string> sv;
      std::vector<int64_t> iv;
      std::vector<double> dv;
      for (size_t i = 0; i < t.list.size(); ++i) {
        const Tree& item = *t.list[i];
        std::string ikey = fmt::format("{}[{}]", key, i);
        if (f.kind == Kind::kStringList) {
          if (item.type != Tree::Type::kScalar)
            fail_at(item.loc, ikey, "expected a string, got " + describe_value(item));
          check_choice(f, item.scalar, item.loc, ikey);
          sv.push_back(item.scalar);
        } else if (f.kind == Kind::kIntList) {
          int64_t v;
          if (!parse_int(item, v))
            fail_at(item.loc, ikey, "expected an integer, got " + describe_value(item) + (item.quoted ? " (quoted, so a string)" : ""));
          check_range(f, static_cast<double>(v), item.loc, ikey);
          iv.push_back(v);
        } else {
          double v;
          if (!parse_double(item, v))
            fail_at(item.loc, ikey, "expected a number, got " + describe_value(item) + (item.quoted ? " (quoted, so a string)" : ""));
          check_range(f, v, item.loc, ikey);
          dv.push_back(v);
        }
      }
      if (f.kind == Kind::kStringList) *static_cast<std::vector<std::string>*>(f.ptr) = sv;
      if (f.kind == Kind::kIntList) *static_cast<std::vector<int64_t>*>(f.ptr) = iv;
      if (f.kind == Kind::kFloatList) *static_cast<std::vector<double>*>(f.ptr) = dv;
      break;
    }
  }
}

}  // namespace

Config bind_tree(const Tree& root, const std::string& file) {
  Config cfg;
  cfg.source_file = file;
  auto sections = describe(cfg);
  std::vector<std::string> section_names;
  for (const auto& s : sections) section_names.push_back(s.name);
  const auto keys = all_keys();  // for "did you mean" across sections
  // Every mistake of the file is reported at once, as a compiler does: each key is bound on its
  // own and its error kept; the first is the error, the others follow it (at most kMaxReported).
  std::vector<Error> errors;
  std::set<std::string> given;
  auto attempt = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      if (e.code() != ExitCode::kBadInput) throw;
      errors.push_back(e);
    }
  };

  for (const auto& [name, value] : root.map) {
    const std::string& sname = name;  // (a structured binding cannot be captured before C++20)
    auto sec = std::find_if(sections.begin(), sections.end(), [&](const Section& s) { return s.name == sname; });
    if (sec == sections.end()) {
      attempt([&] {
        std::string close = did_you_mean(sname, section_names);
        std::string all;
        for (const auto& s : section_names) all += (all.empty() ? "" : ", ") + s;
        fail_at(root.key_loc(sname), sname, "unknown section",
                close.empty() ? "sections are: " + all : "did you mean '" + close + "'?");
      });
      continue;
    }
    const Tree& section = *value;  // (the lambdas below take it by name: not a structured binding)
    if (section.type == Tree::Type::kNull) continue;
    if (section.type != Tree::Type::kMap) {
      attempt([&] { fail_at(section.loc, sname, "a section must be a mapping of keys, got " + describe_value(section)); });
      continue;
    }
    for (const auto& [fname, fvalue] : section.map) {
      const std::string dotted = name + "." + fname;
      const std::string& field_name = fname;
      auto f = std::find_if(sec->fields.begin(), sec->fields.end(), [&](const Field& x) { return x.name == field_name; });
      if (f == sec->fields.end()) {
        attempt([&] {
          std::vector<std::string> local;
          for (const auto& x : sec->fields) local.push_back(x.name);
          std::string close = did_you_mean(field_name, local);
          if (!close.empty()) {
            close = sname + "." + close;
          } else {  // the right key in the wrong section, e.g. optim.warmup_epochs
            std::vector<std::string> elsewhere;
            for (const auto& k : keys)
              if (k.substr(k.find('.') + 1) == field_name) elsewhere.push_back(k);
            if (elsewhere.size() == 1) close = elsewhere[0];
          }
          fail_at(section.key_loc(field_name), dotted, "unknown key",
                  close.empty() ? "see `dlrun config show` for every key" : "did you mean '" + close + "'?");
        });
        continue;
      }
      const Tree& fv = *fvalue;
      given.insert(dotted);  // (a value there, right or wrong: not "missing")
      attempt([&] {
        bind_field(*f, fv, dotted);
        cfg.origin[dotted] = fv.loc;
      });
    }
  }
  // Required values.
  for (const auto& sec : sections)
    for (const auto& f : sec.fields) {
      std::string dotted = sec.name + "." + f.name;
      if (f.required && !cfg.origin.count(dotted) && !given.count(dotted)) {
        attempt([&] {
          std::string list;
          for (const auto& c : f.choices) list += (list.empty() ? "" : ", ") + c;
          fail_at(SourceLoc{file, 0, 0}, dotted, "missing required value",
                  fmt::format("set it in the file ({}: {{{}: ...}}) or as {}=...; one of: {}", sec.name, f.name, dotted,
                              list));
        });
      }
    }
  if (errors.size() == 1) throw errors.front();
  if (!errors.empty()) {
    constexpr size_t kMaxReported = 20;
    std::string more;
    for (size_t i = 1; i < errors.size() && i < kMaxReported; ++i) more += "\n  also: " + errors[i].render();
    if (errors.size() > kMaxReported) more += fmt::format("\n  ... and {} more", errors.size() - kMaxReported);
    const Error& first = errors.front();
    throw Error(ExitCode::kBadInput, first.loc(), first.key(),
                fmt::format("{} ({} mistakes in all; the others below){}", first.message(), errors.size(), more),
                first.hint());
  }
  return cfg;
}

}  // namespace dlrun::config
