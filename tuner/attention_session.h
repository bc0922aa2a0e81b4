// attention_prefill's tuner registration: the shapes file's prefill workloads, the reference rows, the tolerance and
// the measuring session (inputs, float64 reference rows and device buffers built once per problem; each candidate is
// verified on poisoned outputs before it may be timed). Runs inside an autotune worker process (tuner/worker.h).
#pragma once

namespace kt {
struct TunerFamily;
namespace attn {

/// attention_prefill's tuner registration (tuner/tuner_registry.cpp): the shapes file's prefill workloads
/// (attention_prefill_problems), 512 reference rows, tolerance(dtype), and a measuring session per problem.
TunerFamily tuner_family();

}  // namespace attn
}  // namespace kt
