// attention_decode's runtime wiring without a GPU: the host-side argument checks (every bad input names the
// argument), the checks of host copies of the device tables, the runtime adapter's key and workspace rule, and the
// lookup chain's nearest step over a tuned bucket grid, and the C ABI's checks before the runtime handle.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "generator/arch.h"
#include "generator/decode_family.h"
#include "kerntune/kerntune.h"
#include "runtime/decode.h"
#include "runtime/runtime.h"

using namespace kt;
using namespace kt::decode;

namespace {

Problem paged_problem() {
  Problem p;
  p.dtype = DType::bf16;
  p.batch = 3;
  p.q_len = 4;
  p.num_heads = 28;
  p.num_kv_heads = 4;
  p.head_dim = 128;
  p.kv_len = 300;
  p.kv_layout = KvLayout::paged;
  p.page_size = 64;
  p.causal = true;
  return p;
}

// Fake, suitably aligned device addresses: nothing is dereferenced on the host.
const void* addr(uintptr_t n) { return reinterpret_cast<const void*>(uintptr_t(0x7f0000000000) + n * 0x100000); }

DecodeParams paged_args(const Problem& p, int num_pages = 40, int max_pages = 8) {
  return paged_params(p, addr(0), addr(1), addr(2), const_cast<void*>(addr(3)), nullptr,
                      static_cast<const int*>(addr(4)), static_cast<const int*>(addr(5)), num_pages, max_pages);
}

std::string error_of(const Problem& p, const DecodeParams& a) {
  try {
    check_call(p, a);
  } catch (const ProblemError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("decode check_call: valid arguments pass; every bad input names the argument", "[runtime][decode]") {
  const Problem p = paged_problem();
  CHECK(error_of(p, paged_args(p)).empty());
  Problem c = p;
  c.kv_layout = KvLayout::contiguous;
  c.page_size = 0;
  const DecodeParams ca = contiguous_params(c, addr(0), addr(1), addr(2), const_cast<void*>(addr(3)), nullptr,
                                            static_cast<const int*>(addr(4)), 300);
  CHECK(error_of(c, ca).empty());

  Problem bad = p;
  bad.q_len = 17;
  CHECK(has(error_of(bad, paged_args(p)), "q_len must be 1..16, got 17"));
  bad = p;
  bad.page_size = 48;
  CHECK(has(error_of(bad, paged_args(bad)), "page_size 48 is not supported"));
  bad.page_size = 512;
  CHECK(has(error_of(bad, paged_args(bad)), "page_size 512 is not supported"));
  bad = p;
  bad.num_kv_heads = 5;
  CHECK(has(error_of(bad, paged_args(bad)), "num_heads (28) must be a multiple of num_kv_heads (5)"));
  bad = p;
  bad.head_dim = 96;
  CHECK(has(error_of(bad, paged_args(bad)), "head_dim 96"));
  // Sizes of the arguments that disagree with the problem (e.g. another head count).
  bad = p;
  bad.num_heads = 32;
  CHECK(has(error_of(bad, paged_args(p)), "num_heads"));
  // kv_len past the cache's capacity: 8 pages of 64 tokens hold 512.
  bad = p;
  bad.kv_len = 513;
  CHECK(
      has(error_of(bad, paged_args(bad)),
          "kv_len (max_seqlen_k) 513 exceeds the cache's capacity of 512 tokens (max_pages_per_seq 8 x page_size 64)"));
  Problem cb = c;
  cb.kv_len = 301;
  const DecodeParams cba = contiguous_params(cb, addr(0), addr(1), addr(2), const_cast<void*>(addr(3)), nullptr,
                                             static_cast<const int*>(addr(4)), 300);
  CHECK(has(error_of(cb, cba), "capacity of 300 tokens (S_max)"));

  DecodeParams a = paged_args(p);
  a.seqlens_k = nullptr;
  CHECK(has(error_of(p, a), "seqlens_k must be a non-null"));
  a = paged_args(p);
  a.block_table = nullptr;
  CHECK(has(error_of(p, a), "block_table must be a non-null"));
  a = paged_args(p);
  a.q = static_cast<const char*>(a.q) + 8;
  CHECK(has(error_of(p, a), "q must be 16-byte aligned"));
  a = paged_args(p);
  a.v_row_stride += 4;
  CHECK(has(error_of(p, a), "v_row_stride must be a multiple of 8"));
  a = paged_args(p);
  a.num_pages = 0;
  CHECK(has(error_of(p, a), "num_pages must be >= 1"));
  a = paged_args(p);
  a.softmax_scale = -1.f;
  CHECK(has(error_of(p, a), "softmax_scale"));
  // The runtime binds the split buffers: a caller's values there are ignored, not an error.
  a = paged_args(p);
  a.kv_chunk = 1234;
  a.counters = reinterpret_cast<unsigned*>(0x10);
  CHECK(error_of(p, a).empty());
}

TEST_CASE("decode check_tables: host copies of seqlens_k and the block table", "[runtime][decode]") {
  const Problem p = paged_problem();  // 3 sequences, pages of 64, 8 pages each, 40 pages in the pool
  std::vector<int> table(3 * 8, -7);  // entries past a sequence's length are never read: any value
  const int pages[3][5] = {{3, 9, 1, 0, 0}, {39, 2, 5, 6, 0}, {12, 0, 0, 0, 0}};
  for (int b = 0; b < 3; ++b)
    for (int j = 0; j < 5; ++j) table[b * 8 + j] = pages[b][j];
  std::vector<int> lens = {129, 193, 0};  // 3, 4 and 0 pages
  CHECK_NOTHROW(check_tables(p, lens.data(), table.data(), 8, 40, 512));
  lens[2] = 1;  // now sequence 2 reaches its first page (12)
  CHECK_NOTHROW(check_tables(p, lens.data(), table.data(), 8, 40, 512));

  auto error = [&](const std::vector<int>& l, const std::vector<int>& t, int num_pages = 40) {
    try {
      check_tables(p, l.data(), t.data(), 8, num_pages, 512);
    } catch (const ProblemError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::vector<int> t = table;
  t[1 * 8 + 3] = 40;
  CHECK(has(error(lens, t), "block_table[1][3] = 40 addresses past num_pages 40"));
  t = table;
  t[0] = -1;
  CHECK(has(error(lens, t), "block_table[0][0] = -1 is negative"));
  CHECK(has(error(lens, table, 12), "block_table[1][0] = 39 addresses past num_pages 12"));  // a smaller pool
  std::vector<int> l = lens;
  l[2] = 513;
  CHECK(has(error(l, table), "seqlens_k[2] = 513 is outside [0, 512]"));
  l[2] = -1;
  CHECK(has(error(l, table), "seqlens_k[2] = -1"));
  // Contiguous: only the lengths.
  Problem c = p;
  c.kv_layout = KvLayout::contiguous;
  c.page_size = 0;
  std::vector<int> cl = {300, 0, 17};
  CHECK_NOTHROW(check_tables(c, cl.data(), nullptr, 0, 0, 300));
  cl[0] = 301;
  CHECK_THROWS_WITH(check_tables(c, cl.data(), nullptr, 0, 0, 300), Catch::Contains("seqlens_k[0] = 301"));
}

TEST_CASE("decode RuntimeAdapter: every key field tells problems apart; a kv_chunk may split", "[runtime][decode]") {
  const Problem p = paged_problem();
  int base[RuntimeAdapter::kKeyFields] = {};
  RuntimeAdapter::pod_key(p, base);
  auto differs = [&](Problem q) {
    int f[RuntimeAdapter::kKeyFields] = {};
    RuntimeAdapter::pod_key(q, f);
    for (int i = 0; i < RuntimeAdapter::kKeyFields; ++i)
      if (f[i] != base[i]) return true;
    return false;
  };
  CHECK_FALSE(differs(p));
  Problem q = p;
  q.dtype = DType::f16;
  CHECK(differs(q));
  q = p, q.batch = 4;
  CHECK(differs(q));
  q = p, q.q_len = 1;
  CHECK(differs(q));
  q = p, q.num_heads = 32;
  CHECK(differs(q));
  q = p, q.num_kv_heads = 7;
  CHECK(differs(q));
  q = p, q.head_dim = 64;
  CHECK(differs(q));
  q = p, q.kv_len = 301;
  CHECK(differs(q));
  q = p, q.kv_layout = KvLayout::contiguous;
  CHECK(differs(q));
  q = p, q.page_size = 128;
  CHECK(differs(q));
  q = p, q.causal = false;
  CHECK(differs(q));
  // The workspace: none without a kv_chunk; with one, sized by the problem (none when kv_len fits one chunk).
  CHECK_FALSE(RuntimeAdapter::uses_workspace(Config{16, 64, 4, 2, 0}));
  const Config split{32, 64, 4, 2, 128};
  CHECK(RuntimeAdapter::uses_workspace(split));
  CHECK(RuntimeAdapter::workspace_bytes(p, split, 132) == workspace_bytes(p, split));
  CHECK(workspace_bytes(p, split) > 0);
  CHECK(RuntimeAdapter::counter_bytes(p, split) > 0);
  Problem shorter = p;
  shorter.kv_len = 100;
  CHECK(RuntimeAdapter::workspace_bytes(shorter, split, 132) == 0);
}

TEST_CASE("decode lookup: a tuned problem answers inside its (batch, kv_len) bucket, the default outside",
          "[runtime][decode]") {
  const ArchId arch = parse_arch("sm_90a");
  const Family& f = family_type();
  std::vector<db::Winner> winners;
  long long id = 1;
  for (int b : {1, 16})
    for (int kv : {2048, 8192}) {
      Problem t = paged_problem();
      t.batch = b;
      t.kv_len = kv;
      t.q_len = 1;
      db::Winner w;
      w.device_name = "GPU";
      w.family = kFamily;
      w.problem_key = t.key();
      w.problem_json = problem_to_json(t).dump();
      const Config c{16, 64, 4, 2, kv / 8};
      w.variant_name = variant_name(t, c, arch);
      w.config_json = config_to_json(c).dump();
      w.median_us = 10;
      w.measurement_id = id++;
      winners.push_back(w);
    }
  Problem q = paged_problem();
  q.q_len = 1;
  q.batch = 12;
  q.kv_len = 2500;  // bucket (16, 2048): b16 sk2048 is the only tuned problem in it

  FamilyChoice ch = resolve(f, winners, "GPU", arch, problem_to_json(q));
  CHECK(ch.step == "nearest");
  Problem want = paged_problem();
  want.q_len = 1;
  want.batch = 16;
  want.kv_len = 2048;
  CHECK(ch.tuned_problem_key == want.key());
  // kv_len 3000 lies in bucket 4096, batch 4 in bucket 4: no tuned problem there, the default answers.
  q.kv_len = 3000;
  CHECK(resolve(f, winners, "GPU", arch, problem_to_json(q)).step == "default");
  q.kv_len = 2048;
  q.batch = 4;
  CHECK(resolve(f, winners, "GPU", arch, problem_to_json(q)).step == "default");
  q.kv_len = 8192;
  q.batch = 16;
  ch = resolve(f, winners, "GPU", arch, problem_to_json(q));
  CHECK(ch.step == "exact");
  // Another layout, page size or q_len is another class: the default answers.
  q.page_size = 128;
  CHECK(resolve(f, winners, "GPU", arch, problem_to_json(q)).step == "default");
  q.page_size = 64;
  q.q_len = 4;
  CHECK(resolve(f, winners, "GPU", arch, problem_to_json(q)).step == "default");
}

TEST_CASE("C ABI kt_attention_decode: the problem and the arguments are checked before the runtime handle",
          "[runtime][decode]") {
  const kt_attention_decode_problem good_p{KT_DTYPE_BF16, 2, 4, 28, 4, 128, 300, 1, 64, 1};
  kt_attention_decode_args good_a{};
  good_a.q = addr(0);
  good_a.k = addr(1);
  good_a.v = addr(2);
  good_a.o = const_cast<void*>(addr(3));
  good_a.seqlens_k = static_cast<const int32_t*>(addr(4));
  good_a.block_table = static_cast<const int32_t*>(addr(5));
  good_a.q_stride_head = 128, good_a.q_stride_row = 28 * 128, good_a.q_stride_batch = 4 * 28 * 128;
  good_a.o_stride_head = 128, good_a.o_stride_row = 28 * 128, good_a.o_stride_batch = 4 * 28 * 128;
  good_a.k_stride_head = good_a.v_stride_head = 128;
  good_a.k_stride_row = good_a.v_stride_row = 4 * 128;
  good_a.k_stride_batch = good_a.v_stride_batch = 64 * 4 * 128;
  good_a.block_table_stride = 8;
  good_a.num_pages = 40;
  good_a.max_pages_per_seq = 8;
  auto call = [](const kt_attention_decode_problem* p, const kt_attention_decode_args* a) {
    const kt_status s = kt_attention_decode(nullptr, p, a, nullptr);
    return std::make_pair(s, std::string(kt_last_error()));
  };
  auto [s, msg] = call(&good_p, &good_a);
  CHECK(s == KT_ERROR_INVALID_ARGUMENT);
  CHECK(msg == "kt_attention_decode: rt is NULL");
  std::tie(s, msg) = call(nullptr, &good_a);
  CHECK((s == KT_ERROR_INVALID_ARGUMENT && has(msg, "problem is NULL")));
  std::tie(s, msg) = call(&good_p, nullptr);
  CHECK((s == KT_ERROR_INVALID_ARGUMENT && has(msg, "args is NULL")));

  struct ProblemCase {
    void (*edit)(kt_attention_decode_problem&);
    kt_status status;
    const char* word;
  };
  const ProblemCase pcases[] = {
      {[](kt_attention_decode_problem& p) { p.q_len = 17; }, KT_ERROR_UNSUPPORTED, "q_len must be 1..16"},
      {[](kt_attention_decode_problem& p) { p.page_size = 48; }, KT_ERROR_UNSUPPORTED, "page_size 48"},
      {[](kt_attention_decode_problem& p) { p.num_kv_heads = 3; }, KT_ERROR_UNSUPPORTED, "num_kv_heads (3)"},
      {[](kt_attention_decode_problem& p) { p.dtype = 9; }, KT_ERROR_INVALID_ARGUMENT, "unknown dtype 9"},
      {[](kt_attention_decode_problem& p) { p.q_len = 0; }, KT_ERROR_INVALID_ARGUMENT, "q_len must be >= 1"},
      {[](kt_attention_decode_problem& p) { p.kv_len = 513; }, KT_ERROR_INVALID_ARGUMENT, "capacity of 512"},
      {[](kt_attention_decode_problem& p) { p.paged = 0; }, KT_ERROR_UNSUPPORTED, "page_size must be 0"},
  };
  for (const auto& c : pcases) {
    kt_attention_decode_problem p = good_p;
    c.edit(p);
    std::tie(s, msg) = call(&p, &good_a);
    INFO(msg);
    CHECK(s == c.status);
    CHECK(has(msg, c.word));
  }
  struct ArgCase {
    void (*edit)(kt_attention_decode_args&);
    const char* word;
  };
  const ArgCase acases[] = {
      {[](kt_attention_decode_args& a) { a.block_table = nullptr; }, "block_table must be a non-null"},
      {[](kt_attention_decode_args& a) { a.seqlens_k = nullptr; }, "seqlens_k must be a non-null"},
      {[](kt_attention_decode_args& a) { a.o = nullptr; }, "o must be non-null"},
      {[](kt_attention_decode_args& a) { a.k = static_cast<const char*>(a.k) + 8; }, "k must be 16-byte aligned"},
      {[](kt_attention_decode_args& a) { a.q_stride_row += 4; }, "q_row_stride must be a multiple of 8"},
      {[](kt_attention_decode_args& a) { a.k_stride_batch += 4; }, "k_page_stride must be a multiple of 8"},
      {[](kt_attention_decode_args& a) { a.num_pages = 0; }, "num_pages must be >= 1"},
      {[](kt_attention_decode_args& a) { a.max_pages_per_seq = 0; }, "max_pages_per_seq must be >= 1"},
      {[](kt_attention_decode_args& a) { a.block_table_stride = 7; }, "block_table_stride 7 is smaller"},
      {[](kt_attention_decode_args& a) { a.softmax_scale = std::nanf(""); }, "softmax_scale"},
  };
  for (const auto& c : acases) {
    kt_attention_decode_args a = good_a;
    c.edit(a);
    std::tie(s, msg) = call(&good_p, &a);
    INFO(msg);
    CHECK(s == KT_ERROR_INVALID_ARGUMENT);
    CHECK(has(msg, c.word));
  }
}
