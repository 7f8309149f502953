// Config loading: files -> Tree (with base: and ${env:}) -> overrides -> typed binding.
#include "config/loader.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <cctype>
#include <functional>
#include <limits>
#include <map>

#include "config/schema.h"
#include "config/tree.h"

namespace fs = std::filesystem;

namespace dlrun::config {
namespace {

[[noreturn]] void bad(const SourceLoc& loc, const std::string& key, const std::string& msg,
                      const std::string& hint = {}) {
  throw Error(ExitCode::kBadInput, loc, key, msg, hint);
}

std::string interpolate(const std::string& s, const SourceLoc& loc, const std::string& key);

std::string describe_value(const Tree& t) {
  switch (t.type) {
    case Tree::Type::kNull: return "null";
    case Tree::Type::kScalar:  // a value pasted by mistake may be megabytes long: show its start
      if (t.scalar.size() > 80)
        return fmt::format("'{}...' ({} characters)", t.scalar.substr(0, 40), t.scalar.size());
      return "'" + t.scalar + "'";
    case Tree::Type::kMap: return "a mapping";
    case Tree::Type::kList: return "a list";
  }
  return "?";
}

// ---- groups: train.ema: {decay: 0.999} is train.ema_decay -------------------------------

/// Whether `section` has keys named `group`_* and no key named `group` itself.
bool is_group(const std::string& section, const std::string& group) {
  static const std::map<std::string, std::vector<std::string>> fields = [] {
    std::map<std::string, std::vector<std::string>> m;
    Config c;
    for (const auto& sec : describe(c))
      for (const auto& f : sec.fields) m[sec.name].push_back(f.name);
    return m;
  }();
  const auto it = fields.find(section);
  if (it == fields.end()) return false;
  bool members = false;
  for (const auto& f : it->second) {
    if (f == group) return false;
    members = members || f.rfind(group + "_", 0) == 0;
  }
  return members;
}

/// Rewrites each group mapping of one file's sections into the flat keys it stands for, before
/// files and overrides are merged (so a later file or the command line overrides either form).
void flatten_groups(Tree& root) {
  for (auto& [section, body] : root.map) {
    if (body->type != Tree::Type::kMap) continue;
    const Tree old = *body;
    body->map.clear();
    body->key_locs.clear();
    for (const auto& [key, value] : old.map) {
      if (value->type != Tree::Type::kMap || !is_group(section, key)) {
        body->set(key, value, old.key_loc(key));
        continue;
      }
      for (const auto& [sub, v] : value->map) {
        const std::string flat = key + "_" + sub;
        if (old.get(flat) || body->get(flat))
          bad(value->key_loc(sub), section + "." + flat, "set twice",
              fmt::format("as {0}.{1} and as {0}.{2}.{3}: keep one", section, flat, key, sub));
        body->set(flat, v, value->key_loc(sub));
      }
    }
  }
}

// ---- base: inheritance -------------------------------------------------------------------

std::shared_ptr<Tree> load_with_bases(const std::string& path, std::vector<std::string>& stack,
                                      const SourceLoc& included_from);

std::shared_ptr<Tree> resolve_bases(std::shared_ptr<Tree> tree, const std::string& file,
                                    std::vector<std::string>& stack) {
  if (tree->type == Tree::Type::kMap) flatten_groups(*tree);
  auto base = tree->get("base");
  if (!base) return tree;
  std::vector<std::shared_ptr<Tree>> names;
  if (base->type == Tree::Type::kScalar) names.push_back(base);
  else if (base->type == Tree::Type::kList) names = base->list;
  else if (base->type != Tree::Type::kNull)
    bad(base->loc, "base", "expected a file path or a list of file paths, got " + describe_value(*base));
  std::shared_ptr<Tree> merged;
  fs::path dir = file.empty() ? fs::current_path() : fs::path(file).parent_path();
  for (const auto& n : names) {
    if (n->type != Tree::Type::kScalar) bad(n->loc, "base", "expected a file path, got " + describe_value(*n));
    std::string name = interpolate(n->scalar, n->loc, "base");
    if (name.empty()) bad(n->loc, "base", "empty base file path");
    fs::path p = fs::path(name).is_absolute() ? fs::path(name) : dir / name;
    merged = merge(merged, load_with_bases(p.lexically_normal().string(), stack, n->loc));
  }
  auto own = std::make_shared<Tree>(*tree);
  own->erase("base");
  return merge(merged, own);
}

std::shared_ptr<Tree> load_with_bases(const std::string& path, std::vector<std::string>& stack,
                                      const SourceLoc& included_from) {
  std::error_code ec;
  std::string canon = fs::weakly_canonical(path, ec).string();
  if (ec) canon = path;
  for (const auto& s : stack)
    if (s == canon) {
      std::string chain;
      for (const auto& x : stack) chain += x + " -> ";
      bad(included_from, "base", "inheritance cycle: " + chain + canon);
    }
  if (!fs::exists(path)) {
    if (included_from.file.empty())
      bad(SourceLoc{path, 0, 0}, "", "config file not found");
    bad(included_from, "base", "base file not found: " + path);
  }
  stack.push_back(canon);
  auto tree = resolve_bases(parse_yaml_file(path), path, stack);
  stack.pop_back();
  return tree;
}

// ---- ${env:NAME} / ${env:NAME,default} -----------------------------------------------------

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
    if (end == std::string::npos) bad(loc, key, "unterminated '${' in '" + s + "'");
    std::string body = s.substr(start + 2, end - start - 2);
    if (body.rfind("env:", 0) != 0)
      bad(loc, key, "unsupported interpolation '${" + body + "}'",
          "only ${env:NAME} and ${env:NAME,default} are supported; write $${ for a literal ${");
    std::string spec = body.substr(4);
    size_t comma = spec.find(',');
    std::string name = spec.substr(0, comma);
    if (name.empty()) bad(loc, key, "empty variable name in '${" + body + "}'");
    const char* v = std::getenv(name.c_str());
    if (v) out += v;
    else if (comma != std::string::npos) out += spec.substr(comma + 1);
    else bad(loc, key, "environment variable " + name + " is not set", "give a default: ${env:" + name + ",value}");
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

// ---- overrides ------------------------------------------------------------------------------

void apply_override(std::shared_ptr<Tree>& root, const std::string& arg) {
  SourceLoc loc{"command line '" + arg + "'", 0, 0};
  size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    bad(loc, "", "an override must be key=value (e.g. optim.lr=0.1)");
  std::string key = arg.substr(0, eq);
  std::string value = arg.substr(eq + 1);
  if (key == "base") bad(loc, "base", "base cannot be overridden on the command line");
  std::vector<std::string> parts;
  size_t p = 0;
  while (true) {
    size_t dot = key.find('.', p);
    parts.push_back(key.substr(p, dot == std::string::npos ? std::string::npos : dot - p));
    if (dot == std::string::npos) break;
    p = dot + 1;
  }
  for (const auto& part : parts)
    if (part.empty()) bad(loc, key, "malformed key");
  if (parts.size() == 3 && is_group(parts[0], parts[1])) {  // train.ema.decay=...: train.ema_decay
    parts[1] += "_" + parts[2];
    parts.pop_back();
  }
  std::shared_ptr<Tree> val;
  try {
    // Parse the value as a YAML flow node, so [a,b] is a list and null is null.
    auto text = "v: " + value;
    auto t = parse_yaml(text, loc.file);
    val = t->get("v");
  } catch (const Error& e) {
    bad(loc, key, "cannot parse value '" + value + "': " + e.message());
  }
  if (!val) val = std::make_shared<Tree>();
  // Relocate every node to the command line.
  std::function<void(Tree&)> relocate = [&](Tree& t) {
    t.loc = loc;
    for (auto& kv : t.key_locs) kv.second = loc;
    for (auto& [k, v] : t.map) relocate(*v);
    for (auto& v : t.list) relocate(*v);
  };
  relocate(*val);
  // Build {a: {b: value}} and merge it over the root.
  std::shared_ptr<Tree> patch = val;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    auto m = std::make_shared<Tree>();
    m->type = Tree::Type::kMap;
    m->loc = loc;
    m->set(*it, patch, loc);
    patch = m;
  }
  flatten_groups(*patch);  // train.ema={decay: 0.9} too
  // Whole-value replacement at the leaf: merge() would deep-merge two maps, which is right.
  root = merge(root, patch);
}

// ---- binding ----------------------------------------------------------------------------------

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
    bad(loc, key, fmt::format("value {} is out of range ({})", fmt_num(v), range));
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
  bad(loc, key, fmt::format("invalid value '{}' (valid: {})", v, list),
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
    bad(loc, key, fmt::format("expected {}, got {}{}", kind_name(f.kind), describe_value(t),
                              t.quoted ? " (quoted, so a string)" : ""), hint);
  };
  if (t.type == Tree::Type::kNull && !f.nullable)
    bad(loc, key, fmt::format("cannot be null (expected {})", kind_name(f.kind)));
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
            bad(item.loc, ikey, "expected a string, got " + describe_value(item));
          check_choice(f, item.scalar, item.loc, ikey);
          sv.push_back(item.scalar);
        } else if (f.kind == Kind::kIntList) {
          int64_t v;
          if (!parse_int(item, v))
            bad(item.loc, ikey, "expected an integer, got " + describe_value(item) + (item.quoted ? " (quoted, so a string)" : ""));
          check_range(f, static_cast<double>(v), item.loc, ikey);
          iv.push_back(v);
        } else {
          double v;
          if (!parse_double(item, v))
            bad(item.loc, ikey, "expected a number, got " + describe_value(item) + (item.quoted ? " (quoted, so a string)" : ""));
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

Config bind_tree(const Tree& root, const std::string& file) {
  Config cfg;
  cfg.source_file = file;
  auto sections = describe(cfg);
  std::vector<std::string> section_names;
  for (const auto& s : sections) section_names.push_back(s.name);
  const auto keys = all_keys();  // for "did you mean" across sections

  for (const auto& [name, value] : root.map) {
    const std::string& sname = name;  // (a structured binding cannot be captured before C++20)
    auto sec = std::find_if(sections.begin(), sections.end(), [&](const Section& s) { return s.name == sname; });
    if (sec == sections.end()) {
      std::string close = did_you_mean(name, section_names);
      std::string all;
      for (const auto& s : section_names) all += (all.empty() ? "" : ", ") + s;
      bad(root.key_loc(name), name, "unknown section",
          close.empty() ? "sections are: " + all : "did you mean '" + close + "'?");
    }
    if (value->type == Tree::Type::kNull) continue;
    if (value->type != Tree::Type::kMap)
      bad(value->loc, name, "a section must be a mapping of keys, got " + describe_value(*value));
    for (const auto& [fname, fvalue] : value->map) {
      std::string dotted = name + "." + fname;
      const std::string& field_name = fname;
      auto f = std::find_if(sec->fields.begin(), sec->fields.end(), [&](const Field& x) { return x.name == field_name; });
      if (f == sec->fields.end()) {
        std::vector<std::string> local;
        for (const auto& x : sec->fields) local.push_back(x.name);
        std::string close = did_you_mean(fname, local);
        if (!close.empty()) {
          close = name + "." + close;
        } else {  // the right key in the wrong section, e.g. optim.warmup_epochs
          std::vector<std::string> elsewhere;
          for (const auto& k : keys)
            if (k.substr(k.find('.') + 1) == fname) elsewhere.push_back(k);
          if (elsewhere.size() == 1) close = elsewhere[0];
        }
        bad(value->key_loc(fname), dotted, "unknown key",
            close.empty() ? "see `dlrun config show` for every key" : "did you mean '" + close + "'?");
      }
      bind_field(*f, *fvalue, dotted);
      cfg.origin[dotted] = fvalue->loc;
    }
  }
  // Required values.
  for (const auto& sec : sections)
    for (const auto& f : sec.fields) {
      std::string dotted = sec.name + "." + f.name;
      if (f.required && !cfg.origin.count(dotted)) {
        std::string list;
        for (const auto& c : f.choices) list += (list.empty() ? "" : ", ") + c;
        bad(SourceLoc{file, 0, 0}, dotted, "missing required value",
            fmt::format("set it in the file ({}: {{{}: ...}}) or as {}=...; one of: {}", sec.name, f.name, dotted, list));
      }
    }
  return cfg;
}

Config finish(std::shared_ptr<Tree> tree, const std::string& file, const std::vector<std::string>& overrides) {
  // Overrides first, so a value given on the command line may use ${env:...} too.
  auto own = std::make_shared<Tree>(*tree);
  for (const auto& o : overrides) apply_override(own, o);
  interpolate_tree(*own, "");
  return bind_tree(*own, file);
}

}  // namespace

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  auto lower = [](std::string s) {
    for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  };
  auto dist = [](const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  // Case-insensitive; short words may be one edit off, longer ones a third of their length.
  const std::string w = lower(word);
  size_t max_d = w.size() <= 3 ? 1 : std::max<size_t>(2, w.size() / 3);
  std::string best;
  size_t best_d = max_d + 1;
  for (const auto& c : candidates) {
    size_t d = dist(w, lower(c));
    if (d < best_d && d < std::max(w.size(), c.size())) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

Config load(const std::string& path, const std::vector<std::string>& overrides) {
  std::vector<std::string> stack;
  auto tree = load_with_bases(path, stack, SourceLoc{});
  return finish(tree, path, overrides);
}

Config load_text(const std::string& text, const std::string& file, const std::vector<std::string>& overrides) {
  std::vector<std::string> stack;
  std::error_code ec;
  stack.push_back(fs::weakly_canonical(file, ec).string());
  auto tree = resolve_bases(parse_yaml(text, file), file, stack);
  return finish(tree, file, overrides);
}

}  // namespace dlrun::config
