// FamilyAdapter<Traits>: a kt::Family over a family's typed host functions, so that a family writes its rules
// once, typed, and the JSON interface follows. Traits (see generator/attention_type.cpp for an example) has:
//   using Problem, Config;
//   static constexpr const char *name, *description, *rejected_as;
//   Problem problem_from_json(json); json problem_to_json(Problem); Config config_from_json(json);
//   json config_to_json(Config); void check_problem(Problem); std::string key(Problem);
//   std::string class_key(Problem); Nearness nearness(Problem asked, Problem tuned);
//   std::vector<std::pair<std::string, long long>> bucket_sizes(Problem);
//   Problem with_bucket_sizes(Problem, std::vector<long long>);
//   double flops(Problem); double min_bytes(Problem);
//   std::vector<Config> enumerate(Problem, ArchId, DeviceModel); Config default_config(ArchId, Problem);
//   bool same_config(Config, Config); const char* unusable(Problem, Config, ArchId);
//   std::string variant_name(Problem, Config, ArchId); std::string name_expression(Problem, Config);
//   KernelSource kernel_source(Problem, Config, ArchId); LaunchDims launch_dims(Problem, Config, DeviceModel);
//   size_t workspace_bytes(Problem, Config, DeviceModel);
#pragma once
#include "generator/family.h"

namespace kt {

template <class T>
class FamilyAdapter final : public Family {
 public:
  using Problem = typename T::Problem;
  using Config = typename T::Config;
  using json = nlohmann::json;

  FamilyAdapter() : name_(T::name), description_(T::description) {}

  const std::string& name() const override { return name_; }
  const std::string& description() const override { return description_; }

  json canonical_problem(const json& j) const override {
    const Problem p = T::problem_from_json(j);
    T::check_problem(p);
    return T::problem_to_json(p);
  }
  std::string problem_key(const json& j) const override { return T::key(T::problem_from_json(j)); }
  std::string class_key(const json& j) const override { return T::class_key(T::problem_from_json(j)); }
  Nearness nearness(const json& asked, const json& tuned) const override {
    return T::nearness(T::problem_from_json(asked), T::problem_from_json(tuned));
  }
  std::vector<std::pair<std::string, long long>> bucket_sizes(const json& j) const override {
    return T::bucket_sizes(T::problem_from_json(j));
  }
  json with_bucket_sizes(const json& j, const std::vector<long long>& sizes) const override {
    if (sizes.size() != T::bucket_sizes(T::problem_from_json(j)).size())
      throw ProblemError(name_ + ": with_bucket_sizes needs " +
                         std::to_string(T::bucket_sizes(T::problem_from_json(j)).size()) + " sizes, got " +
                         std::to_string(sizes.size()));
    for (long long x : sizes)
      if (x < 1 || x > (1ll << 30)) throw ProblemError(name_ + ": bucket size " + std::to_string(x) + " out of range");
    return canonical_problem(T::problem_to_json(T::with_bucket_sizes(T::problem_from_json(j), sizes)));
  }
  double flops(const json& j) const override { return T::flops(T::problem_from_json(j)); }
  double min_bytes(const json& j) const override { return T::min_bytes(T::problem_from_json(j)); }

  std::vector<json> enumerate(const json& j, ArchId arch, const DeviceModel& device) const override {
    std::vector<json> out;
    for (const Config& c : T::enumerate(T::problem_from_json(j), arch, device)) out.push_back(T::config_to_json(c));
    return out;
  }
  json default_config(const json& j, ArchId arch) const override {
    return T::config_to_json(T::default_config(arch, T::problem_from_json(j)));
  }
  bool same_config(const json& a, const json& b) const override {
    return T::same_config(T::config_from_json(a), T::config_from_json(b));
  }
  const char* unusable(const json& p, const json& c, ArchId arch) const override {
    return T::unusable(T::problem_from_json(p), T::config_from_json(c), arch);
  }
  const char* rejected_as() const override { return T::rejected_as; }

  std::string variant_name(const json& p, const json& c, ArchId arch) const override {
    return T::variant_name(T::problem_from_json(p), T::config_from_json(c), arch);
  }
  std::string name_expression(const json& p, const json& c) const override {
    return T::name_expression(T::problem_from_json(p), T::config_from_json(c));
  }
  KernelSource kernel_source(const json& p, const json& c, ArchId arch) const override {
    return T::kernel_source(T::problem_from_json(p), T::config_from_json(c), arch);
  }
  LaunchDims launch_dims(const json& p, const json& c, const DeviceModel& device) const override {
    return T::launch_dims(T::problem_from_json(p), T::config_from_json(c), device);
  }
  size_t workspace_bytes(const json& p, const json& c, const DeviceModel& device) const override {
    return T::workspace_bytes(T::problem_from_json(p), T::config_from_json(c), device);
  }

 private:
  std::string name_, description_;
};

}  // namespace kt
