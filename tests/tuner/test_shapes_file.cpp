// Shapes file loading: the shipped qwen7b.json, Hugging Face config.json defaults, and error messages
// that name the file and the field.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "reference/dtype_convert.h"
#include "tuner/shapes_file.h"

#ifndef KT_SOURCE_DIR
#error "KT_SOURCE_DIR must be defined to the repository root (see tests/CMakeLists.txt)"
#endif

namespace {

// A temporary file removed at scope exit.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text) {
    static int counter = 0;
    path = "/tmp/kt_shapes_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".json";
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

const char* kValid = R"({
  "model": "Tiny", "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
  "qkv_bias": false, "rope_theta": 500000, "dtypes": ["fp16"],
  "workloads": {
    "attention_prefill": [ {"batch": 1, "seqlen": 37}, {"batch": 2, "seqlen": 5, "seqlen_k": 577, "causal": false} ],
    "qkv_proj": { "tokens": [1, 1000], "formats": ["nf4"] },
    "attention_decode": [ {"batch": 3, "kv_len": 1000} ] } })";

// Loads `text` (a modification of kValid) from a temp file and returns the ShapesError message.
std::string error_of(const std::string& text, std::string* path_out = nullptr) {
  TempFile f(text);
  if (path_out) *path_out = f.path;
  try {
    kt::load_shapes(f.path);
  } catch (const kt::ShapesError& e) {
    return e.what();
  }
  FAIL("expected a ShapesError for: " << text);
  return "";
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const auto pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  return s.replace(pos, from.size(), to);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("shapes/qwen7b.json loads with the exact values", "[shapes]") {
  const std::string path = std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json";
  const kt::ShapesFile s = kt::load_shapes(path);
  CHECK(s.source == path);
  CHECK(s.model.name == "Qwen2.5-7B");
  CHECK(s.model.hidden_size == 3584);
  CHECK(s.model.num_heads == 28);
  CHECK(s.model.num_kv_heads == 4);
  CHECK(s.model.head_dim == 128);
  CHECK(s.model.qkv_bias == true);
  CHECK(s.model.rope_theta == 1000000.0);
  REQUIRE(s.dtypes.size() == 2);
  CHECK(s.dtypes[0] == kt::DType::bf16);
  CHECK(s.dtypes[1] == kt::DType::f16);
  // Six causal workloads, then one non-causal.
  const int prefill[][2] = {{1, 512}, {4, 1024}, {1, 2048}, {8, 2048}, {1, 8192}, {2, 16384}, {1, 8192}};
  REQUIRE(s.prefill.size() == 7);
  for (size_t i = 0; i < 7; ++i) {
    CHECK(s.prefill[i].batch == prefill[i][0]);
    CHECK(s.prefill[i].seqlen_q == prefill[i][1]);
    CHECK(s.prefill[i].seqlen_k == prefill[i][1]);
    CHECK(s.prefill[i].causal == (i < 6));
  }
  CHECK(s.qkv_tokens == std::vector<int>{1, 16, 64, 256, 1024, 4096, 16384});
  CHECK(s.qkv_formats == std::vector<std::string>{"fp16", "fp16_kb64", "int8", "int8_kb64", "int4", "int4_kb128", "nf4",
                                                  "nf4_kb128", "mxfp4", "mxfp4_kb128", "nvfp4", "nvfp4_kb128"});
  // attention_decode: the bucket grids, both layouts (contiguous, then paged with 64-token pages).
  REQUIRE(s.decode.size() == 60);
  size_t n = 0;
  for (int page : {0, 64}) {
    for (int b : {1, 4, 16, 64})
      for (int kv : {512, 2048, 4096, 8192, 32768}) {
        const auto& w = s.decode[n++];
        CHECK((w.batch == b && w.kv_len == kv && w.q_len == 1 && w.page_size == page && w.causal));
      }
    for (int b : {1, 16, 64})
      for (int kv : {1024, 4096, 16384}) {
        const auto& w = s.decode[n++];
        CHECK((w.batch == b && w.kv_len == kv && w.q_len == 4 && w.page_size == page && w.causal));
      }
    const auto& w = s.decode[n++];
    CHECK((w.batch == 16 && w.kv_len == 4096 && w.q_len == 8 && w.page_size == page && w.causal));
  }
  // The shipped file is what a Hugging Face config.json gets by default.
  const auto def = kt::default_decode_workloads();
  REQUIRE(def.size() == s.decode.size());
  for (size_t i = 0; i < def.size(); ++i)
    CHECK((def[i].batch == s.decode[i].batch && def[i].kv_len == s.decode[i].kv_len &&
           def[i].q_len == s.decode[i].q_len && def[i].page_size == s.decode[i].page_size &&
           def[i].causal == s.decode[i].causal));
}

TEST_CASE("shapes file: attention_decode entries expand batch x kv_len lists, with q_len, page_size, causal",
          "[shapes]") {
  auto j = nlohmann::json::parse(kValid);
  j["workloads"]["attention_decode"] = nlohmann::json::parse(
      R"([{"batch": [1, 7], "kv_len": [17, 4097, 300]},
          {"batch": 2, "kv_len": [64], "q_len": 5, "page_size": 16, "causal": false},
          {"batch": 2, "kv_len": 64, "q_len": 5, "page_size": 0}])");
  const kt::ShapesFile s = kt::parse_shapes(j, "inline");
  REQUIRE(s.decode.size() == 8);
  const int grid[][2] = {{1, 17}, {1, 4097}, {1, 300}, {7, 17}, {7, 4097}, {7, 300}};  // batch outer
  for (size_t i = 0; i < 6; ++i) {
    CHECK(s.decode[i].batch == grid[i][0]);
    CHECK(s.decode[i].kv_len == grid[i][1]);
    CHECK(s.decode[i].q_len == 1);      // default
    CHECK(s.decode[i].page_size == 0);  // default: contiguous
    CHECK(s.decode[i].causal);          // default
  }
  CHECK((s.decode[6].batch == 2 && s.decode[6].kv_len == 64 && s.decode[6].q_len == 5 && s.decode[6].page_size == 16 &&
         !s.decode[6].causal));
  CHECK((s.decode[7].q_len == 5 && s.decode[7].page_size == 0 && s.decode[7].causal));

  auto bad = [&](const char* entry) {
    auto k = j;
    k["workloads"]["attention_decode"] = nlohmann::json::parse(entry);
    try {
      kt::parse_shapes(k, "x.json");
    } catch (const kt::ShapesError& e) {
      return std::string(e.what());
    }
    FAIL("expected a ShapesError for " << entry);
    return std::string();
  };
  CHECK(contains(
      bad(R"([{"batch": [], "kv_len": 5}])"),
      "x.json: field 'workloads.attention_decode[0].batch': expected a positive integer or a non-empty array"));
  CHECK(contains(bad(R"([{"batch": [1, 0], "kv_len": 5}])"),
                 "field 'workloads.attention_decode[0].batch[1]': expected a positive integer"));
  CHECK(contains(bad(R"([{"batch": 1, "kv_len": [5, 5]}])"),
                 "field 'workloads.attention_decode[0]': lists batch 1 x kv_len 5 twice"));
  CHECK(contains(bad(R"([{"batch": [1, 2], "kv_len": 5}, {"batch": 2, "kv_len": 5}])"),
                 "field 'workloads.attention_decode[1]': duplicates workloads.attention_decode[0]"));
  CHECK(contains(bad(R"([{"batch": 1, "kv_len": 5, "q_len": 0}])"),
                 "field 'workloads.attention_decode[0].q_len': expected a positive integer"));
  CHECK(contains(bad(R"([{"batch": 1, "kv_len": 5, "page_size": -16}])"),
                 "field 'workloads.attention_decode[0].page_size': expected a positive integer"));
  CHECK(contains(bad(R"([{"batch": 1, "kv_len": 5, "causal": 1}])"), "field 'workloads.attention_decode[0].causal'"));
  CHECK(contains(bad(R"([{"batch": 1, "kv_len": 5, "pages": 16}])"),
                 "unknown field 'workloads.attention_decode[0].pages'"));
  // The same sizes in another layout, q_len or mask are other problems.
  j["workloads"]["attention_decode"] = nlohmann::json::parse(
      R"([{"batch": 1, "kv_len": 5}, {"batch": 1, "kv_len": 5, "page_size": 16}, {"batch": 1, "kv_len": 5, "q_len": 2},
          {"batch": 1, "kv_len": 5, "causal": false}])");
  CHECK(kt::parse_shapes(j, "inline").decode.size() == 4);
}

