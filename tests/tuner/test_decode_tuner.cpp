// attention_decode's tuner pieces without a GPU: the problems of a shapes file (qwen7b.json's bucket grid, errors
// naming the workload), the registration, and the harness's inputs, reference rows and verification.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>

#include "reference/dtype_convert.h"
#include "tuner/decode_harness.h"
#include "tuner/decode_problems.h"
#include "tuner/shapes_file.h"
#include "tuner/tuner_registry.h"

using namespace kt;

namespace {

ShapesFile qwen() { return load_shapes(std::string(KT_SOURCE_DIR) + "/shapes/qwen7b.json"); }

decode::Problem small(decode::KvLayout layout, int q_len = 3) {
  decode::Problem p;
  p.dtype = DType::f16;
  p.batch = 5;
  p.q_len = q_len;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.kv_len = 37;
  p.kv_layout = layout;
  p.page_size = layout == decode::KvLayout::paged ? 16 : 0;
  p.causal = true;
  return p;
}

}  // namespace

TEST_CASE("attention_decode_problems: qwen7b.json's grid, dtypes outer, both layouts", "[tuner][decode]") {
  const ShapesFile s = qwen();
  const auto ps = attention_decode_problems(s);
  REQUIRE(ps.size() == s.dtypes.size() * s.decode.size());
  std::set<std::string> keys;
  for (size_t n = 0; n < ps.size(); ++n) {
    const auto& p = ps[n];
    const DecodeWorkload& w = s.decode[n % s.decode.size()];
    CHECK(p.dtype == s.dtypes[n / s.decode.size()]);
    CHECK((p.batch == w.batch && p.kv_len == w.kv_len && p.q_len == w.q_len && p.causal == w.causal));
    CHECK((p.num_heads == 28 && p.num_kv_heads == 4 && p.head_dim == 128));
    CHECK(p.kv_layout == (w.page_size ? decode::KvLayout::paged : decode::KvLayout::contiguous));
    CHECK(p.page_size == w.page_size);
    keys.insert(p.key());
  }
  CHECK(keys.size() == ps.size());
  // The grid covers the serving range: every batch 1..64 and kv_len 512..32768 of q_len 1, in both layouts, has a
  // tuned problem of its class within a factor 2 in each (the runtime's nearest step is log distance).
  for (int page : {0, 64})
    for (int b = 1; b <= 64; b += 3)
      for (int kv = 512; kv <= 32768; kv = kv * 5 / 4) {
        double best_b = 1e9, best_kv = 1e9;
        for (const auto& p : ps)
          if (p.q_len == 1 && p.page_size == page) {
            best_b = std::min(best_b, std::fabs(std::log(double(b) / p.batch)));
            best_kv = std::min(best_kv, std::fabs(std::log(double(kv) / p.kv_len)));
          }
        CHECK(best_b <= std::log(2.0) + 1e-9);
        CHECK(best_kv <= std::log(2.0) + 1e-9);
      }
  // Speculative decode: q_len 4 and 8, paged and contiguous.
  for (int q : {4, 8})
    for (int page : {0, 64}) {
      bool found = false;
      for (const auto& p : ps) found |= p.q_len == q && p.page_size == page && p.batch == 16 && p.kv_len == 4096;
      CHECK(found);
    }
  // The registration gives the same problems as JSON.
  const auto& tf = find_tuner_family("attention_decode");
  const auto js = tf.problems(s);
  REQUIRE(js.size() == ps.size());
  for (size_t n = 0; n < ps.size(); ++n) CHECK(js[n] == decode::problem_to_json(ps[n]));
  CHECK(tf.tolerance(js[0]) == decode::tolerance(ps[0].dtype));
}

TEST_CASE("attention_decode_problems: an unsupported workload names the file, the workload and the rule",
          "[tuner][decode]") {
  ShapesFile s = qwen();
  s.source = "q.json";
  s.decode = {{1, 4096}, {2, 512, 17, 0, true}};
  CHECK_THROWS_WITH(attention_decode_problems(s),
                    Catch::StartsWith("q.json: attention_decode workload 1 (batch 2, kv_len 512): ") &&
                        Catch::Contains("q_len must be 1..16, got 17"));
  s.decode = {{1, 4096, 1, 48, true}};
  CHECK_THROWS_WITH(attention_decode_problems(s), Catch::Contains("page_size 48 is not supported"));
  s.decode = {{1, 4096}};
  s.model.head_dim = 96;
  CHECK_THROWS_WITH(attention_decode_problems(s), Catch::Contains("head_dim 96"));
}

