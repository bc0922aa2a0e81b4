// The CI compile-only sweep's selection: one representative of every kernel class, every default config, and a
// fixed-seed sample of the rest (autotune --compile-only --sample N). The full sweep is autotune --compile-only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kt::sweep {

/// The kernel class of a variant, from its canonical name "<family>__<problem class>__<config>__<arch>":
/// the family, every token of the problem class (dtype, weight format = element + layout, head_dim, causal,
/// bias, rope), and the config's mainloop and strategy, i.e. the config with its tile sizes dropped. A config
/// token "<letters><number>" keeps its number when it selects code rather than a size: the load strategy
/// `s<stages>` of gemv and of the attention mainloop (mmasync), the raster order `r<n>`, and the values 0 and 1
/// of any field (split-K 1 = no reduction, prefetch 1, one consumer). Every other number is a size (tile_m,
/// tile_n, tile_k, warps, ring depth, cluster size, K groups) and is dropped: `gemv_m16_n128_w1x4_s2_p2_cl2`
/// -> `gemv_m_n_wx_s2_p_cl`. Names that do not follow the form are their own class.
std::string kernel_class(const std::string& variant_name);

struct SampleStats {
  size_t classes = 0;   ///< distinct kernel classes (one representative each)
  size_t defaults = 0;  ///< default configs (distinct, not already a representative)
  size_t random = 0;    ///< fixed-seed sample of the rest
};

/// Chooses which of `variants` to compile: the first variant of every kernel class (in input order), every
/// variant with is_default[i], and `sample` more of the rest chosen by a hash of (seed, name): the same names
/// give the same choice on every machine, and adding variants never changes which of the old ones are chosen
/// beyond displacing them from the sample. Returns indices into `variants`, ascending, without duplicates.
/// Throws std::invalid_argument when is_default's size differs from variants'.
std::vector<size_t> sample(const std::vector<std::string>& variants, const std::vector<bool>& is_default, size_t sample,
                           uint64_t seed, SampleStats* stats = nullptr);

}  // namespace kt::sweep
