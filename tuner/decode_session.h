// attention_decode's tuner registration: the shapes file's decode workloads, the reference rows, the tolerance and
// the measuring session (inputs, float64 reference rows and device buffers built once per problem; each candidate is
// verified on poisoned outputs before it may be timed). Runs inside an autotune worker process (tuner/worker.h).
#pragma once

namespace kt {
struct TunerFamily;
namespace decode {

/// attention_decode's tuner registration (tuner/tuner_registry.cpp): the shapes file's decode workloads
/// (attention_decode_problems), 256 reference rows, tolerance(dtype), and a measuring session per problem.
TunerFamily tuner_family();

}  // namespace decode
}  // namespace kt