TEST_CASE("decode harness: inputs in the kernel's layouts, NaN outside the sequences", "[tuner][decode]") {
  for (auto layout : {decode::KvLayout::contiguous, decode::KvLayout::paged}) {
    const auto p = small(layout);
    const std::vector<int> lens = {37, 0, 17, 1, 33};
    const auto in = decode::make_inputs(p, 11, lens);
    CHECK(in.capacity == (layout == decode::KvLayout::paged ? 48 : 37));
    CHECK(in.q.size() == size_t(5 * 3 * 8 * 64));
    const size_t row = 2 * 64;
    auto slot = [&](int b, int t) {
      return layout == decode::KvLayout::paged ? size_t(in.table[size_t(b) * in.max_pages + t / 16]) * 16 + t % 16
                                               : size_t(b) * in.capacity + t;
    };
    std::set<size_t> used;
    for (int b = 0; b < 5; ++b)
      for (int t = 0; t < in.capacity; ++t) {
        const float k0 = dtype_to_float(p.dtype, in.k[slot(b, t) * row]);
        if (t < lens[b]) {
          CHECK(std::isfinite(k0));
          used.insert(slot(b, t));
        } else if (layout == decode::KvLayout::contiguous) {
          CHECK(std::isnan(k0));
        }
      }
    // Every other element of the cache (past a sequence's length; paged: also the pages no table entry names) is NaN:
    // the buffers start unwritten, so a slot the fill missed would show here.
    const size_t slots = in.k.size() / row;
    CHECK(slots == (layout == decode::KvLayout::paged ? size_t(in.num_pages) * 16 : size_t(5) * in.capacity));
    size_t not_nan = 0;
    for (size_t s = 0; s < slots; ++s)
      if (!used.count(s))
        for (size_t e = 0; e < row; ++e)
          not_nan += !std::isnan(dtype_to_float(p.dtype, in.k[s * row + e])) +
                     !std::isnan(dtype_to_float(p.dtype, in.v[s * row + e]));
    CHECK(not_nan == 0);
    // Every token has its own row: no two tokens' K rows are equal.
    std::set<std::vector<uint16_t>> rows;
    for (size_t s : used) rows.insert(std::vector<uint16_t>(in.k.begin() + s * row, in.k.begin() + (s + 1) * row));
    CHECK(rows.size() == used.size());
    if (layout == decode::KvLayout::paged) {
      CHECK(in.num_pages == 5 * 3 + 3);
      std::set<int> pages(in.table.begin(), in.table.end());
      CHECK(pages.size() == in.table.size());  // distinct pages
      bool shuffled = false;
      for (size_t j = 1; j < in.table.size(); ++j) shuffled |= in.table[j] != in.table[j - 1] + 1;
      CHECK(shuffled);
    }
  }
  CHECK_THROWS_WITH(decode::make_inputs(small(decode::KvLayout::contiguous), 1, {1, 2}), Catch::Contains("lens"));
}

TEST_CASE("decode harness: verify accepts the reference, refuses errors, poison and a wrong -inf", "[tuner][decode]") {
  for (auto layout : {decode::KvLayout::contiguous, decode::KvLayout::paged}) {
    const auto p = small(layout);
    const std::vector<int> lens = {37, 0, 17, 2, 33};  // sequence 1 is empty; sequence 3 hides query 0 (causal)
    const auto in = decode::make_inputs(p, 5, lens);
    const double scale = 0.125;
    const auto ref = decode::reference_rows(in, scale, 100000, 3, 2);
    // Sequences checked: the first, the last and up to two more; every row of them here.
    std::set<int> seqs;
    for (const auto& r : ref.rows) seqs.insert(r[0]);
    CHECK(seqs.count(0) == 1);
    CHECK(seqs.count(4) == 1);
    CHECK(ref.rows.size() == seqs.size() * 3 * 8);
    // An output that is the reference rounded to the dtype (zeros elsewhere), LSE exact.
    std::vector<uint16_t> out(in.q.size(), 0);
    std::vector<float> lse(size_t(5) * 8 * 3, 0.f);
    for (size_t n = 0; n < ref.rows.size(); ++n) {
      const auto& r = ref.rows[n];
      const size_t base = ((size_t(r[0]) * 3 + r[1]) * 8 + r[2]) * 64;
      for (int d = 0; d < 64; ++d) out[base + d] = float_to_dtype(p.dtype, float(ref.out[n * 64 + d]));
      lse[(size_t(r[0]) * 8 + r[2]) * 3 + r[1]] = float(ref.lse[n]);
    }
    auto v = decode::verify(in, ref, out, lse);
    INFO(v.message);
    CHECK(v.pass);
    // Rows of an empty sequence see no key: -inf in the reference.
    bool saw_empty = false;
    for (size_t n = 0; n < ref.rows.size(); ++n)
      if (ref.rows[n][0] == 1) {
        saw_empty = true;
        CHECK((std::isinf(ref.lse[n]) && ref.lse[n] < 0));
      }
    if (seqs.count(1)) CHECK(saw_empty);
    // A perturbed output fails on rel_l2.
    auto bad = out;
    for (size_t n = 0; n < ref.rows.size(); ++n) {
      const auto& r = ref.rows[n];
      const size_t base = ((size_t(r[0]) * 3 + r[1]) * 8 + r[2]) * 64;
      bad[base] = float_to_dtype(p.dtype, dtype_to_float(p.dtype, bad[base]) + 0.5f);
    }
    v = decode::verify(in, ref, bad, lse);
    CHECK_FALSE(v.pass);
    CHECK_THAT(v.message, Catch::Contains("rel_l2"));
    // Poison left anywhere (even outside the checked rows) fails.
    bad = out;
    bad.back() = 0xFFFF;
    v = decode::verify(in, ref, bad, lse);
    CHECK_FALSE(v.pass);
    CHECK(v.unwritten == 1);
    // A finite LSE where the reference is -inf fails.
    for (size_t n = 0; n < ref.rows.size(); ++n)
      if (std::isinf(ref.lse[n])) {
        auto l2 = lse;
        const auto& r = ref.rows[n];
        l2[(size_t(r[0]) * 8 + r[2]) * 3 + r[1]] = 0.f;
        CHECK_FALSE(decode::verify(in, ref, out, l2).pass);
        break;
      }
  }
}
