// YAML text -> Tree with locations (see tree.h).
#include "config/tree.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace dlrun::config {

std::shared_ptr<Tree> Tree::get(const std::string& key) const {
  for (const auto& [k, v] : map)
    if (k == key) return v;
  return nullptr;
}

void Tree::set(const std::string& key, std::shared_ptr<Tree> value, SourceLoc kloc) {
  type = Type::kMap;
  for (auto& [k, v] : map)
    if (k == key) {
      v = std::move(value);
      for (auto& [kk, kl] : key_locs)
        if (kk == key) kl = kloc;
      return;
    }
  map.emplace_back(key, std::move(value));
  key_locs.emplace_back(key, std::move(kloc));
}

void Tree::erase(const std::string& key) {
  for (size_t i = 0; i < map.size(); ++i)
    if (map[i].first == key) {
      map.erase(map.begin() + static_cast<long>(i));
      break;
    }
  for (size_t i = 0; i < key_locs.size(); ++i)
    if (key_locs[i].first == key) {
      key_locs.erase(key_locs.begin() + static_cast<long>(i));
      break;
    }
}

SourceLoc Tree::key_loc(const std::string& key) const {
  for (const auto& [k, l] : key_locs)
    if (k == key) return l;
  return loc;
}

namespace {

constexpr std::uintmax_t kMaxConfigBytes = 16u << 20;  // 16 MiB: far beyond any real config

SourceLoc loc_of(const YAML::Mark& m, const std::string& file) {
  if (m.line < 0) return SourceLoc{file, 0, 0};
  return SourceLoc{file, m.line + 1, m.column + 1};
}

// yaml-cpp tags a plain scalar "?" and a quoted or block (| >) scalar "!". An explicit
// `!!str` also makes a string; `!!int`, `!!float`, `!!bool`, `!!null` leave the text to be
// typed by the field. Any other tag is not part of the config format.
bool scalar_is_string(const YAML::Node& n, const SourceLoc& loc, const std::string& path) {
  const std::string& tag = n.Tag();
  if (tag == "?" || tag.empty()) return false;
  if (tag == "!" || tag == "tag:yaml.org,2002:str") return true;
  for (const char* t : {"int", "float", "bool", "null"})
    if (tag == std::string("tag:yaml.org,2002:") + t) return false;
  throw Error(ExitCode::kBadInput, loc, path, "unsupported YAML tag '" + tag + "'",
              "remove the tag; quote the value to make it a string");
}

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// Limits on what one config may expand to. yaml-cpp resolves aliases by sharing nodes, so
// `a: &x [*x]` is a node that contains itself and `&a [*b, *b, ...]` chains double at each
// level ("billion laughs"): without these, converting such a file recurses until the stack
// overflows or allocates until memory runs out. Real configs are a few levels deep and a few
// hundred values in all.
constexpr int kMaxDepth = 64;
constexpr size_t kMaxValues = 100000;

struct Budget {
  const std::string& file;
  size_t values = 0;
};

std::shared_ptr<Tree> convert(const YAML::Node& n, Budget& b, const std::string& path, int depth) {
  const std::string& file = b.file;
  auto t = std::make_shared<Tree>();
  t->loc = loc_of(n.Mark(), file);
  if (depth > kMaxDepth)
    throw Error(ExitCode::kBadInput, t->loc, path,
                fmt::format("nested more than {} levels deep (or an alias that refers to itself)", kMaxDepth),
                "a dlrun config is a mapping of sections, each a few levels deep");
  if (++b.values > kMaxValues)
    throw Error(ExitCode::kBadInput, t->loc, path,
                fmt::format("the config expands to more than {} values", kMaxValues),
                "YAML aliases (*name) that repeat large anchors multiply; write the values out");
  switch (n.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      t->type = Tree::Type::kNull;
      break;
    case YAML::NodeType::Scalar:
      t->type = Tree::Type::kScalar;
      t->scalar = n.Scalar();
      t->quoted = scalar_is_string(n, t->loc, path);
      break;
    case YAML::NodeType::Sequence: {
      t->type = Tree::Type::kList;
      size_t i = 0;
      for (const auto& item : n) t->list.push_back(convert(item, b, fmt::format("{}[{}]", path, i++), depth + 1));
      break;
    }
    case YAML::NodeType::Map:
      t->type = Tree::Type::kMap;
      for (const auto& kv : n) {
        SourceLoc kloc = loc_of(kv.first.Mark(), file);
        if (!kv.first.IsScalar())
          throw Error(ExitCode::kBadInput, kloc, path, "mapping keys must be plain names");
        std::string key = kv.first.Scalar();
        if (t->get(key))
          throw Error(ExitCode::kBadInput, kloc, join(path, key),
                      fmt::format("duplicate key (first at line {})", t->key_loc(key).line));
        auto value = convert(kv.second, b, join(path, key), depth + 1);
        // An empty value (`name:`) gets the mark of the NEXT token, often on a later line;
        // report it where its key is.
        if (value->type == Tree::Type::kNull && value->loc.line > kloc.line) value->loc = kloc;
        t->map.emplace_back(key, std::move(value));
        t->key_locs.emplace_back(key, kloc);
      }
      break;
  }
  return t;
}

// yaml-cpp's messages ("illegal map value") do not say that a tab or a misaligned key
// caused them; look at the offending lines and say so.
std::string yaml_hint(const std::string& text, int line0) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  for (int i : {line0, line0 - 1}) {
    if (i < 0 || i >= static_cast<int>(lines.size())) continue;
    const std::string& l = lines[static_cast<size_t>(i)];
    size_t indent_end = l.find_first_not_of(" \t");
    if (l.substr(0, indent_end).find('\t') != std::string::npos)
      return fmt::format("line {} is indented with a tab; YAML indentation must use spaces", i + 1);
  }
  return "check the indentation and that every '[' and '{' is closed";
}


