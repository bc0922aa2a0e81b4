#include "tuner/sweep_sample.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>
#include <unordered_set>
#include <utility>

namespace kt::sweep {
namespace {

std::vector<std::string> split(const std::string& s, const std::string& sep) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e; (e = s.find(sep, b)) != std::string::npos; b = e + sep.size()) out.push_back(s.substr(b, e - b));
  out.push_back(s.substr(b));
  return out;
}

/// One config token with its size numbers dropped (kernel_class's rule); `mainloop` is the token that names the
/// config's mainloop ("gemv", "mmasync", ...) or empty.
std::string class_token(const std::string& tok, const std::string& mainloop) {
  size_t i = 0;
  while (i < tok.size() && std::isalpha(static_cast<unsigned char>(tok[i]))) ++i;
  const std::string letters = tok.substr(0, i), rest = tok.substr(i);
  if (rest.empty() || !std::isdigit(static_cast<unsigned char>(rest[0]))) return tok;  // a word: a strategy
  if (letters == "r") return tok;                                                      // raster order
  if (letters == "s" && (mainloop == "gemv" || mainloop == "mmasync")) return tok;     // load strategy
  if (rest == "0" || rest == "1") return tok;                                          // off / none / one
  std::string out = letters;
  for (char c : rest)
    if (!std::isdigit(static_cast<unsigned char>(c))) out += c;  // "w1x4" -> "wx"
  return out;
}

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t name_hash(const std::string& s, uint64_t seed) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a, then mixed with the seed
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return mix(h ^ mix(seed));
}

}  // namespace

std::string kernel_class(const std::string& variant_name) {
  const auto parts = split(variant_name, "__");
  if (parts.size() != 4) return variant_name;
  const auto toks = split(parts[2], "_");
  // The mainloop: the leading tokens without digits ("gemv", "wgmma_ws"); none for the mma mainloop ("m64_...").
  std::string mainloop;
  size_t i = 0;
  for (; i < toks.size() && std::none_of(toks[i].begin(), toks[i].end(), [](char c) { return std::isdigit(c); }); ++i)
    mainloop += (mainloop.empty() ? "" : "_") + toks[i];
  std::string out = parts[0] + "__" + parts[1] + "__" + (mainloop.empty() ? "mma" : mainloop);
  for (; i < toks.size(); ++i) out += "_" + class_token(toks[i], mainloop);
  return out + "__" + parts[3];
}

std::vector<size_t> sample(const std::vector<std::string>& variants, const std::vector<bool>& is_default, size_t sample,
                           uint64_t seed, SampleStats* stats) {
  if (is_default.size() != variants.size())
    throw std::invalid_argument("sweep::sample: is_default has " + std::to_string(is_default.size()) + " entries for " +
                                std::to_string(variants.size()) + " variants");
  SampleStats st;
  std::vector<bool> take(variants.size(), false);
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < variants.size(); ++i)
    if (seen.insert(kernel_class(variants[i])).second) take[i] = true, ++st.classes;
  for (size_t i = 0; i < variants.size(); ++i)
    if (is_default[i] && !take[i]) take[i] = true, ++st.defaults;
  std::vector<std::pair<uint64_t, size_t>> rest;
  for (size_t i = 0; i < variants.size(); ++i)
    if (!take[i]) rest.emplace_back(name_hash(variants[i], seed), i);
  const size_t n = std::min(sample, rest.size());
  std::partial_sort(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(n), rest.end());
  for (size_t k = 0; k < n; ++k) take[rest[k].second] = true;
  st.random = n;
  std::vector<size_t> out;
  for (size_t i = 0; i < variants.size(); ++i)
    if (take[i]) out.push_back(i);
  if (stats) *stats = st;
  return out;
}

}  // namespace kt::sweep