TEST_CASE("shapes file: optional fields and defaults", "[shapes]") {
  const kt::ShapesFile s = kt::parse_shapes(nlohmann::json::parse(kValid), "inline");
  CHECK(s.source == "inline");
  CHECK(s.model.rope_theta == 500000.0);
  CHECK(s.dtypes == std::vector<kt::DType>{kt::DType::f16});
  REQUIRE(s.prefill.size() == 2);
  CHECK(s.prefill[0].seqlen_k == 37);  // default = seqlen
  CHECK(s.prefill[0].causal);          // default true
  CHECK(s.prefill[1].seqlen_q == 5);
  CHECK(s.prefill[1].seqlen_k == 577);
  CHECK_FALSE(s.prefill[1].causal);
  CHECK(s.qkv_tokens == std::vector<int>{1, 1000});
  CHECK(s.qkv_formats == std::vector<std::string>{"nf4"});
  REQUIRE(s.decode.size() == 1);
  CHECK(s.decode[0].batch == 3);
  CHECK(s.decode[0].kv_len == 1000);

  // dtypes, qkv_bias, rope_theta omitted; only a decode workload; dtype aliases accepted.
  auto j = nlohmann::json::parse(kValid);
  j.erase("dtypes");
  j.erase("qkv_bias");
  j.erase("rope_theta");
  j["workloads"].erase("attention_prefill");
  j["workloads"].erase("qkv_proj");
  const kt::ShapesFile d = kt::parse_shapes(j, "inline");
  CHECK(d.dtypes == std::vector<kt::DType>{kt::DType::bf16, kt::DType::f16});
  CHECK_FALSE(d.model.qkv_bias);
  CHECK(d.model.rope_theta == 10000.0);
  CHECK(d.prefill.empty());
  CHECK(d.qkv_tokens.empty());
  CHECK(d.decode.size() == 1);
  j["dtypes"] = {"bfloat16", "half"};
  CHECK(kt::parse_shapes(j, "inline").dtypes == std::vector<kt::DType>{kt::DType::bf16, kt::DType::f16});
}

