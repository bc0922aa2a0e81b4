// kerntune's version string.
#pragma once
#include <string>

namespace kt {

/// The library version, "MAJOR.MINOR.PATCH" (the CMake project version), e.g. "0.1.0".
inline const char* version_cstr() { return "0.1.0"; }
inline std::string version() { return version_cstr(); }

}  // namespace kt
