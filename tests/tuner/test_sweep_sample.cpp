// The CI sweep's selection (tuner/sweep_sample.h) on the real qwen7b sm_90a enumeration: every kernel template
// instantiation kind, every default, a deterministic sample, and far fewer binaries than the full sweep.
#include <catch2/catch.hpp>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "generator/arch.h"
#include "generator/attention_family.h"
#include "generator/qkv_family.h"
#include "tuner/attention_problems.h"
#include "tuner/qkv_problems.h"
#include "tuner/shapes_file.h"
#include "tuner/sweep_sample.h"

using namespace kt;

namespace {

struct Sweep {
  std::vector<std::string> names, expressions;
  std::vector<bool> is_default;
};

/// What autotune --compile-only --arch sm_90a --shapes shapes/qwen7b.json compiles: one entry per distinct name
/// expression, flagged when it is some problem's default config.
Sweep qwen7b_sweep() {
  const ArchId arch = parse_arch("sm_90a");
  const ShapesFile shapes = load_shapes(std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json");
  Sweep s;
  std::map<std::string, size_t> index;
  auto add = [&](const KernelSource& k, bool is_default) {
    auto [it, fresh] = index.emplace(k.name_expression, s.names.size());
    if (fresh) {
      s.names.push_back(k.variant_name);
      s.expressions.push_back(k.name_expression);
      s.is_default.push_back(false);
    }
    if (is_default) s.is_default[it->second] = true;
  };
  for (const auto& p : attention_prefill_problems(shapes)) {
    const auto def = attn::default_config(arch, p);
    for (const auto& c : attn::valid_configs(p, arch)) add(attn::kernel_source(p, c, arch), attn::same_config(c, def));
  }
  for (const auto& p : qkv_proj_problems(shapes)) {
    const auto def = qkv::default_config(arch, p);
    for (const auto& c : qkv::valid_configs(p, arch)) add(qkv::kernel_source(p, c, arch), qkv::same_config(c, def));
  }
  return s;
}

/// The compiled template and its non-numeric arguments (dtype, format, flags): "kt::qkv::qkv_gemv_tma<kt::DType::f16,
/// kt::quant::Format::int4, true, false>". Independent of the variant-name parsing kernel_class does.
std::string template_kind(const std::string& expr) {
  static const std::regex number_arg(R"((, |<)-?[0-9]+(?=[,>]))");
  return std::regex_replace(expr, number_arg, "$1#");
}

}  // namespace

TEST_CASE("kernel_class drops tile sizes and keeps problem class, mainloop and strategy", "[tuner][sweep]") {
  using sweep::kernel_class;
  const std::string g = "qkv_proj__fp16_int4_d128_bias_rope__gemv_m16_n128_w1x4_s2_p2_cl2__sm_90a";
  CHECK(kernel_class(g) == "qkv_proj__fp16_int4_d128_bias_rope__gemv_m_n_wx_s2_p_cl__sm_90a");
  // Sizes differ: same class. Load strategy (gemv stages) or reduction differ: another class.
  CHECK(kernel_class("qkv_proj__fp16_int4_d128_bias_rope__gemv_m8_n64_w2x2_s2_p4_cl4__sm_90a") == kernel_class(g));
  CHECK(kernel_class("qkv_proj__fp16_int4_d128_bias_rope__gemv_m16_n128_w1x4_s3_p2_cl2__sm_90a") != kernel_class(g));
  CHECK(kernel_class("qkv_proj__fp16_int4_d128_bias_rope__gemv_m16_n128_w1x4_s2_p2_bal__sm_90a") != kernel_class(g));
  CHECK(kernel_class("qkv_proj__bf16_int4_d128_bias_rope__gemv_m16_n128_w1x4_s2_p2_cl2__sm_90a") != kernel_class(g));
  CHECK(kernel_class("qkv_proj__fp16_int4_kb128_d128_bias_rope__gemv_m16_n128_w1x4_s2_p2_cl2__sm_90a") !=
        kernel_class(g));
  // wgmma_ws: ring depth is a size; split-K 1 / cluster split / stream-K are strategies.
  const std::string w = "qkv_proj__bf16_nf4_d128_bias_rope__wgmma_ws_m128_n128_c2_s4_sk1__sm_90a";
  CHECK(kernel_class("qkv_proj__bf16_nf4_d128_bias_rope__wgmma_ws_m64_n256_c2_s6_sk1__sm_90a") == kernel_class(w));
  CHECK(kernel_class("qkv_proj__bf16_nf4_d128_bias_rope__wgmma_ws_m128_n128_c2_s4_streamk__sm_90a") != kernel_class(w));
  // Attention: K/V stages 1 / 2 are different mainloop code; causal is part of the problem class.
  const std::string a = "attention_prefill__bf16_d128_causal__mmasync_m64_n64_w4_s2_r0__sm_80";
  CHECK(kernel_class("attention_prefill__bf16_d128_causal__mmasync_m128_n32_w8_s2_r0__sm_80") == kernel_class(a));
  CHECK(kernel_class("attention_prefill__bf16_d128_causal__mmasync_m64_n64_w4_s1_r0__sm_80") != kernel_class(a));
  CHECK(kernel_class("attention_prefill__bf16_d128_full__mmasync_m64_n64_w4_s2_r0__sm_80") != kernel_class(a));
  CHECK(kernel_class("not a variant name") == "not a variant name");
}

TEST_CASE("sweep sample: every kernel kind and default of the qwen7b sweep, deterministic, a fraction of it",
          "[tuner][sweep]") {
  const Sweep s = qwen7b_sweep();
  REQUIRE(s.names.size() > 1000);
  sweep::SampleStats st;
  const auto pick = sweep::sample(s.names, s.is_default, 64, 1, &st);
  INFO("full sweep " << s.names.size() << ", sample " << pick.size() << " = " << st.classes << " classes + "
                     << st.defaults << " defaults + " << st.random << " random");
  CHECK(pick.size() == st.classes + st.defaults + st.random);
  CHECK(st.random == 64);
  CHECK(pick.size() * 4 < s.names.size());  // the point: CI compiles a fraction
  CHECK(std::is_sorted(pick.begin(), pick.end()));
  CHECK(std::adjacent_find(pick.begin(), pick.end()) == pick.end());
  const std::set<size_t> picked(pick.begin(), pick.end());

  std::set<std::string> kinds_all, kinds_picked, classes_all, classes_picked;
  for (size_t i = 0; i < s.names.size(); ++i) {
    kinds_all.insert(template_kind(s.expressions[i]));
    classes_all.insert(sweep::kernel_class(s.names[i]));
    if (picked.count(i)) {
      kinds_picked.insert(template_kind(s.expressions[i]));
      classes_picked.insert(sweep::kernel_class(s.names[i]));
    } else {
      CHECK_FALSE(s.is_default[i]);  // every default is compiled
    }
  }
  CHECK(classes_picked == classes_all);
  CHECK(classes_all.size() == st.classes);
  // Independent of the name parsing: every template with every dtype / format / flag argument is compiled.
  CHECK(kinds_picked == kinds_all);
  CHECK(kinds_all.size() > 20);

  // Same inputs, same choice; another seed changes only the random part.
  CHECK(sweep::sample(s.names, s.is_default, 64, 1) == pick);
  const auto other = sweep::sample(s.names, s.is_default, 64, 2);
  CHECK(other.size() == pick.size());
  CHECK(other != pick);
  // Sample 0: classes and defaults only, a subset of the seeded choice.
  const auto base = sweep::sample(s.names, s.is_default, 0, 1);
  CHECK(base.size() == st.classes + st.defaults);
  CHECK(std::includes(pick.begin(), pick.end(), base.begin(), base.end()));
  // A sample larger than the rest takes everything.
  CHECK(sweep::sample(s.names, s.is_default, s.names.size(), 1).size() == s.names.size());
}

TEST_CASE("sweep sample: a new variant never reshuffles the sample of the old ones", "[tuner][sweep]") {
  std::vector<std::string> names;
  for (int m : {16, 32, 64, 128})
    for (int n : {64, 128, 256}) names.push_back("f__p__x_m" + std::to_string(m) + "_n" + std::to_string(n) + "__a");
  std::vector<bool> def(names.size(), false);
  const auto before = sweep::sample(names, def, 4, 7);
  REQUIRE(before.size() == 5);  // one class (sizes only) + 4
  names.push_back("f__p__x_m256_n512__a");
  def.push_back(false);
  const auto after = sweep::sample(names, def, 4, 7);
  size_t kept = 0;
  for (size_t i : after) kept += std::count(before.begin(), before.end(), i);
  CHECK(kept >= 4);  // at most one old pick displaced by the new name
  CHECK_THROWS_WITH(sweep::sample(names, std::vector<bool>(2), 1, 1),
                    Catch::Contains("is_default has 2 entries for 13 variants"));
}
