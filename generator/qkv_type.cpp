// qkv_proj as a kt::Family: the typed rules of qkv_family.h behind the family-neutral interface.
#include <cmath>

#include "generator/family_adapter.h"
#include "generator/qkv_family.h"

namespace kt {
namespace qkv {
namespace {

struct Traits {
  using Problem = qkv::Problem;
  using Config = qkv::Config;
  static constexpr const char* name = kFamily;
  static constexpr const char* description =
      "fused Q/K/V projection: block-quantized weights (int8/int4/NF4/MXFP4/NVFP4/fp16/bf16) dequantized in the "
      "GEMM mainloop, bias + RoPE + split into Q/K/V in the epilogue, split-K for small M";
  static constexpr const char* rejected_as = "unusable";

  static Problem problem_from_json(const nlohmann::json& j) { return qkv::problem_from_json(j); }
  static nlohmann::json problem_to_json(const Problem& p) { return qkv::problem_to_json(p); }
  static Config config_from_json(const nlohmann::json& j) { return qkv::config_from_json(j); }
  static nlohmann::json config_to_json(const Config& c) { return qkv::config_to_json(c); }
  static void check_problem(const Problem& p) { qkv::check_problem(p); }
  static std::string key(const Problem& p) { return p.key(); }

  /// "qkv_proj/bf16/nf4/k3584/h28/kv4/d128/bias/rope": the problem key less m (tokens are a run-time argument).
  static std::string class_key(const Problem& p) {
    return std::string(kFamily) + "/" + (p.dtype == DType::f16 ? "fp16" : "bf16") + "/" + format_tag(p.format) + "/k" +
           std::to_string(p.k) + "/h" + std::to_string(p.num_heads) + "/kv" + std::to_string(p.num_kv_heads) + "/d" +
           std::to_string(p.head_dim) + (p.has_bias ? "/bias" : "/nobias") + (p.rope ? "/rope" : "/norope");
  }
  /// |ln(m / m')|; ties to the larger m' (a config tuned for more tokens runs no more token tiles here than where
  /// it was tuned, so its grid stays within the waves it was tuned for).
  static Nearness nearness(const Problem& p, const Problem& t) {
    return {std::fabs(std::log(double(p.m) / t.m)), -double(t.m)};
  }
  static std::vector<std::pair<std::string, long long>> bucket_sizes(const Problem& p) { return {{"m", p.m}}; }
  static Problem with_bucket_sizes(Problem p, const std::vector<long long>& s) {
    p.m = int(s[0]);
    return p;
  }
  static double flops(const Problem& p) { return p.flops(); }
  static double min_bytes(const Problem& p) { return p.min_bytes(); }

  /// valid_configs prunes by the arch's limits and orders by the device model (waves over its SM count).
  static std::vector<Config> enumerate(const Problem& p, ArchId arch, const DeviceModel& device) {
    return valid_configs(p, arch, device);
  }
  static Config default_config(ArchId arch, const Problem& p) { return qkv::default_config(arch, p); }
  static bool same_config(const Config& a, const Config& b) { return qkv::same_config(a, b); }
  /// Correctness only, not the by-M pruning of valid_configs: a tile larger than M still computes the result.
  static const char* unusable(const Problem& p, const Config& c, ArchId arch) {
    if (const char* r = invalid_reason(p.dtype, p.format, p.head_dim, p.rope, c, arch)) return r;
    const int step = c.mainloop == Mainloop::gemv ? gemv_step_k(p.format) : tile_k(c);
    if (k_split_blocks(c) > 1 && k_split_blocks(c) > p.k / step) return "split_k exceeds k / tile_k";
    if (c.mainloop == Mainloop::gemv && gemv_smem_bytes(c, p.format, p.k) > gemv_smem_cap(arch.sm))
      return "gemv shared memory for this k exceeds the per-block limit";
    return nullptr;
  }

  static std::string variant_name(const Problem& p, const Config& c, ArchId arch) {
    return qkv::variant_name(p, c, arch);
  }
  static std::string name_expression(const Problem& p, const Config& c) { return qkv::name_expression(p, c); }
  static KernelSource kernel_source(const Problem& p, const Config& c, ArchId arch) {
    return qkv::kernel_source(p, c, arch);
  }
  static LaunchDims launch_dims(const Problem& p, const Config& c, const DeviceModel& d) {
    return qkv::launch_dims(p, c, d.sm_count);
  }
  static size_t workspace_bytes(const Problem& p, const Config& c, const DeviceModel& d) {
    return qkv::workspace_bytes(p, c, d.sm_count) + counter_bytes(p, c);
  }
};

}  // namespace

const Family& family_type() {
  static const FamilyAdapter<Traits> f;
  return f;
}

}  // namespace qkv
}  // namespace kt