TEST_CASE("shapes file: Hugging Face config.json fills defaults", "[shapes]") {
  // Abridged Qwen/Qwen2.5-7B-Instruct config.json: no head_dim, no attention_bias.
  TempFile qwen(R"({
    "_name_or_path": "Qwen/Qwen2.5-7B-Instruct", "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu",
    "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 18944,
    "max_position_embeddings": 32768, "max_window_layers": 28, "model_type": "qwen2",
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 152064 })");
  const kt::ShapesFile s = kt::load_shapes(qwen.path);
  CHECK(s.source == qwen.path);
  CHECK(s.model.name == "Qwen/Qwen2.5-7B-Instruct");
  CHECK(s.model.hidden_size == 3584);
  CHECK(s.model.num_heads == 28);
  CHECK(s.model.num_kv_heads == 4);
  CHECK(s.model.head_dim == 128);  // 3584 / 28
  CHECK(s.model.qkv_bias);         // model_type qwen2
  CHECK(s.model.rope_theta == 1000000.0);
  CHECK(s.dtypes == std::vector<kt::DType>{kt::DType::bf16, kt::DType::f16});
  // Default workloads are those of shapes/qwen7b.json.
  const kt::ShapesFile ref = kt::load_shapes(std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json");
  REQUIRE(s.prefill.size() == ref.prefill.size());
  for (size_t i = 0; i < s.prefill.size(); ++i) {
    CHECK(s.prefill[i].batch == ref.prefill[i].batch);
    CHECK(s.prefill[i].seqlen_q == ref.prefill[i].seqlen_q);
    CHECK(s.prefill[i].seqlen_k == ref.prefill[i].seqlen_k);
    CHECK(s.prefill[i].causal == ref.prefill[i].causal);
  }
  CHECK(s.qkv_tokens == ref.qkv_tokens);
  CHECK(s.qkv_formats == ref.qkv_formats);
  REQUIRE(s.decode.size() == ref.decode.size());
  for (size_t i = 0; i < s.decode.size(); ++i) {
    CHECK(s.decode[i].batch == ref.decode[i].batch);
    CHECK(s.decode[i].kv_len == ref.decode[i].kv_len);
    CHECK(s.decode[i].q_len == ref.decode[i].q_len);
    CHECK(s.decode[i].page_size == ref.decode[i].page_size);
  }

  // Llama-style: explicit head_dim and attention_bias false; no num_key_value_heads -> MHA;
  // no rope_theta -> 10000; no _name_or_path -> model_type.
  nlohmann::json llama = {{"model_type", "llama"}, {"hidden_size", 4096},     {"num_attention_heads", 32},
                          {"head_dim", 96},        {"attention_bias", false}, {"vocab_size", 32000}};
  kt::ShapesFile l = kt::parse_shapes(llama, "llama/config.json");
  CHECK(l.model.name == "llama");
  CHECK(l.model.head_dim == 96);
  CHECK(l.model.num_kv_heads == 32);
  CHECK_FALSE(l.model.qkv_bias);
  CHECK(l.model.rope_theta == 10000.0);
  llama.erase("attention_bias");
  llama["model_type"] = "mistral";
  CHECK_FALSE(kt::parse_shapes(llama, "x").model.qkv_bias);  // only qwen2 defaults to a bias
  llama["attention_bias"] = true;
  CHECK(kt::parse_shapes(llama, "x").model.qkv_bias);
  // HF errors name the field too.
  llama["num_key_value_heads"] = 5;
  CHECK_THROWS_WITH(kt::parse_shapes(llama, "hf.json"),
                    "hf.json: field 'num_key_value_heads': 32 attention heads are not a multiple of 5 KV heads");
  llama["num_key_value_heads"] = 8;
  llama.erase("head_dim");
  llama["hidden_size"] = 4100;
  CHECK_THROWS_WITH(kt::parse_shapes(llama, "hf.json"), Catch::Contains("hf.json: field 'hidden_size'"));
}

