// The family interface (generator/family.h), its registries and the tuner's work-item builder: properties every
// registered family must have, checked over the problems shapes/qwen7b.json names for it.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "generator/arch.h"
#include "generator/attention_family.h"
#include "generator/decode_family.h"
#include "generator/qkv_family.h"
#include "generator/registry.h"
#include "kerntune/kerntune.h"
#include "runtime/runtime.h"
#include "tuner/shapes_file.h"
#include "tuner/tuner_registry.h"
#include "tuner/work_items.h"

using namespace kt;
using json = nlohmann::json;

namespace {

const ArchId kSm90a{90, true};

const ShapesFile& qwen7b() {
  static const ShapesFile s = load_shapes(std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json");
  return s;
}

/// Every registered family's problems in qwen7b.json, by family name.
std::map<std::string, std::vector<json>> problems_by_family() {
  std::map<std::string, std::vector<json>> out;
  for (const auto& tf : tuner_families()) out[tf.family->name()] = tf.problems(qwen7b());
  return out;
}

/// At most n problems spread over the list (first and last included), to keep the per-config checks fast.
std::vector<json> spread(const std::vector<json>& ps, size_t n) {
  if (ps.size() <= n) return ps;
  std::vector<json> out;
  for (size_t i = 0; i < n; ++i) out.push_back(ps[i * (ps.size() - 1) / (n - 1)]);
  return out;
}

}  // namespace

TEST_CASE("the registries list the same families, each with problems in qwen7b.json", "[family]") {
  const auto& fs = families();
  const auto& tfs = tuner_families();
  REQUIRE(fs.size() >= 2);
  REQUIRE(tfs.size() == fs.size());
  std::set<std::string> names;
  for (size_t i = 0; i < fs.size(); ++i) {
    CHECK(tfs[i].family == fs[i]);
    CHECK(names.insert(fs[i]->name()).second);
    CHECK(&find_family(fs[i]->name()) == fs[i]);
    CHECK(family_index(fs[i]->name()) == int(i));
    CHECK(&find_tuner_family(fs[i]->name()) == &tfs[i]);
    CHECK_FALSE(fs[i]->description().empty());
    CHECK(tfs[i].ref_rows > 0);
  }
  CHECK_THROWS_WITH(find_tuner_family("gemm"), Catch::Contains("unknown family 'gemm'"));
  for (const auto& [name, ps] : problems_by_family()) {
    INFO(name);
    CHECK_FALSE(ps.empty());
  }
}

TEST_CASE("every family: problem JSON round trip, stable distinct keys, classes and nearness", "[family]") {
  for (const auto& [name, ps] : problems_by_family()) {
    const Family& f = find_family(name);
    const TunerFamily& tf = find_tuner_family(name);
    INFO(name);
    std::set<std::string> keys;
    for (const auto& p : ps) {
      const json c = f.canonical_problem(p);
      CHECK(c == p);  // the tuner's problems are canonical already
      CHECK(f.canonical_problem(c) == c);
      // The key depends on the problem, not on how its JSON was written.
      const json reparsed = json::parse(p.dump(2));
      CHECK(f.problem_key(reparsed) == f.problem_key(p));
      CHECK(f.problem_key(p).rfind(name + "/", 0) == 0);
      CHECK(keys.insert(f.problem_key(p)).second);
      CHECK(f.class_key(p).rfind(name + "/", 0) == 0);
      CHECK(f.nearness(p, p).distance == 0);
      CHECK(f.flops(p) > 0);
      CHECK(f.min_bytes(p) >= 0);
      CHECK(tf.tolerance(p) > 0);
      CHECK(tf.tolerance(p) < 0.1);
    }
    // Nearness: a distance, zero only within one class's identical sizes, symmetric.
    for (size_t i = 0; i + 1 < ps.size(); ++i) {
      if (f.class_key(ps[i]) != f.class_key(ps[i + 1])) continue;
      const double d = f.nearness(ps[i], ps[i + 1]).distance;
      CHECK(d >= 0);
      CHECK(d == Approx(f.nearness(ps[i + 1], ps[i]).distance));
    }
    // A malformed problem is refused naming the field.
    json broken = ps.front();
    broken.erase(broken.begin());
    CHECK_THROWS_AS(f.canonical_problem(broken), ProblemError);
    CHECK_THROWS_AS(f.problem_key(json::array()), ProblemError);
  }
}

TEST_CASE("every family: the default is a valid candidate, names unique per config, launch dims non-zero", "[family]") {
  const DeviceModel dev = device_model(kSm90a);
  for (const auto& [name, all] : problems_by_family()) {
    const Family& f = find_family(name);
    for (const auto& p : spread(all, 6)) {
      INFO(f.problem_key(p));
      const auto configs = f.enumerate(p, kSm90a, dev);
      REQUIRE_FALSE(configs.empty());
      const json def = f.default_config(p, kSm90a);
      CHECK(f.unusable(p, def, kSm90a) == nullptr);
      CHECK(std::count_if(configs.begin(), configs.end(), [&](const json& c) { return f.same_config(c, def); }) == 1);
      std::set<std::string> names;
      for (const auto& c : configs) {
        CHECK(f.same_config(c, c));
        CHECK(f.unusable(p, c, kSm90a) == nullptr);
        const std::string v = f.variant_name(p, c, kSm90a);
        CHECK(v.rfind(name + "__", 0) == 0);
        CHECK(v.size() > 7);
        CHECK(v.substr(v.size() - 7) == "_sm_90a");
        CHECK(names.insert(v).second);
        const KernelSource src = f.kernel_source(p, c, kSm90a);
        CHECK(src.family == name);
        CHECK(src.variant_name == v);
        CHECK(src.name_expression == f.name_expression(p, c));
        const LaunchDims d = f.launch_dims(p, c, dev);
        CHECK(d.grid_x > 0);
        CHECK(d.grid_y > 0);
        CHECK(d.grid_z > 0);
        CHECK(d.block_x > 0);
        CHECK(d.block_x % 32 == 0);
        CHECK(d.cluster_y > 0);
        CHECK(d.smem_bytes <= unsigned(dev.smem_per_block));
      }
      CHECK(names.size() == configs.size());
    }
  }
}

TEST_CASE("device_model gives the arch's reference GPU", "[family]") {
  CHECK(device_model(kSm90a).sm_count == 132);
  CHECK(device_model(kSm90a).smem_per_block == 227 * 1024);
  CHECK(device_model(ArchId{80, false}).sm_count == 108);
  CHECK(device_model(ArchId{80, false}).smem_per_block == 163 * 1024);
  CHECK(device_model(ArchId{86, false}).smem_per_block == 99 * 1024);
}

TEST_CASE("the work-item builder covers every registered family of a shapes file with no family code", "[family]") {
  std::vector<std::string> names;  // empty: every family the file names problems for
  const auto problems = collect_problems(qwen7b(), names);
  std::vector<std::string> registered;
  for (const auto* f : families()) registered.push_back(f->name());
  CHECK(names == registered);  // qwen7b.json names a workload of every registered family

  WorkOptions opt;
  opt.max_candidates = 5;
  const WorkPlan plan = build_work(problems, kSm90a, device_model(kSm90a), opt);
  REQUIRE(plan.items.size() == problems.size());
  std::map<std::string, size_t> per_family;
  for (const auto& it : plan.items) {
    INFO(it.key);
    const Family& f = find_family(it.family);
    ++per_family[it.family];
    CHECK(it.key == f.problem_key(it.problem));
    REQUIRE_FALSE(it.configs.empty());
    CHECK(it.configs.size() <= 5);
    CHECK(it.configs.size() == it.variants.size());
    CHECK(it.configs.size() == it.source.size());
    CHECK(f.same_config(it.configs[0], f.default_config(it.problem, kSm90a)));  // the baseline first
    CHECK(it.variants[0] == it.default_variant);
    CHECK(it.flops > 0);
    for (size_t c = 0; c < it.configs.size(); ++c) {
      REQUIRE(it.source[c] < plan.sources.size());
      CHECK(plan.sources[it.source[c]].family == it.family);
      CHECK(plan.sources[it.source[c]].name_expression == f.name_expression(it.problem, it.configs[c]));
      CHECK(it.variants[c] == f.variant_name(it.problem, it.configs[c], kSm90a));
    }
  }
  for (const auto& tf : tuner_families()) CHECK(per_family[tf.family->name()] == tf.problems(qwen7b()).size());
  // One binary per (family, name expression).
  std::set<std::string> ids;
  for (const auto& s : plan.sources) CHECK(ids.insert(s.family + "|" + s.name_expression).second);

  // A family named explicitly keeps only its problems; an unknown one is refused naming the known ones.
  std::vector<std::string> one = {registered.back()};
  for (const auto& pr : collect_problems(qwen7b(), one)) CHECK(pr.family->family->name() == registered.back());
  std::vector<std::string> bad = {"gemm"};
  CHECK_THROWS_WITH(collect_problems(qwen7b(), bad), Catch::Contains("unknown family 'gemm'"));

  // --only that matches nothing keeps the default alone.
  WorkOptions none;
  none.keep = [](const std::string&) { return false; };
  for (const auto& it : build_work(problems, kSm90a, device_model(kSm90a), none).items) {
    REQUIRE(it.configs.size() == 1);  // variants[0] below needs it
    CHECK(it.variants[0] == it.default_variant);
  }
}

TEST_CASE("the work-item builder enumerates what each family's own valid_configs gives, default first", "[family]") {
  // Regression for the generic builder: the candidate lists equal the typed enumeration autotune used before it.
  std::vector<std::string> names;
  const auto problems = collect_problems(qwen7b(), names);
  const WorkPlan plan = build_work(problems, kSm90a, device_model(kSm90a), {});
  auto default_first = [](auto valid, const auto& def, auto same) {
    std::stable_partition(valid.begin(), valid.end(), [&](const auto& c) { return same(c, def); });
    return valid;
  };
  size_t checked = 0;
  for (const auto& it : plan.items) {
    std::vector<std::string> want;
    if (it.family == attn::kFamily) {
      const auto p = attn::problem_from_json(it.problem);
      for (const auto& c :
           default_first(attn::valid_configs(p, kSm90a), attn::default_config(kSm90a, p), attn::same_config))
        want.push_back(attn::variant_name(p, c, kSm90a));
    } else if (it.family == qkv::kFamily) {
      const auto p = qkv::problem_from_json(it.problem);
      for (const auto& c :
           default_first(qkv::valid_configs(p, kSm90a), qkv::default_config(kSm90a, p), qkv::same_config))
        want.push_back(qkv::variant_name(p, c, kSm90a));
    } else if (it.family == decode::kFamily) {
      const auto p = decode::problem_from_json(it.problem);
      for (const auto& c : default_first(decode::valid_configs(p, kSm90a, device_model(kSm90a)),
                                         decode::default_config(kSm90a, p), decode::same_config))
        want.push_back(decode::variant_name(p, c, kSm90a));
    } else {
      continue;
    }
    INFO(it.key);
    CHECK(it.variants == want);
    ++checked;
  }
  CHECK(checked == plan.items.size());
}

TEST_CASE("resolve() for a family's JSON problem answers as the typed wrappers", "[family][runtime]") {
  attn::Problem ap;
  ap.seqlen_q = ap.seqlen_k = 2048;
  ap.num_heads = 28;
  ap.num_kv_heads = 4;
  ap.causal = true;
  qkv::Problem qp;
  qp.format = quant::Format::nf4;
  qp.m = 20;
  auto row = [](const Family& f, const json& p, const json& c, long long id) {
    db::Winner w;
    w.device_name = "GPU";
    w.family = f.name();
    w.problem_key = f.problem_key(p);
    w.problem_json = p.dump();
    w.config_json = c.dump();
    w.variant_name = f.variant_name(p, c, kSm90a);
    w.binary_hash = "h" + std::to_string(id);
    w.median_us = 1;
    w.measurement_id = id;
    return w;
  };
  attn::Problem ap2 = ap;
  ap2.seqlen_q = ap2.seqlen_k = 2500;  // in 2048's bucket
  qkv::Problem qp2 = qp;
  qp2.m = 16;
  const Family& af = find_family(attn::kFamily);
  const Family& qf = find_family(qkv::kFamily);
  const std::vector<db::Winner> ws = {
      row(af, attn::problem_to_json(ap2), af.enumerate(attn::problem_to_json(ap2), kSm90a, device_model(kSm90a)).back(),
          1),
      row(qf, qkv::problem_to_json(qp2), qf.enumerate(qkv::problem_to_json(qp2), kSm90a, device_model(kSm90a)).back(),
          2)};

  const FamilyChoice ga = resolve(af, ws, "GPU", kSm90a, attn::problem_to_json(ap));
  const AttentionChoice ta = resolve_attention(ws, "GPU", kSm90a, ap);
  CHECK(ga.family == attn::kFamily);
  CHECK(ga.step == "nearest");
  CHECK(ga.step == ta.step);
  CHECK(ga.why == ta.why);
  CHECK(ga.variant_name == ta.variant_name);
  CHECK(attn::same_config(attn::config_from_json(ga.config), ta.config));

  const FamilyChoice gq = resolve(qf, ws, "GPU", kSm90a, qkv::problem_to_json(qp));
  const QkvChoice tq = resolve_qkv(ws, "GPU", kSm90a, qp);
  CHECK(gq.step == "nearest");
  CHECK(gq.tuned_problem_key == qp2.key());  // the other family's row is never a candidate
  CHECK(gq.why == tq.why);
  CHECK(qkv::same_config(qkv::config_from_json(gq.config), tq.config));

  // Nothing of the class tuned: each family's own default, its class key in the why.
  qkv::Problem other = qp;
  other.format = quant::Format::int8;
  const FamilyChoice d = resolve(qf, ws, "GPU", kSm90a, qkv::problem_to_json(other));
  CHECK(d.step == "default");
  CHECK(d.why.find(qf.class_key(qkv::problem_to_json(other))) != std::string::npos);
  CHECK(qf.same_config(d.config, qf.default_config(qkv::problem_to_json(other), kSm90a)));
}

TEST_CASE("C ABI kt_explain: NULL arguments are refused naming the argument", "[family][runtime]") {
  char buf[64];
  CHECK(kt_explain(nullptr, "attention_prefill", "{}", buf, sizeof buf) == KT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(kt_last_error()).find("rt is NULL") != std::string::npos);
}
