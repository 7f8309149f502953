// Command-line overrides (overrides.h).
#include "config/overrides.h"

#include <functional>
#include <vector>

#include "config/groups.h"

namespace dlrun::config {

void apply_override(std::shared_ptr<Tree>& root, const std::string& arg) {
  SourceLoc loc{"command line '" + arg + "'", 0, 0};
  size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0)
    fail_at(loc, "", "an override must be key=value (e.g. optim.lr=0.1)");
  std::string key = arg.substr(0, eq);
  std::string value = arg.substr(eq + 1);
  if (key == "base") fail_at(loc, "base", "base cannot be overridden on the command line");
  std::vector<std::string> parts;
  size_t p = 0;
  while (true) {
    size_t dot = key.find('.', p);
    parts.push_back(key.substr(p, dot == std::string::npos ? std::string::npos : dot - p));
    if (dot == std::string::npos) break;
    p = dot + 1;
  }
  for (const auto& part : parts)
    if (part.empty()) fail_at(loc, key, "malformed key");
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
    fail_at(loc, key, "cannot parse value '" + value + "': " + e.message());
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

}  // namespace dlrun::config