TEST_CASE("shapes file: every error names the file and the field", "[shapes]") {
  std::string path;
  std::string msg;

  SECTION("missing field") {
    msg = error_of(replace(kValid, R"("num_key_value_heads": 2,)", ""), &path);
    CHECK(msg == path + ": missing field 'num_key_value_heads'");
    msg = error_of(replace(kValid, R"({"batch": 3, "kv_len": 1000})", R"({"batch": 3})"), &path);
    CHECK(msg == path + ": missing field 'workloads.attention_decode[0].kv_len'");
  }
  SECTION("negative seqlen") {
    msg = error_of(replace(kValid, R"("seqlen": 5,)", R"("seqlen": -5,)"), &path);
    CHECK(contains(msg, path + ": field 'workloads.attention_prefill[1].seqlen': expected a positive integer"));
    msg = error_of(replace(kValid, R"("seqlen_k": 577)", R"("seqlen_k": 0)"), &path);
    CHECK(contains(msg, path + ": field 'workloads.attention_prefill[1].seqlen_k': expected a positive integer"));
    msg = error_of(replace(kValid, "[1, 1000]", "[1, -1000]"), &path);
    CHECK(contains(msg, path + ": field 'workloads.qkv_proj.tokens[1]': expected a positive integer"));
  }
  SECTION("string or float where an integer is expected") {
    msg = error_of(replace(kValid, R"("head_dim": 32)", R"("head_dim": "32")"), &path);
    CHECK(contains(msg, path + ": field 'head_dim': expected a positive integer"));
    msg = error_of(replace(kValid, R"("kv_len": 1000)", R"("kv_len": 1000.5)"), &path);
    CHECK(contains(msg, path + ": field 'workloads.attention_decode[0].kv_len': expected a positive integer"));
    msg = error_of(replace(kValid, R"("batch": 1, "seqlen": 37)", R"("batch": 1, "seqlen": 3000000000)"), &path);
    CHECK(contains(msg, path + ": field 'workloads.attention_prefill[0].seqlen': expected a positive integer"));
    msg = error_of(replace(kValid, R"("causal": false)", R"("causal": "no")"), &path);
    CHECK(contains(msg, path + ": field 'workloads.attention_prefill[1].causal'"));
  }
  SECTION("unknown dtype and format") {
    msg = error_of(replace(kValid, R"(["fp16"])", R"(["fp16", "fp32"])"), &path);
    CHECK(msg == path + ": field 'dtypes[1]': unknown dtype 'fp32' (expected fp16 or bf16)");
    msg = error_of(replace(kValid, R"(["nf4"])", R"(["nf4", "fp8"])"), &path);
    CHECK(contains(msg, path + ": field 'workloads.qkv_proj.formats[1]': unknown weight format 'fp8'"));
  }
  SECTION("heads not a multiple") {
    msg = error_of(replace(replace(kValid, R"("num_attention_heads": 8)", R"("num_attention_heads": 28)"),
                           R"("num_key_value_heads": 2)", R"("num_key_value_heads": 5)"),
                   &path);
    CHECK(msg == path + ": field 'num_key_value_heads': 28 attention heads are not a multiple of 5 KV heads");
  }
  SECTION("unknown keys are rejected with their name") {
    msg = error_of(replace(kValid, R"("qkv_bias": false,)", R"("qkv_bias": false, "rope_scaling": 2,)"), &path);
    CHECK(contains(msg, path + ": unknown field 'rope_scaling'"));
    msg = error_of(replace(kValid, R"("attention_decode")", R"("attention_decoding")"), &path);
    CHECK(contains(msg, path + ": unknown field 'workloads.attention_decoding'"));
    msg = error_of(replace(kValid, R"("seqlen": 37)", R"("seqlen": 37, "seqlen_q": 37)"), &path);
    CHECK(contains(msg, path + ": unknown field 'workloads.attention_prefill[0].seqlen_q'"));
  }
  SECTION("no workloads at all") {
    msg = error_of(R"({"model": "x", "hidden_size": 8, "num_attention_heads": 1, "num_key_value_heads": 1,
                       "head_dim": 8, "workloads": {"attention_prefill": []}})",
                   &path);
    CHECK(contains(msg, path + ": field 'workloads': no workloads"));
  }
  SECTION("bad JSON") {
    msg = error_of(replace(kValid, R"("head_dim": 32,)", R"("head_dim": 32,,)"), &path);
    CHECK(contains(msg, path + ": invalid JSON"));
    CHECK(contains(msg, "line 2"));  // nlohmann's parse_error gives the position
    msg = error_of("", &path);
    CHECK(contains(msg, path + ": invalid JSON"));
    msg = error_of("[1, 2]", &path);
    CHECK(contains(msg, path + ": expected a JSON object"));
  }
  SECTION("missing file") {
    const std::string missing = "/tmp/kt_no_such_dir/no_such_shapes.json";
    CHECK_THROWS_AS(kt::load_shapes(missing), kt::ShapesError);
    CHECK_THROWS_WITH(kt::load_shapes(missing), Catch::StartsWith(missing + ": cannot open file"));
  }
}

