// qkv_proj's tuner registration: its shapes-file problems, reference rows, tolerance and measure session.
#pragma once

namespace kt {
struct TunerFamily;
namespace qkv {

/// qkv_proj's tuner registration (tuner/tuner_registry.cpp): the shapes file's qkv_proj workload
/// (qkv_proj_problems), 48 reference rows, tolerance(dtype), and a measure session per problem that verifies with
/// NaN-poisoned outputs and times over rotating weight copies (3x the L2). The quantized weight depends only on
/// (format, dtype, n, k, seed), so a worker reuses the last one across the M values of a sweep.
TunerFamily tuner_family();

}  // namespace qkv
}  // namespace kt
