// Config loading: files -> Tree (with base: inheritance, here) -> overrides (overrides.h) ->
// ${env:} (interpolate.h) -> typed binding (bind.h).
#include "config/loader.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "base/strings.h"
#include "config/bind.h"
#include "config/groups.h"
#include "config/interpolate.h"
#include "config/overrides.h"
#include "config/tree.h"

namespace fs = std::filesystem;

namespace dlrun::config {
namespace {

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
    fail_at(base->loc, "base", "expected a file path or a list of file paths, got " + describe_value(*base));
  std::shared_ptr<Tree> merged;
  fs::path dir = file.empty() ? fs::current_path() : fs::path(file).parent_path();
  for (const auto& n : names) {
    if (n->type != Tree::Type::kScalar) fail_at(n->loc, "base", "expected a file path, got " + describe_value(*n));
    std::string name = interpolate(n->scalar, n->loc, "base");
    if (name.empty()) fail_at(n->loc, "base", "empty base file path");
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
      fail_at(included_from, "base", "inheritance cycle: " + chain + canon);
    }
  if (!fs::exists(path)) {
    if (included_from.file.empty())
      fail_at(SourceLoc{path, 0, 0}, "", "config file not found");
    fail_at(included_from, "base", "base file not found: " + path);
  }
  stack.push_back(canon);
  auto tree = resolve_bases(parse_yaml_file(path), path, stack);
  stack.pop_back();
  return tree;
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
