#include "tuner/shapes_file.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <stdexcept>

#include "quant/quant.h"
#include "reference/dtype_convert.h"

namespace kt {
namespace {

using nlohmann::json;

// Parsing context: the source name for messages.
class Parser {
 public:
  explicit Parser(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& msg) const { throw ShapesError(source_ + ": " + msg); }
  [[noreturn]] void fail_field(const std::string& field, const std::string& msg) const {
    fail("field '" + field + "': " + msg);
  }

  static std::string join(const std::string& prefix, const std::string& key) {
    return prefix.empty() ? key : prefix + "." + key;
  }
  static std::string index(const std::string& prefix, size_t i) {
    return prefix + "[" + std::to_string(i) + "]";
  }

  static std::string type_of(const json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number_integer() || v.is_number_unsigned()) return "the integer " + v.dump();
    if (v.is_number()) return "the number " + v.dump();
    if (v.is_string()) return "the string " + v.dump();
    if (v.is_array()) return "an array";
    return "an object";
  }

  void require_object(const json& v, const std::string& field) const {
    if (!v.is_object()) {
      if (field.empty()) fail("expected a JSON object at the top level, got " + type_of(v));
      fail_field(field, "expected an object, got " + type_of(v));
    }
  }

  void reject_unknown(const json& obj, const std::string& prefix,
                      std::initializer_list<const char*> allowed) const {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      const bool ok = std::any_of(allowed.begin(), allowed.end(),
                                  [&](const char* a) { return it.key() == a; });
      if (!ok) {
        std::string list;
        for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
        fail("unknown field '" + join(prefix, it.key()) + "' (expected one of: " + list + ")");
      }
    }
  }