TEST_CASE("shapes file: any kerntune-only key means the kerntune format", "[shapes]") {
  std::string path;
  // A missing or misspelt "workloads" is an error, not a switch to Hugging Face defaults.
  std::string msg = error_of(replace(kValid, R"("workloads": {)", R"("unused": 0, "workload": {)"), &path);
  CHECK(contains(msg, path + ": unknown field 'unused'"));
  CHECK(contains(msg, "because it has the key 'model'"));
  msg = error_of(replace(kValid, R"("workloads")", R"("workload")"), &path);
  CHECK(contains(msg, path + ": unknown field 'workload' (expected one of: model, hidden_size"));
  auto j = nlohmann::json::parse(kValid);
  j.erase("workloads");
  CHECK_THROWS_WITH(kt::parse_shapes(j, "k.json"), "k.json: missing field 'workloads'");
  // Each kerntune-only key alone selects the kerntune format (then "model" is missing).
  for (const char* key : {"dtypes", "qkv_bias", "workloads"}) {
    auto k = nlohmann::json::parse(kValid);
    nlohmann::json only = {{"hidden_size", 256}, {"num_attention_heads", 8}, {key, k[key]}};
    CHECK_THROWS_WITH(kt::parse_shapes(only, "k.json"), "k.json: missing field 'model'");
  }
  CHECK_FALSE(kt::parse_shapes(nlohmann::json::parse(kValid), "k.json").hugging_face);
  nlohmann::json hf = {{"hidden_size", 256}, {"num_attention_heads", 8}, {"rope_theta", 20000.0}};
  const auto s = kt::parse_shapes(hf, "config.json");
  CHECK(s.hugging_face);
  CHECK(s.model.rope_theta == 20000.0);
}

