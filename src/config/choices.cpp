// Names registered by the registries above the config (see choices.h).
#include "config/choices.h"

#include <map>
#include <mutex>

namespace dlrun::config {
namespace {

struct Registered {
  std::mutex mu;
  std::map<std::string, NameList> by_key;
};

Registered& registered() {  // built on first use: registrations run at static initialisation
  static Registered r;
  return r;
}

}  // namespace

bool register_choices(const std::string& dotted_key, NameList names) {
  Registered& r = registered();
  std::lock_guard<std::mutex> lock(r.mu);
  r.by_key[dotted_key] = std::move(names);
  return true;
}

std::vector<std::string> registered_choices(const std::string& dotted_key) {
  NameList names;
  {
    Registered& r = registered();
    std::lock_guard<std::mutex> lock(r.mu);
    const auto it = r.by_key.find(dotted_key);
    if (it == r.by_key.end()) return {};
    names = it->second;
  }
  return names();
}

}  // namespace dlrun::config