  const json& get(const json& obj, const std::string& prefix, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end()) fail("missing field '" + join(prefix, key) + "'");
    return *it;
  }

  int positive_int(const json& v, const std::string& field) const {
    bool ok = false;
    long long x = 0;
    if (v.is_number_unsigned()) {
      const auto u = v.get<unsigned long long>();
      ok = u >= 1 && u <= static_cast<unsigned long long>(INT_MAX);
      x = static_cast<long long>(std::min<unsigned long long>(u, INT_MAX));
    } else if (v.is_number_integer()) {
      x = v.get<long long>();
      ok = x >= 1 && x <= INT_MAX;
    }
    if (!ok) fail_field(field, "expected a positive integer, got " + type_of(v));
    return static_cast<int>(x);
  }

  int positive_int_at(const json& obj, const std::string& prefix, const char* key) const {
    return positive_int(get(obj, prefix, key), join(prefix, key));
  }

  bool boolean(const json& v, const std::string& field) const {
    if (!v.is_boolean()) fail_field(field, "expected true or false, got " + type_of(v));
    return v.get<bool>();
  }

  double positive_number(const json& v, const std::string& field) const {
    if (!v.is_number() || !(v.get<double>() > 0.0) || !std::isfinite(v.get<double>()))
      fail_field(field, "expected a positive number, got " + type_of(v));
    return v.get<double>();
  }

  std::string string(const json& v, const std::string& field) const {
    if (!v.is_string()) fail_field(field, "expected a string, got " + type_of(v));
    return v.get<std::string>();
  }

  const json& array(const json& v, const std::string& field) const {
    if (!v.is_array()) fail_field(field, "expected an array, got " + type_of(v));
    return v;
  }

  std::vector<DType> dtypes(const json& v, const std::string& field) const {
    array(v, field);
    if (v.empty()) fail_field(field, "expected at least one dtype");
    std::vector<DType> out;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string f = index(field, i);
      const std::string name = string(v[i], f);
      DType d;
      try {
        d = parse_dtype(name);
      } catch (const std::invalid_argument& e) {
        fail_field(f, e.what());
      }
      if (std::find(out.begin(), out.end(), d) != out.end())
        fail_field(f, std::string("duplicate dtype '") + dtype_name(d) + "'");
      out.push_back(d);
    }
    return out;
  }

  void check_heads(int num_heads, int num_kv_heads) const {
    if (num_heads % num_kv_heads != 0)
      fail_field("num_key_value_heads", std::to_string(num_heads) + " attention heads are not a multiple of " +
                                            std::to_string(num_kv_heads) + " KV heads");
  }

  void workloads(const json& w, ShapesFile& out) const {
    const std::string wp = "workloads";
    require_object(w, wp);
    reject_unknown(w, wp, {"attention_prefill", "qkv_proj", "attention_decode"});

    if (auto it = w.find("attention_prefill"); it != w.end()) {
      const std::string field = join(wp, "attention_prefill");
      array(*it, field);
      for (size_t i = 0; i < it->size(); ++i) {
        const std::string p = index(field, i);
        const json& e = (*it)[i];
        require_object(e, p);
        reject_unknown(e, p, {"batch", "seqlen", "seqlen_k", "causal"});
        PrefillWorkload pw{};
        pw.batch = positive_int_at(e, p, "batch");
        pw.seqlen_q = positive_int_at(e, p, "seqlen");
        pw.seqlen_k = e.contains("seqlen_k") ? positive_int(e["seqlen_k"], join(p, "seqlen_k")) : pw.seqlen_q;
        pw.causal = e.contains("causal") ? boolean(e["causal"], join(p, "causal")) : true;
        out.prefill.push_back(pw);
      }
    }

    if (auto it = w.find("qkv_proj"); it != w.end()) {
      const std::string qp = join(wp, "qkv_proj");
      require_object(*it, qp);
      reject_unknown(*it, qp, {"tokens", "formats"});
      const std::string tf = join(qp, "tokens");
      const json& tokens = array(get(*it, qp, "tokens"), tf);
      for (size_t i = 0; i < tokens.size(); ++i) out.qkv_tokens.push_back(positive_int(tokens[i], index(tf, i)));
      const std::string ff = join(qp, "formats");
      const json& formats = array(get(*it, qp, "formats"), ff);
      for (size_t i = 0; i < formats.size(); ++i) {
        const std::string f = index(ff, i);
        const std::string name = string(formats[i], f);
        try {
          quant::parse_format(name);  // an unknown name throws, listing every format
        } catch (const std::invalid_argument& e) {
          fail_field(f, e.what());
        }
        if (std::find(out.qkv_formats.begin(), out.qkv_formats.end(), name) != out.qkv_formats.end())
          fail_field(f, "duplicate weight format '" + name + "'");
        out.qkv_formats.push_back(name);
      }
      if (out.qkv_tokens.empty() != out.qkv_formats.empty())
        fail_field(qp, "'tokens' and 'formats' must both be empty or both non-empty");
    }

    if (auto it = w.find("attention_decode"); it != w.end()) {
      const std::string field = join(wp, "attention_decode");
      array(*it, field);
      for (size_t i = 0; i < it->size(); ++i) {
        const std::string p = index(field, i);
        const json& e = (*it)[i];
        require_object(e, p);
        reject_unknown(e, p, {"batch", "kv_len"});
        DecodeWorkload dw{};
        dw.batch = positive_int_at(e, p, "batch");
        dw.kv_len = positive_int_at(e, p, "kv_len");
        out.decode.push_back(dw);
      }
    }

    if (out.prefill.empty() && out.qkv_tokens.empty() && out.decode.empty())
      fail_field(wp, "no workloads (expected attention_prefill, qkv_proj or attention_decode entries)");
  }

  ShapesFile kerntune(const json& j) const {
    reject_unknown(j, "",
                   {"model", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "qkv_bias",
                    "rope_theta", "dtypes", "workloads"});
    ShapesFile out;
    out.source = source_;
    ModelShape& m = out.model;
    m.name = string(get(j, "", "model"), "model");
    if (m.name.empty()) fail_field("model", "expected a non-empty string");
    m.hidden_size = positive_int_at(j, "", "hidden_size");
    m.num_heads = positive_int_at(j, "", "num_attention_heads");
    m.num_kv_heads = positive_int_at(j, "", "num_key_value_heads");
    check_heads(m.num_heads, m.num_kv_heads);
    m.head_dim = positive_int_at(j, "", "head_dim");
    m.qkv_bias = j.contains("qkv_bias") ? boolean(j["qkv_bias"], "qkv_bias") : false;
    m.rope_theta = j.contains("rope_theta") ? positive_number(j["rope_theta"], "rope_theta") : 10000.0;
    out.dtypes = j.contains("dtypes") ? dtypes(j["dtypes"], "dtypes") : std::vector<DType>{DType::bf16, DType::f16};
    workloads(get(j, "", "workloads"), out);
    return out;
  }

  ShapesFile hugging_face(const json& j) const {
    ShapesFile out;
    out.source = source_;
    ModelShape& m = out.model;
    m.hidden_size = positive_int_at(j, "", "hidden_size");
    m.num_heads = positive_int_at(j, "", "num_attention_heads");
    m.num_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                         ? positive_int(j["num_key_value_heads"], "num_key_value_heads")
                         : m.num_heads;
    check_heads(m.num_heads, m.num_kv_heads);
    if (j.contains("head_dim") && !j["head_dim"].is_null()) {
      m.head_dim = positive_int(j["head_dim"], "head_dim");
    } else {
      if (m.hidden_size % m.num_heads != 0)
        fail_field("hidden_size", "no 'head_dim' given and hidden_size " + std::to_string(m.hidden_size) +
                                      " is not a multiple of " + std::to_string(m.num_heads) + " attention heads");
      m.head_dim = m.hidden_size / m.num_heads;
    }
    std::string model_type;
    if (j.contains("model_type") && !j["model_type"].is_null()) model_type = string(j["model_type"], "model_type");
    if (j.contains("attention_bias") && !j["attention_bias"].is_null())
      m.qkv_bias = boolean(j["attention_bias"], "attention_bias");
    else
      m.qkv_bias = model_type == "qwen2";
    m.rope_theta = j.contains("rope_theta") && !j["rope_theta"].is_null()
                       ? positive_number(j["rope_theta"], "rope_theta")
                       : 10000.0;
    std::string name;
    if (j.contains("_name_or_path") && !j["_name_or_path"].is_null())
      name = string(j["_name_or_path"], "_name_or_path");
    m.name = !name.empty() ? name : !model_type.empty() ? model_type : "unknown";

    out.dtypes = {DType::bf16, DType::f16};
    // Default workloads: those of shapes/qwen7b.json.
    const int prefill[][2] = {{1, 512}, {4, 1024}, {1, 2048}, {8, 2048}, {1, 8192}, {2, 16384}};
    for (const auto& p : prefill) out.prefill.push_back({p[0], p[1], p[1], true});
    out.qkv_tokens = {1, 16, 64, 256, 1024, 4096, 16384};
    out.qkv_formats = {"fp16",  "fp16_kb64",  "int8",  "int8_kb64",   "int4",  "int4_kb128",
                       "nf4",   "nf4_kb128",  "mxfp4", "mxfp4_kb128", "nvfp4", "nvfp4_kb128"};
    out.decode = {{1, 4096}, {16, 4096}, {64, 2048}, {1, 32768}};
    return out;
  }

 private:
  std::string source_;
};

}  // namespace

const std::vector<std::string>& known_weight_formats() {
  static const std::vector<std::string> formats = [] {
    std::vector<std::string> v;
    for (int i = 0; i < quant::kFormatCount; ++i) v.push_back(quant::format_name(quant::Format(i)));
    return v;
  }();
  return formats;
}

ShapesFile parse_shapes(const nlohmann::json& j, const std::string& source_name) {
  Parser p(source_name);
  p.require_object(j, "");
  const bool is_hf = !j.contains("workloads") && j.contains("hidden_size") && j.contains("num_attention_heads");
  return is_hf ? p.hugging_face(j) : p.kerntune(j);
}

ShapesFile load_shapes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ShapesError(path + ": cannot open file (" + std::strerror(errno) + ")");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ShapesError(path + ": cannot read file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw ShapesError(path + ": invalid JSON: " + e.what());
  }
  return parse_shapes(j, path);
}

}  // namespace kt