/// Counts documents, remembering where each starts; builds nothing.
struct DocumentCounter : YAML::EventHandler {
  std::vector<YAML::Mark> starts;
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

std::shared_ptr<Tree> parse_yaml(const std::string& text, const std::string& file) {
  // Not YAML::LoadAll: on a stray top-level ',' yaml-cpp 0.7's parser returns a document
  // without consuming anything, and LoadAll loops forever (found by fuzz/config_fuzz.cpp with
  // the config ","). Count documents with a handler that stops at the second, then load one.
  YAML::Node doc;
  try {
    std::stringstream in(text);
    YAML::Parser parser(in);
    DocumentCounter counter;
    while (counter.starts.size() < 2 && parser.HandleNextDocument(counter)) {
    }
    if (counter.starts.size() > 1) {
      const YAML::Mark& second = counter.starts[1];
      if (second.pos == counter.starts[0].pos)
        throw Error(ExitCode::kBadInput, loc_of(second, file), "", "malformed YAML: unexpected ','",
                    "a ',' separates items only inside [ ] or { }");
      throw Error(ExitCode::kBadInput, loc_of(second, file), "", "expected one YAML document, found 2 or more",
                  "remove the '---' separator");
    }
    doc = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error(ExitCode::kBadInput, loc_of(e.mark, file), "", "malformed YAML: " + e.msg,
                yaml_hint(text, e.mark.line));
  }
  std::vector<YAML::Node> docs;
  if (doc.IsDefined()) docs.push_back(doc);
  if (docs.empty() || docs[0].IsNull()) {
    auto t = std::make_shared<Tree>();
    t->type = Tree::Type::kMap;
    t->loc = SourceLoc{file, 1, 1};
    return t;
  }
  Budget budget{file};
  auto t = convert(docs[0], budget, "", 0);
  if (t->type != Tree::Type::kMap)
    throw Error(ExitCode::kBadInput, t->loc, "", "the top level of a config must be a mapping of sections");
  return t;
}

std::shared_ptr<Tree> parse_yaml_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(ExitCode::kBadInput, SourceLoc{path, 0, 0}, "", "is a directory, not a config file");
  // Only regular files, checked before opening: opening a FIFO blocks until a writer comes,
  // and a device (/dev/zero, /dev/stdin) would be read forever.
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw Error(ExitCode::kBadInput, SourceLoc{path, 0, 0}, "", "is not a regular file (a device, FIFO or socket)");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ExitCode::kBadInput, SourceLoc{path, 0, 0}, "", "cannot read config file (does it exist?)");
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxConfigBytes)
    throw Error(ExitCode::kBadInput, SourceLoc{path, 0, 0}, "",
                fmt::format("is {} bytes; a config file is at most {} bytes", size, kMaxConfigBytes));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_yaml(ss.str(), path);
}

std::shared_ptr<Tree> merge(const std::shared_ptr<Tree>& base, const std::shared_ptr<Tree>& over) {
  if (!base) return over;
  if (!over) return base;
  // An empty section in a child (`optim:` with its keys commented out) changes nothing.
  if (base->type == Tree::Type::kMap && over->type == Tree::Type::kNull) return base;
  if (base->type != Tree::Type::kMap || over->type != Tree::Type::kMap) return over;
  auto out = std::make_shared<Tree>(*base);
  out->loc = over->loc;
  for (const auto& [k, v] : over->map) {
    auto prev = out->get(k);
    out->set(k, prev ? merge(prev, v) : v, over->key_loc(k));
  }
  return out;
}

void fail_at(const SourceLoc& loc, const std::string& key, const std::string& message, const std::string& hint) {
  throw Error(ExitCode::kBadInput, loc, key, message, hint);
}

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

}  // namespace dlrun::config
