// Config differences (see diff.h), computed through the schema so every key is compared and
// printed the way `config show` prints it.
#include "config/diff.h"

#include "config/schema.h"

namespace dlrun::config {

std::vector<Change> changes(const Config& before_in, const Config& after_in) {
  Config before = before_in, after = after_in;  // describe() takes a mutable Config
  const auto a = describe(before), b = describe(after);
  std::vector<Change> out;
  for (size_t s = 0; s < a.size(); ++s)
    for (size_t f = 0; f < a[s].fields.size(); ++f) {
      const std::string x = value_text(a[s].fields[f]), y = value_text(b[s].fields[f]);
      if (x != y) out.push_back({a[s].name + "." + a[s].fields[f].name, x, y});
    }
  return out;
}

bool breaks_exact_resume(const std::string& key) { return key == "run.seed"; }

bool is_bookkeeping(const std::string& key) {
  const std::string section = key.substr(0, key.find('.'));
  return section == "log" || section == "profile" || section == "checkpoint" || section == "preemption" || key == "run.name" ||
         key == "run.dir" || key == "run.lock_wait_s" || key == "run.price_per_hour" || key == "data.root" || key == "data.workers" || key == "data.prefetch" ||
         key == "data.pin_memory" || key == "dist.timeout_s";
}

}  // namespace dlrun::config