TEST_CASE("shapes file: duplicate keys and duplicate workloads are errors", "[shapes]") {
  std::string path;
  std::string msg = error_of(replace(kValid, R"("head_dim": 32,)", R"("head_dim": 32, "head_dim": 64,)"), &path);
  CHECK(msg == path + ": duplicate key 'head_dim' (JSON would silently keep the last one)");
  // The path of a nested duplicate names the array element.
  msg = error_of(replace(kValid, R"({"batch": 2, "seqlen": 5,)", R"({"batch": 2, "seqlen": 5, "batch": 2,)"), &path);
  CHECK(contains(msg, path + ": duplicate key 'workloads.attention_prefill[1].batch'"));
  msg = error_of(replace(kValid, R"("formats": ["nf4"] })", R"("formats": ["nf4"], "tokens": [2] })"), &path);
  CHECK(contains(msg, path + ": duplicate key 'workloads.qkv_proj.tokens'"));
  // Equal keys in different objects are fine.
  CHECK_NOTHROW(kt::load_shapes(TempFile(kValid).path));

  msg = error_of(replace(kValid, R"({"batch": 1, "seqlen": 37})",
                         R"({"batch": 1, "seqlen": 37}, {"batch": 1, "seqlen": 37, "seqlen_k": 37, "causal": true})"),
                 &path);
  CHECK(msg == path +
                   ": field 'workloads.attention_prefill[1]': duplicates workloads.attention_prefill[0] (the same "
                   "problem would be tuned twice)");
  // The same sizes with another mask are another problem.
  CHECK_NOTHROW(
      kt::load_shapes(TempFile(replace(kValid, R"({"batch": 1, "seqlen": 37})",
                                       R"({"batch": 1, "seqlen": 37}, {"batch": 1, "seqlen": 37, "causal": false})"))
                          .path));
  msg = error_of(replace(kValid, R"({"batch": 3, "kv_len": 1000})",
                         R"({"batch": 3, "kv_len": 1000}, {"batch": 3, "kv_len": 1000})"),
                 &path);
  CHECK(contains(msg, path + ": field 'workloads.attention_decode[1]': duplicates workloads.attention_decode[0]"));
}

