// Runs one attention prefill through kt::Runtime with a tuned database and checks it against the
// float64 reference.
//
//   example_attention_prefill [tuned.db]     (default: $KERNTUNE_DB; neither -> built-in defaults)
//
// Shape: Qwen2.5-7B prefill, B=1, S=2048, 28 query heads / 4 KV heads, head_dim 128, causal, bf16.
// Prints the lookup chain's answer, the error against the reference and PASS/FAIL; exits 1 on FAIL
// or error. The database is checked first, on any machine: a file that is not a readable tuning database
// exits 1 with the error. Then, on a machine without a GPU, it exits 0 after "no GPU found: ...".
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "cuda/driver.h"
#include "generator/arch.h"
#include "runtime/runtime.h"
#include "tuner/attention_harness.h"

int main(int argc, char** argv) {
  using namespace kt;
  std::string db_path = argc > 1 ? argv[1] : "";
  if (db_path.empty())
    if (const char* env = std::getenv("KERNTUNE_DB"); env && *env) db_path = env;
  if (!db_path.empty()) {
    try {
      db::TuningDb db(db_path, /*read_only=*/true);
      db.winners();  // reads the winners view: a corrupt or foreign database fails here
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  std::string why;
  if (!cuda::gpu_available(&why)) {
    std::printf("no GPU found: %s\n", why.c_str());
    return 0;
  }
  try {
    Runtime rt(db_path);  // "" -> built-in defaults
    std::printf("device: %s (%s), database: %s\n", rt.device_name().c_str(), arch_name(rt.arch()).c_str(),
                rt.has_db() ? rt.db_path().c_str() : "(none: built-in defaults)");

    attn::Problem p;
    p.dtype = DType::bf16;
    p.batch = 1;
    p.seqlen_q = 2048;
    p.seqlen_k = 2048;
    p.num_heads = 28;
    p.num_kv_heads = 4;
    p.head_dim = 128;
    p.causal = true;

    const Runtime::Choice c = rt.explain(p);
    std::printf("problem: %s\n%s: %s\n  %s\n", p.key().c_str(), c.step.c_str(), c.variant_name.c_str(), c.why.c_str());

    const attn::HostInputs in = attn::make_inputs(p, 2024);
    const float scale = attn::contiguous_params(p, nullptr, nullptr, nullptr, nullptr, nullptr).softmax_scale;
    const attn::RefRows ref = attn::reference_rows(in, scale, 512, 7);
    attn::DeviceProblem dev(in, 1, /*with_lse=*/true);
    dev.poison();
    cuda::Stream stream;
    rt.attention_prefill(p, dev.params(0, 0.f), stream.get());
    stream.synchronize();
    std::vector<uint16_t> out;
    std::vector<float> lse;
    dev.download(0, out, lse);
    const attn::Verdict v = attn::verify(in, ref, out, lse);
    std::printf("rel L2 error %.3e (tolerance %.0e), max abs %.3e, lse error %.3e over %zu reference rows\n", v.rel_l2,
                attn::tolerance(p.dtype), v.max_abs, v.lse_max_err, ref.rows.size());
    if (!v.pass) {
      std::printf("FAIL: %s\n", v.message.c_str());
      return 1;
    }
    std::printf("PASS\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
