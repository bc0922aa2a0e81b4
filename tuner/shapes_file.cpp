#include "tuner/shapes_file.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

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
  static std::string index(const std::string& prefix, size_t i) { return prefix + "[" + std::to_string(i) + "]"; }

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

  void reject_unknown(const json& obj, const std::string& prefix, std::initializer_list<const char*> allowed) const {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      const bool ok = std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return it.key() == a; });
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

  // A positive integer no larger than `max` (the bound is named in the message).
  int positive_int(const json& v, const std::string& field, int max) const {
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
    if (x > max)
      fail_field(field, std::to_string(x) + " is too large: at most " + std::to_string(max) + " is supported");
    return static_cast<int>(x);
  }

  // A positive integer, or a non-empty array of them (each no larger than `max`).
  std::vector<int> int_or_list(const json& v, const std::string& field, int max) const {
    if (!v.is_array()) return {positive_int(v, field, max)};
    if (v.empty()) fail_field(field, "expected a positive integer or a non-empty array of them");
    std::vector<int> out;
    for (size_t i = 0; i < v.size(); ++i) out.push_back(positive_int(v[i], index(field, i), max));
    return out;
  }

  int positive_int_at(const json& obj, const std::string& prefix, const char* key, int max) const {
    return positive_int(get(obj, prefix, key), join(prefix, key), max);
  }

  // A display name: non-empty, no control characters (they would reach terminals and logs raw).
  std::string name(const json& v, const std::string& field) const {
    const std::string s = string(v, field);
    if (s.empty()) fail_field(field, "expected a non-empty string");
    for (unsigned char c : s)
      if (c < 0x20 || c == 0x7f) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", c);
        fail_field(field, std::string("contains the control character ") + hex + "; expected printable text");
      }
    return s;
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
        pw.batch = positive_int_at(e, p, "batch", kMaxBatch);
        pw.seqlen_q = positive_int_at(e, p, "seqlen", kMaxSeqlen);
        pw.seqlen_k =
            e.contains("seqlen_k") ? positive_int(e["seqlen_k"], join(p, "seqlen_k"), kMaxSeqlen) : pw.seqlen_q;
        pw.causal = e.contains("causal") ? boolean(e["causal"], join(p, "causal")) : true;
        for (size_t k = 0; k < out.prefill.size(); ++k) {
          const PrefillWorkload& o = out.prefill[k];
          if (o.batch == pw.batch && o.seqlen_q == pw.seqlen_q && o.seqlen_k == pw.seqlen_k && o.causal == pw.causal)
            fail_field(p, "duplicates " + index(field, k) + " (the same problem would be tuned twice)");
        }
        out.prefill.push_back(pw);
      }
    }

    if (auto it = w.find("qkv_proj"); it != w.end()) {
      const std::string qp = join(wp, "qkv_proj");
      require_object(*it, qp);
      reject_unknown(*it, qp, {"tokens", "formats"});
      const std::string tf = join(qp, "tokens");
      const json& tokens = array(get(*it, qp, "tokens"), tf);
      for (size_t i = 0; i < tokens.size(); ++i)
        out.qkv_tokens.push_back(positive_int(tokens[i], index(tf, i), kMaxTokens));
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
      std::vector<size_t> entry_of;  // the entry each expanded workload came from
      for (size_t i = 0; i < it->size(); ++i) {
        const std::string p = index(field, i);
        const json& e = (*it)[i];
        require_object(e, p);
        reject_unknown(e, p, {"batch", "kv_len", "q_len", "page_size", "causal"});
        const std::vector<int> batches = int_or_list(get(e, p, "batch"), join(p, "batch"), kMaxBatch);
        const std::vector<int> kv_lens = int_or_list(get(e, p, "kv_len"), join(p, "kv_len"), kMaxSeqlen);
        const int q_len = e.contains("q_len") ? positive_int(e["q_len"], join(p, "q_len"), kMaxDecodeQLen) : 1;
        int page_size = 0;
        if (e.contains("page_size")) {
          const json& v = e["page_size"];
          page_size = v.is_number_integer() && v.get<long long>() == 0
                          ? 0
                          : positive_int(v, join(p, "page_size"), kMaxDecodePageSize);
        }
        const bool causal = e.contains("causal") ? boolean(e["causal"], join(p, "causal")) : true;
        for (int b : batches)
          for (int kv : kv_lens) {
            const DecodeWorkload dw{b, kv, q_len, page_size, causal};
            for (size_t k = 0; k < out.decode.size(); ++k) {
              const DecodeWorkload& o = out.decode[k];
              if (o.batch == dw.batch && o.kv_len == dw.kv_len && o.q_len == dw.q_len && o.page_size == dw.page_size &&
                  o.causal == dw.causal)
                fail_field(p, (entry_of[k] == i ? std::string("lists batch ") + std::to_string(b) + " x kv_len " +
                                                      std::to_string(kv) + " twice"
                                                : "duplicates " + index(field, entry_of[k])) +
                                  " (the same problem would be tuned twice)");
            }
            out.decode.push_back(dw);
            entry_of.push_back(i);
          }
      }
    }

    if (out.prefill.empty() && out.qkv_tokens.empty() && out.decode.empty())
      fail_field(wp, "no workloads (expected attention_prefill, qkv_proj or attention_decode entries)");
  }

  // The model fields every format shares, once parsed: bounds, head divisibility and tensor sizes.
  void check_model(const ModelShape& m) const {
    check_heads(m.num_heads, m.num_kv_heads);
    if (m.head_dim > kMaxHeadDim)
      fail_field("head_dim", std::to_string(m.head_dim) + " is too large: at most " + std::to_string(kMaxHeadDim) +
                                 " is supported");
  }

  // Refuses a tensor larger than kMaxTensorBytes (no GPU holds it; sizes near INT_MAX overflow index math).
  void check_tensor(const std::string& field, const std::string& what, long long elements,
                    const std::string& how) const {
    const long long bytes = elements * 2;  // 16-bit activations / fp16 weights
    if (bytes > kMaxTensorBytes) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f GiB", double(bytes) / double(1LL << 30));
      fail_field(field, what + " would take " + buf + " (" + how + " x 2 bytes); the limit is " +
                            std::to_string(kMaxTensorBytes >> 30) + " GiB per tensor");
    }
  }

  void check_workload_sizes(const ShapesFile& out) const {
    const ModelShape& m = out.model;
    const long long hq = m.num_heads, hkv = m.num_kv_heads, d = m.head_dim, k = m.hidden_size;
    const std::string heads = " x " + std::to_string(hq) + " heads x head_dim " + std::to_string(d);
    const std::string kv_heads = " x " + std::to_string(hkv) + " KV heads x head_dim " + std::to_string(d);
    for (size_t i = 0; i < out.prefill.size(); ++i) {
      const PrefillWorkload& w = out.prefill[i];
      const std::string f = index("workloads.attention_prefill", i);
      check_tensor(f, "Q (and the output)", w.batch * (long long)w.seqlen_q * hq * d,
                   "batch " + std::to_string(w.batch) + " x seqlen " + std::to_string(w.seqlen_q) + heads);
      check_tensor(f, "K (and V)", w.batch * (long long)w.seqlen_k * hkv * d,
                   "batch " + std::to_string(w.batch) + " x seqlen_k " + std::to_string(w.seqlen_k) + kv_heads);
    }
    if (!out.qkv_tokens.empty()) {
      const long long n = (hq + 2 * hkv) * d;
      const std::string nh =
          "(" + std::to_string(hq) + " + 2 x " + std::to_string(hkv) + ") heads x head_dim " + std::to_string(d);
      check_tensor("hidden_size", "the Q/K/V weight", k * n, "hidden_size " + std::to_string(k) + " x " + nh);
      for (size_t i = 0; i < out.qkv_tokens.size(); ++i) {
        const long long t = out.qkv_tokens[i];
        const std::string f = index("workloads.qkv_proj.tokens", i);
        check_tensor(f, "the input", t * k, "tokens " + std::to_string(t) + " x hidden_size " + std::to_string(k));
        check_tensor(f, "the Q/K/V output", t * n, "tokens " + std::to_string(t) + " x " + nh);
      }
    }
    for (size_t i = 0; i < out.decode.size(); ++i) {
      const DecodeWorkload& w = out.decode[i];
      check_tensor(index("workloads.attention_decode", i), "the K (and V) cache",
                   w.batch * (long long)w.kv_len * hkv * d,
                   "batch " + std::to_string(w.batch) + " x kv_len " + std::to_string(w.kv_len) + kv_heads);
    }
  }

  // `marker` is the kerntune-only key that selected this format (named when another key is unknown).
  ShapesFile kerntune(const json& j, const std::string& marker) const {
    static const std::initializer_list<const char*> keys = {
        "model",  "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "qkv_bias", "rope_theta",
        "dtypes", "workloads"};
    for (auto it = j.begin(); it != j.end(); ++it)
      if (std::find_if(keys.begin(), keys.end(), [&](const char* k) { return it.key() == k; }) == keys.end()) {
        std::string list;
        for (const char* k : keys) list += std::string(list.empty() ? "" : ", ") + k;
        fail("unknown field '" + it.key() + "' (expected one of: " + list + ")" +
             (marker.empty() ? std::string()
                             : "; read as a kerntune shapes file because it has the key '" + marker +
                                   "' (a Hugging Face config.json has none of model, dtypes, qkv_bias, workloads)"));
      }
    ShapesFile out;
    out.source = source_;
    ModelShape& m = out.model;
    m.name = name(get(j, "", "model"), "model");
    m.hidden_size = positive_int_at(j, "", "hidden_size", kMaxHiddenSize);
    m.num_heads = positive_int_at(j, "", "num_attention_heads", kMaxHeads);
    m.num_kv_heads = positive_int_at(j, "", "num_key_value_heads", kMaxHeads);
    m.head_dim = positive_int_at(j, "", "head_dim", kMaxHeadDim);
    check_model(m);
    m.qkv_bias = j.contains("qkv_bias") ? boolean(j["qkv_bias"], "qkv_bias") : false;
    m.rope_theta = j.contains("rope_theta") ? positive_number(j["rope_theta"], "rope_theta") : 10000.0;
    out.dtypes = j.contains("dtypes") ? dtypes(j["dtypes"], "dtypes") : std::vector<DType>{DType::bf16, DType::f16};
    workloads(get(j, "", "workloads"), out);
    check_workload_sizes(out);
    return out;
  }

  static bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

  // `top` is the whole config; `c` the text model's part of it (`top` itself, or top["text_config"] of a
  // multimodal config, whose fields are named with the "text_config." prefix `p`).
  ShapesFile hugging_face(const json& top) const {
    const bool nested = !top.contains("hidden_size") && top.contains("text_config");
    const std::string p = nested ? "text_config" : "";
    if (nested) require_object(top["text_config"], p);
    const json& c = nested ? top["text_config"] : top;
    auto field = [&](const char* key) { return join(p, key); };

    ShapesFile out;
    out.source = source_;
    out.hugging_face = true;
    ModelShape& m = out.model;
    m.hidden_size = positive_int_at(c, p, "hidden_size", kMaxHiddenSize);
    m.num_heads = positive_int_at(c, p, "num_attention_heads", kMaxHeads);
    m.num_kv_heads = present(c, "num_key_value_heads")
                         ? positive_int(c["num_key_value_heads"], field("num_key_value_heads"), kMaxHeads)
                         : m.num_heads;
    if (present(c, "head_dim")) {
      m.head_dim = positive_int(c["head_dim"], field("head_dim"), kMaxHeadDim);
    } else {
      if (m.hidden_size % m.num_heads != 0)
        fail_field(field("hidden_size"), "no 'head_dim' given and hidden_size " + std::to_string(m.hidden_size) +
                                             " is not a multiple of " + std::to_string(m.num_heads) +
                                             " attention heads");
      m.head_dim = m.hidden_size / m.num_heads;
    }
    check_model(m);
    std::string model_type;
    if (present(c, "model_type")) model_type = string(c["model_type"], field("model_type"));
    else if (present(top, "model_type")) model_type = string(top["model_type"], "model_type");
    if (present(c, "attention_bias")) m.qkv_bias = boolean(c["attention_bias"], field("attention_bias"));
    else m.qkv_bias = model_type == "qwen2";
    // rope_theta: top-level (transformers < 4.56) or inside rope_parameters (newer configs).
    m.rope_theta = 10000.0;
    if (present(c, "rope_theta")) {
      m.rope_theta = positive_number(c["rope_theta"], field("rope_theta"));
    } else if (present(c, "rope_parameters")) {
      const json& rp = c["rope_parameters"];
      require_object(rp, field("rope_parameters"));
      if (present(rp, "rope_theta"))
        m.rope_theta = positive_number(rp["rope_theta"], join(field("rope_parameters"), "rope_theta"));
    }
    // Name: _name_or_path, else architectures[0], else model_type, else "unknown".
    if (present(top, "_name_or_path") && !string(top["_name_or_path"], "_name_or_path").empty()) {
      m.name = name(top["_name_or_path"], "_name_or_path");
    } else if (present(top, "architectures") && array(top["architectures"], "architectures").size() > 0) {
      m.name = name(top["architectures"][0], "architectures[0]");
    } else if (!model_type.empty()) {
      m.name = name(json(model_type), nested ? field("model_type") : "model_type");
    } else {
      m.name = "unknown";
    }

    out.dtypes = {DType::bf16, DType::f16};
    // Default workloads: those of shapes/qwen7b.json.
    const int prefill[][2] = {{1, 512}, {4, 1024}, {1, 2048}, {8, 2048}, {1, 8192}, {2, 16384}};
    for (const auto& w : prefill) out.prefill.push_back({w[0], w[1], w[1], true});
    out.prefill.push_back({1, 8192, 8192, false});
    out.qkv_tokens = {1, 16, 64, 256, 1024, 4096, 16384};
    out.qkv_formats = {"fp16", "fp16_kb64", "int8",  "int8_kb64",   "int4",  "int4_kb128",
                       "nf4",  "nf4_kb128", "mxfp4", "mxfp4_kb128", "nvfp4", "nvfp4_kb128"};
    out.decode = default_decode_workloads();
    check_workload_sizes(out);
    return out;
  }

 private:
  std::string source_;
};

}  // namespace