TEST_CASE("shapes file: sizes are bounded where they are parsed", "[shapes]") {
  std::string path;
  // num_attention_heads 2^24 would overflow N = (Hq + 2 Hkv) D in int.
  std::string msg =
      error_of(replace(kValid, R"("num_attention_heads": 8)", R"("num_attention_heads": 16777216)"), &path);
  CHECK(msg == path + ": field 'num_attention_heads': 16777216 is too large: at most 1024 is supported");
  msg = error_of(replace(kValid, R"("hidden_size": 256)", R"("hidden_size": 2147483584)"), &path);
  CHECK(msg == path + ": field 'hidden_size': 2147483584 is too large: at most 65536 is supported");
  msg = error_of(replace(kValid, R"("seqlen_k": 577)", R"("seqlen_k": 2147483647)"), &path);
  CHECK(msg == path +
                   ": field 'workloads.attention_prefill[1].seqlen_k': 2147483647 is too large: at most 1048576 is "
                   "supported");
  msg = error_of(replace(kValid, R"("kv_len": 1000)", R"("kv_len": 1048577)"), &path);
  CHECK(contains(msg, "field 'workloads.attention_decode[0].kv_len': 1048577 is too large: at most 1048576"));
  msg = error_of(replace(kValid, "[1, 1000]", "[1, 2000000]"), &path);
  CHECK(contains(msg, "field 'workloads.qkv_proj.tokens[1]': 2000000 is too large: at most 1048576"));
  msg = error_of(replace(kValid, R"("head_dim": 32)", R"("head_dim": 2048)"), &path);
  CHECK(contains(msg, "field 'head_dim': 2048 is too large: at most 1024"));
  msg = error_of(replace(kValid, R"("batch": 1, "seqlen": 37)", R"("batch": 65536, "seqlen": 37)"), &path);
  CHECK(contains(msg, "field 'workloads.attention_prefill[0].batch': 65536 is too large: at most 65535"));

  // Each value at its bound, but a tensor over kMaxTensorBytes: K/V of 65535 x 2^20 x 2 x 32 x 2 bytes.
  msg = error_of(replace(kValid, R"("batch": 2, "seqlen": 5, "seqlen_k": 577)",
                         R"("batch": 65535, "seqlen": 5, "seqlen_k": 1048576)"),
                 &path);
  CHECK(contains(msg, path + ": field 'workloads.attention_prefill[1]': K (and V) would take 8191.9 GiB (batch 65535 x "
                             "seqlen_k 1048576 x 2 KV heads x head_dim 32 x 2 bytes); the limit is 64 GiB per tensor"));
  // The fp16 Q/K/V weight: 65536 x (1024 + 2 x 1024) x 1024 x 2 bytes.
  msg = error_of(replace(replace(replace(replace(kValid, R"("hidden_size": 256)", R"("hidden_size": 65536)"),
                                         R"("num_attention_heads": 8)", R"("num_attention_heads": 1024)"),
                                 R"("num_key_value_heads": 2)", R"("num_key_value_heads": 1024)"),
                         R"("head_dim": 32)", R"("head_dim": 1024)"),
                 &path);
  CHECK(contains(msg, "field 'hidden_size': the Q/K/V weight would take 384.0 GiB"));
  // Below the limit is accepted: K/V of 128 x 2^20 x 2 x 32 x 2 bytes = 16 GiB.
  CHECK_NOTHROW(kt::load_shapes(TempFile(replace(kValid, R"("batch": 2, "seqlen": 5, "seqlen_k": 577)",
                                                 R"("batch": 128, "seqlen": 5, "seqlen_k": 1048576)"))
                                    .path));
  // Hugging Face configs are bounded too.
  nlohmann::json hf = {{"hidden_size", 3584}, {"num_attention_heads", 16777216}};
  CHECK_THROWS_WITH(kt::parse_shapes(hf, "hf.json"), Catch::Contains("'num_attention_heads': 16777216 is too large"));
}

