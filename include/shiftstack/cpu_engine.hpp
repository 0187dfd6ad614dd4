// The fast `cpu` engine's SIMD targets. One binary carries the engine's vector code for several
// instruction sets (x86-64: AVX3 = AVX-512 F/BW/DQ/VL, AVX2 with FMA and F16C, SSE4, SSSE3 and
// portable scalar code; 64-bit Arm: NEON) and runs the best one the processor supports. The
// environment variable SHIFTSTACK_CPU_TARGET, or make_cpu_engine(name), picks another, e.g. to
// compare them or to check a narrower machine's code path.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "shiftstack/search.hpp"

namespace shiftstack {

// Targets compiled into this binary that this processor runs, best first (names as Highway
// spells them: "AVX3", "AVX2", "SSE4", "SSSE3", "NEON", "SCALAR", ...).
std::vector<std::string> cpu_engine_targets();

// A `cpu` engine on the named target (case-insensitive); empty: SHIFTSTACK_CPU_TARGET when set
// and not empty, else the best target. Error for a name that is not in cpu_engine_targets().
std::unique_ptr<Engine> make_cpu_engine(const std::string& target = "");

// The target a `cpu` engine object runs; empty for any other engine.
std::string cpu_engine_target(const Engine& engine);

}  // namespace shiftstack
