// The family registry: every kernel family kerntune knows, by name.
#pragma once
#include <string>
#include <vector>

namespace kt {

struct FamilyInfo {
  std::string name;         ///< "attention_prefill"
  std::string description;  ///< one line
};

/// All registered families, in a fixed order.
const std::vector<FamilyInfo>& families();

/// Throws std::invalid_argument("unknown family 'x': known are ...") if name is not registered.
const FamilyInfo& find_family(const std::string& name);

}  // namespace kt