TEST_CASE("shapes file: names with control characters, deep nesting and directories are refused", "[shapes]") {
  std::string path;
  std::string msg = error_of(replace(kValid, R"("Tiny")", R"("x\u001b[31mRED")"), &path);
  CHECK(msg == path + ": field 'model': contains the control character 0x1b; expected printable text");
  msg = error_of(replace(kValid, R"("Tiny")", R"("two\nlines")"), &path);
  CHECK(contains(msg, "field 'model': contains the control character 0x0a"));
  CHECK(kt::load_shapes(TempFile(replace(kValid, R"("Tiny")", R"("Tiny – ünïcode")")).path).model.name ==
        "Tiny – ünïcode");

  msg = error_of(replace(kValid, R"("Tiny")", std::string(100, '[') + std::string(100, ']')), &path);
  CHECK(contains(msg, path + ": JSON nested more than 64 levels deep"));

  const std::string dir = "/tmp/kt_shapes_test_dir_" + std::to_string(::getpid());
  REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
  CHECK_THROWS_WITH(kt::load_shapes(dir), dir + ": is a directory, expected a JSON file");
  ::rmdir(dir.c_str());
}

TEST_CASE("shapes file: Hugging Face text_config, rope_parameters and architectures", "[shapes]") {
  // A multimodal config: the text model's geometry is nested; the name comes from architectures.
  nlohmann::json vl = nlohmann::json::parse(R"({
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
    "vision_config": {"hidden_size": 1280, "num_heads": 16},
    "text_config": {"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
                    "rope_theta": 1000000.0, "vocab_size": 152064}})");
  const auto s = kt::parse_shapes(vl, "vl.json");
  CHECK(s.hugging_face);
  CHECK(s.model.name == "Qwen2_5_VLForConditionalGeneration");
  CHECK(s.model.hidden_size == 3584);
  CHECK(s.model.num_heads == 28);
  CHECK(s.model.num_kv_heads == 4);
  CHECK(s.model.head_dim == 128);
  CHECK(s.model.qkv_bias);  // the text model's model_type is qwen2
  CHECK(s.model.rope_theta == 1000000.0);
  vl["text_config"]["num_key_value_heads"] = 5;
  CHECK_THROWS_WITH(kt::parse_shapes(vl, "vl.json"), Catch::Contains("28 attention heads are not a multiple of 5"));
  vl["text_config"]["num_key_value_heads"] = "4";
  CHECK_THROWS_WITH(kt::parse_shapes(vl, "vl.json"),
                    Catch::Contains("field 'text_config.num_key_value_heads': expected a positive integer"));

  // Newer transformers: rope_theta inside rope_parameters.
  nlohmann::json llama = {{"model_type", "llama"},
                          {"hidden_size", 4096},
                          {"num_attention_heads", 32},
                          {"rope_parameters", {{"rope_theta", 500000.0}, {"rope_type", "default"}}}};
  CHECK(kt::parse_shapes(llama, "x").model.rope_theta == 500000.0);
  CHECK(kt::parse_shapes(llama, "x").model.name == "llama");
  llama["rope_parameters"]["rope_theta"] = -1;
  CHECK_THROWS_WITH(kt::parse_shapes(llama, "x"), Catch::Contains("field 'rope_parameters.rope_theta'"));
  llama["rope_parameters"].erase("rope_theta");
  CHECK(kt::parse_shapes(llama, "x").model.rope_theta == 10000.0);
  // Name: _name_or_path first, then architectures[0]; an empty _name_or_path is skipped.
  llama["architectures"] = {"LlamaForCausalLM"};
  CHECK(kt::parse_shapes(llama, "x").model.name == "LlamaForCausalLM");
  llama["_name_or_path"] = "";
  CHECK(kt::parse_shapes(llama, "x").model.name == "LlamaForCausalLM");
  llama["_name_or_path"] = "meta-llama/Llama-3.1-8B";
  CHECK(kt::parse_shapes(llama, "x").model.name == "meta-llama/Llama-3.1-8B");
  llama.erase("_name_or_path");
  llama.erase("architectures");
  llama.erase("model_type");
  CHECK(kt::parse_shapes(llama, "x").model.name == "unknown");
}
