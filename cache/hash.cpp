#include "cache/hash.h"

// Header-only xxHash: nothing links libxxhash.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kt {
namespace {
constexpr char kHex[] = "0123456789abcdef";
}

std::string content_hash(const std::vector<std::string_view>& parts) {
  XXH3_state_t state;  // XXH_INLINE_ALL exposes the full (aligned) definition: no heap state needed
  XXH3_128bits_reset(&state);
  for (std::string_view p : parts) {
    unsigned char len[8];
    uint64_t n = p.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
    XXH3_128bits_update(&state, len, sizeof(len));
    if (!p.empty()) XXH3_128bits_update(&state, p.data(), p.size());
  }
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&state));
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[2 * i] = kHex[c.digest[i] >> 4];
    out[2 * i + 1] = kHex[c.digest[i] & 15];
  }
  return out;
}

uint64_t xxh3_64(const void* data, size_t size) { return XXH3_64bits(data, size); }

std::string hex64(uint64_t v) {
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[i] = kHex[v & 15];
  return out;
}

bool is_content_hash(std::string_view s) {
  if (s.size() != 32) return false;
  for (char ch : s)
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  return true;
}

}  // namespace kt
