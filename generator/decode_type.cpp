// attention_decode as a kt::Family: the typed rules of decode_family.h behind the family-neutral interface.
#include <cmath>

#include "generator/decode_family.h"
#include "generator/family_adapter.h"

namespace kt {
namespace decode {
namespace {

struct Traits {
  using Problem = decode::Problem;
  using Config = decode::Config;
  static constexpr const char* name = kFamily;
  static constexpr const char* description =
      "attention decode: split-KV flash decoding over a contiguous or paged KV cache, GQA packing, q_len 1..16, "
      "fp16/bf16";
  static constexpr const char* rejected_as = "invalid";

  static Problem problem_from_json(const nlohmann::json& j) { return decode::problem_from_json(j); }
  static nlohmann::json problem_to_json(const Problem& p) { return decode::problem_to_json(p); }
  static Config config_from_json(const nlohmann::json& j) { return decode::config_from_json(j); }
  static nlohmann::json config_to_json(const Config& c) { return decode::config_to_json(c); }
  static void check_problem(const Problem& p) { decode::check_problem(p); }
  static std::string key(const Problem& p) { return p.key(); }

  /// The key less batch and kv_len, the sizes the runtime's nearest step interpolates:
  /// "attention_decode/bf16/q1/h28/kv4/d128/paged64/causal".
  static std::string class_key(const Problem& p) {
    std::string s = std::string(kFamily) + (p.dtype == DType::f16 ? "/fp16" : "/bf16") + "/q" +
                    std::to_string(p.q_len) + "/h" + std::to_string(p.num_heads) + "/kv" +
                    std::to_string(p.num_kv_heads) + "/d" + std::to_string(p.head_dim) + '/';
    s += p.kv_layout == KvLayout::paged ? "paged" + std::to_string(p.page_size) : std::string("contig");
    return s + (p.causal ? "/causal" : "/full");
  }
  /// |ln(batch/batch')| + |ln(kv_len/kv_len')|; ties toward the larger tuned kv_len (its split covers more).
  static Nearness nearness(const Problem& p, const Problem& t) {
    return {std::fabs(std::log(double(p.batch) / t.batch)) + std::fabs(std::log(double(p.kv_len) / t.kv_len)),
            -double(t.kv_len)};
  }
  static std::vector<std::pair<std::string, long long>> bucket_sizes(const Problem& p) {
    return {{"batch", p.batch}, {"kv_len", p.kv_len}};
  }
  static Problem with_bucket_sizes(Problem p, const std::vector<long long>& s) {
    p.batch = int(s[0]);
    p.kv_len = int(s[1]);
    return p;
  }
  static double flops(const Problem& p) { return p.flops(); }
  static double min_bytes(const Problem& p) { return p.min_bytes(); }

  static std::vector<Config> enumerate(const Problem& p, ArchId arch, const DeviceModel& device) {
    return valid_configs(p, arch, device);
  }
  static Config default_config(ArchId arch, const Problem& p) { return decode::default_config(arch, p); }
  static bool same_config(const Config& a, const Config& b) { return decode::same_config(a, b); }
  /// Correctness only: any valid config computes any problem of its class (row blocks and splits follow the sizes).
  static const char* unusable(const Problem& p, const Config& c, ArchId arch) {
    return invalid_reason(p.dtype, p.head_dim, p.kv_layout, c, arch);
  }

  static std::string variant_name(const Problem& p, const Config& c, ArchId arch) {
    return decode::variant_name(p, c, arch);
  }
  static std::string name_expression(const Problem& p, const Config& c) { return decode::name_expression(p, c); }
  static KernelSource kernel_source(const Problem& p, const Config& c, ArchId arch) {
    return decode::kernel_source(p, c, arch);
  }
  static LaunchDims launch_dims(const Problem& p, const Config& c, const DeviceModel&) {
    return decode::launch_dims(p, c);
  }
  static size_t workspace_bytes(const Problem& p, const Config& c, const DeviceModel&) {
    return decode::workspace_bytes(p, c) + counter_bytes(p, c);
  }
};

}  // namespace

const Family& family_type() {
  static const FamilyAdapter<Traits> f;
  return f;
}

}  // namespace decode
}  // namespace kt
