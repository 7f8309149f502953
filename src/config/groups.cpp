// Key groups of the config (groups.h).
#include "config/groups.h"

#include <map>
#include <vector>

#include "config/schema.h"

namespace dlrun::config {

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
          fail_at(value->key_loc(sub), section + "." + flat, "set twice",
              fmt::format("as {0}.{1} and as {0}.{2}.{3}: keep one", section, flat, key, sub));
        body->set(flat, v, value->key_loc(sub));
      }
    }
  }
}

}  // namespace dlrun::config