std::vector<DecodeWorkload> default_decode_workloads() {
  std::vector<DecodeWorkload> out;
  for (int page : {0, 64}) {  // shapes/qwen7b.json's entries, in its order
    for (int b : {1, 4, 16, 64})
      for (int kv : {512, 2048, 4096, 8192, 32768}) out.push_back({b, kv, 1, page, true});
    for (int b : {1, 16, 64})
      for (int kv : {1024, 4096, 16384}) out.push_back({b, kv, 4, page, true});
    out.push_back({16, 4096, 8, page, true});
  }
  return out;
}

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
  // Any kerntune-only key means the kerntune format (so a missing or misspelt "workloads" is an error, not a
  // silent switch to Hugging Face defaults); otherwise hidden_size + num_attention_heads, or a text_config,
  // mean a Hugging Face config.json.
  std::string marker;
  for (const char* k : {"workloads", "model", "dtypes", "qkv_bias"})
    if (j.contains(k)) {
      marker = k;
      break;
    }
  const bool is_hf = marker.empty() && ((j.contains("hidden_size") && j.contains("num_attention_heads")) ||
                                        (!j.contains("hidden_size") && j.contains("text_config")));
  return is_hf ? p.hugging_face(j) : p.kerntune(j, marker);
}

namespace {

// Parses JSON text, refusing duplicate object keys (nlohmann keeps the last one silently). The message names
// the key's path, e.g. "duplicate key 'workloads.attention_prefill[1].batch'".
nlohmann::json parse_unique_keys(const std::string& text, const std::string& path) {
  struct Frame {
    bool array;
    long index;       // arrays: the current element
    std::string key;  // objects: the current key
    std::unordered_set<std::string> keys;
  };
  std::vector<Frame> frames;
  auto element = [&] {
    if (!frames.empty() && frames.back().array) ++frames.back().index;
  };
  auto where = [&](const std::string& key) {
    std::string s;
    for (size_t i = 0; i + 1 < frames.size(); ++i)
      s += frames[i].array ? "[" + std::to_string(frames[i].index) + "]" : (s.empty() ? "" : ".") + frames[i].key;
    return s.empty() ? key : s + "." + key;
  };
  using Event = nlohmann::json::parse_event_t;
  nlohmann::json::parser_callback_t cb = [&](int depth, Event ev, nlohmann::json& parsed) {
    if (depth > kMaxJsonDepth)
      throw ShapesError(path + ": JSON nested more than " + std::to_string(kMaxJsonDepth) +
                        " levels deep (a shapes file needs 4)");
    switch (ev) {
      case Event::object_start:
        element();
        frames.push_back({false, -1, {}, {}});
        break;
      case Event::array_start:
        element();
        frames.push_back({true, -1, {}, {}});
        break;
      case Event::object_end:
      case Event::array_end: frames.pop_back(); break;
      case Event::key: {
        Frame& f = frames.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second)
          throw ShapesError(path + ": duplicate key '" + where(f.key) + "' (JSON would silently keep the last one)");
        break;
      }
      case Event::value: element(); break;
    }
    return true;
  };
  return nlohmann::json::parse(text, cb);
}

}  // namespace

ShapesFile load_shapes(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw ShapesError(path + ": is a directory, expected a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ShapesError(path + ": cannot open file (" + std::strerror(errno) + ")");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ShapesError(path + ": cannot read file");
  nlohmann::json j;
  try {
    j = parse_unique_keys(text.str(), path);
  } catch (const nlohmann::json::parse_error& e) {
    throw ShapesError(path + ": invalid JSON: " + e.what());
  }
  return parse_shapes(j, path);
}

}  // namespace kt
