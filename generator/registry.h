// The family registry (the Manifest): every kernel family kerntune knows, as a kt::Family. The tuner,
// `autotune show`, the runtime's lookup chain and kernel cache iterate it.
#pragma once
#include <string>
#include <vector>

#include "generator/family.h"

namespace kt {

/// All registered families, in a fixed order (the order of the lines in registry.cpp).
const std::vector<const Family*>& families();

/// Throws std::invalid_argument("unknown family 'x': known are ...") if name is not registered.
const Family& find_family(const std::string& name);

/// The family's position in families(); throws as find_family.
int family_index(const std::string& name);

}  // namespace kt
