// YAML text -> Tree with locations (see tree.h).
#include "config/tree.h"

#include <yaml-cpp/yaml.h>

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

SourceLoc loc_of(const YAML::Mark& m, const std::string& file) {
  if (m.line < 0) return SourceLoc{file, 0, 0};
  return SourceLoc{file, m.line + 1, m.column + 1};
}

std::shared_ptr<Tree> convert(const YAML::Node& n, const std::string& file) {
  auto t = std::make_shared<Tree>();
  t->loc = loc_of(n.Mark(), file);
  switch (n.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      t->type = Tree::Type::kNull;
      break;
    case YAML::NodeType::Scalar:
      t->type = Tree::Type::kScalar;
      t->scalar = n.Scalar();
      // yaml-cpp tags plain scalars "?" and quoted ones "!".
      t->quoted = n.Tag() == "!";
      break;
    case YAML::NodeType::Sequence:
      t->type = Tree::Type::kList;
      for (const auto& item : n) t->list.push_back(convert(item, file));
      break;
    case YAML::NodeType::Map:
      t->type = Tree::Type::kMap;
      for (const auto& kv : n) {
        SourceLoc kloc = loc_of(kv.first.Mark(), file);
        if (!kv.first.IsScalar())
          throw Error(ExitCode::kBadInput, kloc, "", "mapping keys must be plain names");
        std::string key = kv.first.Scalar();
        if (t->get(key))
          throw Error(ExitCode::kBadInput, kloc, key,
                      fmt::format("duplicate key (first at line {})", t->key_loc(key).line));
        t->map.emplace_back(key, convert(kv.second, file));
        t->key_locs.emplace_back(key, kloc);
      }
      break;
  }
  return t;
}

}  // namespace

std::shared_ptr<Tree> parse_yaml(const std::string& text, const std::string& file) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    throw Error(ExitCode::kBadInput, loc_of(e.mark, file), "", "malformed YAML: " + e.msg);
  }
  if (docs.size() > 1)
    throw Error(ExitCode::kBadInput, SourceLoc{file, 0, 0}, "",
                "expected one YAML document, found " + std::to_string(docs.size()));
  if (docs.empty() || docs[0].IsNull()) {
    auto t = std::make_shared<Tree>();
    t->type = Tree::Type::kMap;
    t->loc = SourceLoc{file, 1, 1};
    return t;
  }
  auto t = convert(docs[0], file);
  if (t->type != Tree::Type::kMap)
    throw Error(ExitCode::kBadInput, t->loc, "", "the top level of a config must be a mapping of sections");
  return t;
}

std::shared_ptr<Tree> parse_yaml_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ExitCode::kBadInput, SourceLoc{path, 0, 0}, "", "cannot read config file (does it exist?)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_yaml(ss.str(), path);
}

std::shared_ptr<Tree> merge(const std::shared_ptr<Tree>& base, const std::shared_ptr<Tree>& over) {
  if (!base) return over;
  if (!over) return base;
  if (base->type != Tree::Type::kMap || over->type != Tree::Type::kMap) return over;
  auto out = std::make_shared<Tree>(*base);
  out->loc = over->loc;
  for (const auto& [k, v] : over->map) {
    auto prev = out->get(k);
    out->set(k, prev ? merge(prev, v) : v, over->key_loc(k));
  }
  return out;
}

}  // namespace dlrun::config
