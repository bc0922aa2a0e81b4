#include "tuner/tune_attention.h"

#include <memory>
#include <tuple>

#include "runtime/attention.h"

namespace kt {
namespace attn {

const char* status_name(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::compile_failed: return "compile_failed";
    case Status::launch_failed: return "launch_failed";
    case Status::wrong_result: return "wrong_result";
  }
  return "?";
}

int pick_winner(const std::vector<Candidate>& c) {
  int best = -1;
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i].status == Status::ok && (best < 0 || c[i].timing.median_us < c[best].timing.median_us)) best = int(i);
  if (best < 0) return -1;
  const double limit = c[best].timing.median_us * 1.01;
  int pick = best;
  for (size_t i = 0; i < c.size(); ++i) {
    if (c[i].status != Status::ok || c[i].timing.median_us > limit) continue;
    auto key = [&](int j) { return std::make_tuple(c[j].report.registers, c[j].smem_bytes, c[j].variant); };
    if (key(int(i)) < key(pick)) pick = int(i);
  }
  return pick;
}

TuneResult tune_problem(const Problem& p, ArchId arch, const std::vector<Config>& configs,
                        const std::vector<const CompileResult*>& compiled, const TuneOptions& opt, CUstream stream) {
  TuneResult res;
  res.problem = p;
  const HostInputs in = make_inputs(p, opt.seed);
  const FwdParams probe = contiguous_params(p, nullptr, nullptr, nullptr, nullptr, nullptr, opt.softmax_scale);
  const RefRows ref = reference_rows(in, probe.softmax_scale, opt.ref_rows, opt.seed + 7);
  DeviceProblem check(in, 1, true);
  std::unique_ptr<DeviceProblem> rot;  // rotating copies for timing, created lazily
  const Config def = default_config(arch, p);
  for (size_t i = 0; i < configs.size(); ++i) {
    Candidate c;
    c.config = configs[i];
    c.variant = variant_name(p, c.config, arch);
    c.smem_bytes = smem_bytes(c.config, p.head_dim);
    const CompileResult* cr = compiled[i];
    if (c.config.tile_m == def.tile_m && c.config.tile_n == def.tile_n && c.config.warps == def.warps &&
        c.config.stages == def.stages && c.config.mainloop == def.mainloop && c.config.raster == def.raster)
      res.default_index = int(res.candidates.size());
    if (!cr || !cr->ok) {
      c.status = Status::compile_failed;
      c.error = cr ? cr->error : "not compiled";
      res.candidates.push_back(std::move(c));
      continue;
    }
    c.report = cr->report;
    try {
      LoadedKernel k(cr->cubin, cr->report.lowered_name, unsigned(c.smem_bytes));
      check.poison();
      launch(k, p, c.config, check.params(0, opt.softmax_scale), stream);
      cuda::check(cuda::api().cuStreamSynchronize(stream), "cuStreamSynchronize");
      std::vector<uint16_t> out;
      std::vector<float> lse;
      check.download(0, out, lse);
      c.verdict = verify(in, ref, out, lse);
      if (!c.verdict.pass) {
        c.status = Status::wrong_result;
        c.error = c.verdict.message;
        res.candidates.push_back(std::move(c));
        continue;
      }
      if (!rot) rot = std::make_unique<DeviceProblem>(in, cold_l2_copies(set_bytes(p), opt.l2_bytes), false);
      std::vector<FwdParams> params;
      for (int r = 0; r < rot->copies(); ++r) params.push_back(rot->params(r, opt.softmax_scale));
      c.timing = time_launches([&](int n) { launch(k, p, c.config, params[n % params.size()], stream); }, stream,
                               opt.budget_ms);
    } catch (const cuda::CudaError& e) {
      c.status = Status::launch_failed;
      c.error = e.what();
      res.candidates.push_back(std::move(c));
      throw;  // the context may be poisoned; callers isolate faults (issue 3: worker processes)
    }
    res.candidates.push_back(std::move(c));
  }
  res.winner = pick_winner(res.candidates);
  return res;
}

}  // namespace attn
}  // namespace kt
