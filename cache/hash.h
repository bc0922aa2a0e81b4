// Content hashing for the cubin cache and the tuning database. No CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kt {

/// Hash of an ordered list of byte strings: XXH3-128 (xxHash 0.8, https://github.com/Cyan4973/xxHash,
/// seed 0) over the concatenation of, for each part, its length as 8 bytes little-endian followed by
/// its bytes. The length prefix makes the split unambiguous: ("ab","c") != ("a","bc") != ("abc").
/// Returns 32 lowercase hex chars: the canonical (big-endian) 16-byte digest. Deterministic across
/// processes, machines and endianness. Never throws (except std::bad_alloc).
std::string content_hash(const std::vector<std::string_view>& parts);

/// XXH3-64 (seed 0) of `size` bytes at `data`. Deterministic across processes and machines.
uint64_t xxh3_64(const void* data, size_t size);

/// `v` as 16 lowercase hex chars, most significant nibble first.
std::string hex64(uint64_t v);

/// true if `s` is exactly 32 chars of [0-9a-f] (the form content_hash returns).
bool is_content_hash(std::string_view s);

}  // namespace kt
