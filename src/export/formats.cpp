// The table of export formats (see format.h): one line per format, in --format's order.
#include <string>
#include <vector>

#include "export/export.h"
#include "export/format.h"

namespace dlrun::exporting {

const std::vector<Format>& formats() {
  static const std::vector<Format> table = {
      {"safetensors", &write_as_safetensors},
      {"torch", &write_as_torch},
      {"onnx", &write_as_onnx, /*needs_model=*/true},
  };
  return table;
}

const Format* find_format(const std::string& name) {
  for (const Format& f : formats())
    if (name == f.name) return &f;
  return nullptr;
}

std::vector<std::string> format_names() {
  std::vector<std::string> names;
  for (const Format& f : formats()) names.emplace_back(f.name);
  return names;
}

}  // namespace dlrun::exporting
