// attention_prefill as a kt::Family: the typed rules of attention_family.h behind the family-neutral interface.
#include <cmath>

#include "generator/attention_family.h"
#include "generator/family_adapter.h"

namespace kt {
namespace attn {
namespace {

struct Traits {
  using Problem = attn::Problem;
  using Config = attn::Config;
  static constexpr const char* name = kFamily;
  static constexpr const char* description =
      "flash attention forward (prefill): FlashAttention-2 online softmax, GQA/MQA, causal, fp16/bf16";
  static constexpr const char* rejected_as = "invalid";

  static Problem problem_from_json(const nlohmann::json& j) { return attn::problem_from_json(j); }
  static nlohmann::json problem_to_json(const Problem& p) { return attn::problem_to_json(p); }
  static Config config_from_json(const nlohmann::json& j) { return attn::config_from_json(j); }
  static nlohmann::json config_to_json(const Config& c) { return attn::config_to_json(c); }
  static void check_problem(const Problem& p) { attn::check_problem(p); }
  static std::string key(const Problem& p) { return p.key(); }

  /// "attention_prefill/bf16/d128/causal": the kernel class (batch, sequence lengths and heads are run-time
  /// arguments of one binary).
  static std::string class_key(const Problem& p) {
    return std::string(kFamily) + (p.dtype == DType::f16 ? "/fp16" : "/bf16") + "/d" + std::to_string(p.head_dim) +
           (p.causal ? "/causal" : "/full");
  }
  /// |ln(sq/sq')| + |ln(sk/sk')|; ties by |ln(batch*heads / batch'*heads')|.
  static Nearness nearness(const Problem& p, const Problem& t) {
    return {std::fabs(std::log(double(p.seqlen_q) / t.seqlen_q)) + std::fabs(std::log(double(p.seqlen_k) / t.seqlen_k)),
            std::fabs(std::log(double(p.batch) * p.num_heads / (double(t.batch) * t.num_heads)))};
  }
  static std::vector<std::pair<std::string, long long>> bucket_sizes(const Problem& p) {
    return {{"seqlen_q", p.seqlen_q}, {"seqlen_k", p.seqlen_k}};
  }
  static Problem with_bucket_sizes(Problem p, const std::vector<long long>& s) {
    p.seqlen_q = int(s[0]);
    p.seqlen_k = int(s[1]);
    return p;
  }
  static double flops(const Problem& p) { return p.flops(); }
  static double min_bytes(const Problem&) { return 0; }

  /// valid_configs prunes and orders by the arch's limits; it does not read the device model yet.
  static std::vector<Config> enumerate(const Problem& p, ArchId arch, const DeviceModel&) {
    return valid_configs(p, arch);
  }
  static Config default_config(ArchId arch, const Problem& p) { return attn::default_config(arch, p); }
  static bool same_config(const Config& a, const Config& b) { return attn::same_config(a, b); }
  static const char* unusable(const Problem& p, const Config& c, ArchId arch) {
    if (const char* why = invalid_reason(p.dtype, p.head_dim, p.causal, c, arch)) return why;
    return problem_reason(p, c);
  }

  static std::string variant_name(const Problem& p, const Config& c, ArchId arch) {
    return attn::variant_name(p, c, arch);
  }
  static std::string name_expression(const Problem& p, const Config& c) { return attn::name_expression(p, c); }
  static KernelSource kernel_source(const Problem& p, const Config& c, ArchId arch) {
    return attn::kernel_source(p, c, arch);
  }
  static LaunchDims launch_dims(const Problem& p, const Config& c, const DeviceModel& device) {
    return attn::launch_dims(p, c, device.sm_count);
  }
  static size_t workspace_bytes(const Problem&, const Config&, const DeviceModel&) { return 0; }
};

}  // namespace

const Family& family_type() {
  static const FamilyAdapter<Traits> f;
  return f;
}

}  // namespace attn
}  // namespace kt
