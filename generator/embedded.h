// Device headers (templates/**/*.cuh, *.h) embedded into the binary at build time by cmake/embed.cmake.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace kt {

/// One embedded header: `name` is its path relative to templates/ (how kernels #include it and how
/// NVRTC receives it), `data`/`size` its bytes.
struct EmbeddedFile {
  const char* name;
  const char* data;
  std::size_t size;
};

/// All embedded device headers, sorted by name.
const std::vector<EmbeddedFile>& embedded_headers();

/// content_hash over every embedded header's name and bytes: part of every cubin cache key.
const std::string& embedded_headers_hash();

}  // namespace kt
