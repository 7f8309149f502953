// The names a config key accepts when a registry above the config owns them: the model zoo
// (model.name), the datasets (data.name), the training transforms (data.augment). Each registry
// registers its list here when the program starts, so the schema reads the names from the one
// place they are defined -- a new dataset is its file and one registry line, not also a line of
// schema.cpp -- and a wrong name is still refused while the config loads, at its file:line with
// a "did you mean". A program that links no such registry (the torch-free tools and tests)
// registers nothing, and the key then takes any name: the registry refuses an unknown one when
// it is asked for it.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace dlrun::config {

using NameList = std::function<std::vector<std::string>()>;

/// Registers where the names `dotted_key` ("data.name") accepts come from (a later
/// registration replaces an earlier one). Returns true, for a registration at static
/// initialisation: `const bool registered = config::register_choices(...)`.
bool register_choices(const std::string& dotted_key, NameList names);

/// The names registered for `dotted_key`, in the registry's order; empty when none is registered.
std::vector<std::string> registered_choices(const std::string& dotted_key);

}  // namespace dlrun::config
