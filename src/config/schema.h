// The config schema: one descriptor per field of Config (options.h), built by describe().
// Descriptors point into a Config, so the loader writes through them and the emitter reads.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "config/options.h"

namespace dlrun::config {

enum class Kind { kBool, kInt, kFloat, kString, kStringList, kIntList, kFloatList };

/// A short name of a kind for messages: "a boolean", "an integer", ...
const char* kind_name(Kind kind);

struct Field {
  std::string name;   ///< key inside its section, e.g. "lr"
  std::string doc;    ///< one line, printed by `config show --doc` and in errors
  Kind kind;
  void* ptr;          ///< points at the member of the Config passed to describe()
  double min = -std::numeric_limits<double>::infinity();  ///< inclusive lower bound (numbers, list items)
  double max = std::numeric_limits<double>::infinity();   ///< inclusive upper bound
  bool min_exclusive = false;                            ///< lower bound is exclusive
  std::vector<std::string> choices;  ///< allowed values for strings and string-list items
  bool required = false;             ///< must be set (no usable default)
  bool nullable = false;             ///< `null` allowed: means empty/auto
};

struct Section {
  std::string name;  ///< "optim"
  std::string doc;
  std::vector<Field> fields;
};

/// The descriptors of every section of `cfg`, in the order `config show` prints them.
std::vector<Section> describe(Config& cfg);

/// Every dotted key of the schema ("optim.lr", ...), for "did you mean" hints.
std::vector<std::string> all_keys();

}  // namespace dlrun::config
