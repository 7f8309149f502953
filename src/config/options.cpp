// The few behaviours of the option structs (see options.h).
#include "config/options.h"

#include "base/error.h"

namespace dlrun {

SourceLoc Config::where(const std::string& key) const {
  auto it = origin.find(key);
  if (it != origin.end()) return it->second;
  return SourceLoc{source_file, 0, 0};
}

void Config::refuse(const std::string& key, const std::string& message, const std::string& hint) const {
  // A message that names the key already (a parser's own error, "checkpoint.remote: ...") would
  // read "checkpoint.remote: checkpoint.remote: ..." once the error renders the key: say it once.
  const std::string named = key + ": ";
  const std::string text = message.rfind(named, 0) == 0 ? message.substr(named.size()) : message;
  throw Error(ExitCode::kBadInput, where(key), key, text, hint);
}

double PreemptionOptions::deadline_or_default() const {
  if (!is_auto(deadline_s)) return deadline_s;
  switch (watch) {
    case NoticeSource::kAws: return 120.0;
    case NoticeSource::kGcp:
    case NoticeSource::kAzure: return 30.0;
    default: return 0.0;
  }
}

std::string DataOptions::root_or_default() const {
  if (!root.empty()) return root;
  if (name == "fashion_mnist") return "/usr/share/datasets/fashion-mnist";
  return "";
}

}  // namespace dlrun
