// The config schema: one descriptor per field of Config (options.h), built by describe().
// This table is the one place where a key's meaning, range and choices are written: the
// loader parses through it, `config show` and RUN_DIR/config.yaml are emitted from it, and
// `dlrun config docs` prints the reference in docs/configuration.md from it. Descriptors point
// into a Config, so the loader writes through them and the emitter reads.
#pragma once

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "config/options.h"

namespace dlrun::config {

enum class Kind { kBool, kInt, kFloat, kString, kEnum, kStringList, kIntList, kFloatList };

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
  bool auto_ok = false;              ///< kFloat: the word `auto` is allowed, held as NaN
  /// kEnum: read and write the member as the index of its name in `choices`.
  std::function<int()> get_index;
  std::function<void(int)> set_index;
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

/// The field `dotted` ("optim.name") of `sections`, or nullptr.
const Field* find_field(const std::vector<Section>& sections, const std::string& dotted);

/// The value of a field as config text ("0.1", "[flip, crop]", "sgd", "null").
std::string value_text(const Field& f);

/// The reference of every key (docs/configuration.md, `dlrun config docs`): one Markdown
/// table per section with the key, its type, default, allowed values and meaning.
std::string reference_markdown();

}  // namespace dlrun::config
