// The driver every Fourier-route engine shares: checks, device memory plan, the stages in order
// with CUDA events between them, and the host-side digest, candidate and top-k assembly.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "cuda/common/device_stack.hpp"
#include "spectra.cuh"

namespace shiftstack::cuda {

SpectralEngine::SpectralEngine() : state_(std::make_unique<SpectralState>()) {}
SpectralEngine::~SpectralEngine() = default;

std::string SpectralEngine::unsupported_reason(const SearchInput& input) const {
  const MotionBank& bank = *input.bank;
  if (!bank.is_cartesian())
    return "the Fourier route needs a Cartesian velocity grid (vx axis x vy axis): only there does "
           "the phase of a shift factor into one table per axis";
  if (bank.mode != ShiftMode::integer && !supports_fractional())
    return "fractional shifts: this engine's FP16 operands hold unit-root phases and two channels; the "
           "bilinear route (modified axis tables, covariance channels for the exact B of SPEC 2) runs "
           "in cuda-fourier and the gather engines";
  if (input.policy.top_k > kMaxTopK)
    return "top_k of " + std::to_string(input.policy.top_k) + " per origin: at most " +
           std::to_string(kMaxTopK) + " are kept";
  return engine_unsupported_reason(input);
}

namespace {

int round_up(int value, int multiple) { return (value + multiple - 1) / multiple * multiple; }

double elapsed_ms(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  SHIFTSTACK_CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
  return ms;
}

// Fractional shifts per axis value and exposure: floor(s) into `floors`, s - floor(s) into
// `fractions`; s exactly as MotionBank::shift_x/shift_y compute it.
void split_fractional(const std::vector<double>& axis, const MotionBank& bank, bool along_x,
                        std::vector<std::int32_t>& floors, std::vector<float>& fractions) {
  const int E = bank.exposures();
  floors.resize(axis.size() * E);
  fractions.resize(axis.size() * E);
  for (std::size_t i = 0; i < axis.size(); ++i)
    for (int e = 0; e < E; ++e) {
      const double shift = axis[i] * bank.dt(e) + (along_x ? bank.curve_at_x(e) : bank.curve_at_y(e));
      double whole = std::floor(shift);
      float f = float(shift - whole);
      // A fraction within half a float step of 1 (shifts a rounding error below a whole pixel,
      // e.g. 3.9999999999999996) is the next pixel: the reference's x + s rounds to it too, and
      // the kernels' weight 1 - f of the lower corner would be 0 while its sample still counted.
      if (f >= 1.0f) whole += 1, f = 0.0f;
      floors[i * E + e] = std::int32_t(whole);
      fractions[i * E + e] = f;
    }
}

void upload_roots(SpectralState& s) {
  const FourierGeometry& g = s.geometry;
  std::vector<float2> rx(g.nx), ry(g.ny);
  std::vector<__half2> rxh(g.nx);
  for (int j = 0; j < g.nx; ++j) {
    const auto r = unit_root(j, g.nx);
    rx[j] = make_float2(float(r.real()), float(r.imag()));
    rxh[j] = __floats2half2_rn(float(r.real()), float(r.imag()));
  }
  for (int j = 0; j < g.ny; ++j) {
    const auto r = unit_root(j, g.ny);
    ry[j] = make_float2(float(r.real()), float(r.imag()));
  }
  s.root_x.upload(rx, s.stream);
  s.root_y.upload(ry, s.stream);
  s.root_x_half.upload(rxh, s.stream);
}

}  // namespace

SearchResult SpectralEngine::search(const SearchInput& input) {
  const std::string reason = unsupported_reason(input);
  require(reason.empty(), "engine '" + name() + "' cannot compute this search: " + reason);
  SpectralState& s = *state_;
  const EncodedStack& stack = *input.stack;
  const MotionBank& bank = *input.bank;

  s.fractional = bank.mode == ShiftMode::fractional;
  s.exact_below = exact_below();
  require(!s.fractional || !stack.cov_right.empty(),
          "engine '" + name() + "': fractional shifts need the stack's covariance planes (SPEC 2): compute the "
          "likelihood with covariances");
  if (s.fractional) {
    std::vector<float> fx, fy;
    s.shifts.exposures = bank.exposures();
    split_fractional(bank.vx_axis, bank, true, s.shifts.x, fx);
    split_fractional(bank.vy_axis, bank, false, s.shifts.y, fy);
    s.frac_x.upload(fx, s.stream);
    s.frac_y.upload(fy, s.stream);
    s.frac_y_host = std::move(fy);
    s.geometry = fourier_geometry(stack.width, stack.height, s.shifts);
    // The second corner sits one pixel beyond floor(s): pad for it.
    s.geometry.max_sx += 1;
    s.geometry.max_sy += 1;
    s.geometry.nx = padded_fourier_size(stack.width, s.geometry.min_sx, s.geometry.max_sx);
    s.geometry.ny = padded_fourier_size(stack.height, s.geometry.min_sy, s.geometry.max_sy);
    s.geometry.nyh = s.geometry.ny / 2 + 1;
  } else {
    s.shifts = integer_shifts(bank);
    s.geometry = fourier_geometry(stack.width, stack.height, s.shifts);
  }
  const FourierGeometry& g = s.geometry;
  s.exposures = stack.exposures;
  s.exposures_padded = round_up(stack.exposures, 32);
  s.va = int(bank.vx_count());
  s.vb = int(bank.vy_count());
  s.nyh_padded = round_up(g.nyh, 16);
  s.region = input.region;
  s.policy = input.policy;
  s.z_thr = digest_threshold(input);
  const std::int64_t V = std::int64_t(s.va) * s.vb;

  upload_stack(s, stack);
  s.shift_x.upload(s.shifts.x, s.stream);
  s.shift_y.upload(s.shifts.y, s.stream);
  {
    std::vector<std::int32_t> order(s.exposures);
    for (int e = 0; e < s.exposures; ++e) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return std::abs(bank.dt(a)) < std::abs(bank.dt(b));
    });
    s.probe_order.upload(order, s.stream);
  }
  upload_roots(s);

  // Device memory: the forward spectra stay for the whole scan; velocity rows are processed in
  // chunks whose spectra (and the engine's own per-row buffers) fit in what is left.
  s.spectra.resize(std::size_t(s.input_channels()) * s.exposures * g.nx * g.nyh);
  s.partials.resize(std::size_t(V) * s.score_strips());
  s.candidate_count.resize(1);
  s.recompute_count.resize(1);
  if (s.policy.collect_candidates) {
    const double all = double(s.region.count()) * double(V);
    s.candidates.resize(std::size_t(std::min<double>({double(s.policy.max_candidates), all, double(1 << 25)})));
  }
  if (s.policy.top_k > 0) s.top.resize(std::size_t(s.region.count()) * s.policy.top_k);
  const int granularity = row_granularity();
  {
    std::size_t free_bytes = 0, total_bytes = 0;
    SHIFTSTACK_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    free_bytes /= std::size_t(device_sharing());  // a card shared by a multi-device search's workers
    const double fixed = double(s.input_channels()) * s.exposures * g.nx * g.nyh * 8 + double(g.nx) * (s.nyh_padded + 16) * s.exposures_padded * 8;
    const double budget = std::min(0.6 * (double(free_bytes) - fixed), 24e9);
    const double per_row = double(s.velocity_values(1)) * 8 + bytes_per_row(s);
    int rows = int(std::floor(budget / per_row)) / granularity * granularity;
    require(rows >= granularity, "engine '" + name() + "': not enough device memory for one velocity row of the " +
                                     std::to_string(g.nx) + "x" + std::to_string(g.ny) + " padded transforms");
    s.chunk_rows = std::min(rows, round_up(s.vb, granularity));
    // Fewer rows per chunk on request, so that tests reach the path of many chunks (the lists
    // of one chunk merged into the last's) without a search too large for the card.
    if (const char* forced = std::getenv("SHIFTSTACK_FOURIER_CHUNK_ROWS"))
      s.chunk_rows = std::min(s.chunk_rows, round_up(std::max(1, std::atoi(forced)), granularity));
  }
  s.velocity_spectra.resize(s.velocity_values(s.chunk_rows));
  const int chunks = (s.vb + s.chunk_rows - 1) / s.chunk_rows;
  while (int(s.chunk_events.size()) < 3 * chunks) {
    cudaEvent_t e;
    SHIFTSTACK_CUDA_CHECK(cudaEventCreate(&e));
    s.chunk_events.push_back(e);
  }
  // Routes, window tables and plans before the clock starts (plans are made once per shape).
  choose_post_processing(s);
  s.row_route = false;
  if (row_route_window_limit() > 0 && plan_row_route(s, granularity, row_route_window_limit()))
    s.row_route = row_route_fits(s);
  if (!s.row_route) {  // the row route transforms in its own kernels
    s.forward_plan.make(g.nx, g.ny, s.input_channels() * s.exposures, FftShape::forward_planes, s.stream);
    for (int b = 0; b < s.vb; b += s.chunk_rows) inverse_plan(s, std::min(s.chunk_rows, s.vb - b));
  }

  // The scan; run again (rare) when more trials needed the exact gather than the list could hold.
  unsigned long long recomputed = 0;
  std::vector<Candidate> top_list;
  for (;;) {
    s.recompute.resize(s.recompute_capacity);
    SHIFTSTACK_CUDA_CHECK(cudaMemsetAsync(s.candidate_count.get(), 0, sizeof(unsigned long long), s.stream));
    SHIFTSTACK_CUDA_CHECK(cudaMemsetAsync(s.recompute_count.get(), 0, sizeof(unsigned long long), s.stream));
    SHIFTSTACK_CUDA_CHECK(cudaEventRecord(s.events[0], s.stream));
    find_extreme_probes(s);
    forward_transforms(s);
    SHIFTSTACK_CUDA_CHECK(cudaEventRecord(s.events[1], s.stream));
    prepare(s);
    SHIFTSTACK_CUDA_CHECK(cudaEventRecord(s.events[2], s.stream));
    int chunk = 0;
    for (int b = 0; b < s.vb; b += s.chunk_rows, ++chunk) {
      const int b_end = std::min(b + s.chunk_rows, s.vb);
      contract(s, b, b_end);
      SHIFTSTACK_CUDA_CHECK(cudaEventRecord(s.chunk_events[3 * chunk], s.stream));
      inverse_transforms(s, b_end - b);
      SHIFTSTACK_CUDA_CHECK(cudaEventRecord(s.chunk_events[3 * chunk + 1], s.stream));
      score_chunk(s, b, b_end, chunk == 0);
      SHIFTSTACK_CUDA_CHECK(cudaEventRecord(s.chunk_events[3 * chunk + 2], s.stream));
    }
    recompute_trials(s);
    SHIFTSTACK_CUDA_CHECK(cudaEventRecord(s.events[3], s.stream));
    if (s.policy.top_k > 0) {
      download_top_k(s);
      // The host's list (21 MB for a 256 x 256 CCD at k = 8) is allocated and first touched while
      // the device works.
      if (top_list.empty()) top_list.resize(s.top.size());
    }
    recomputed = s.recompute_count.download(s.stream)[0];  // synchronizes
    if (recomputed <= s.recompute_capacity) break;
    s.recompute_capacity = recomputed;
  }

  SpectralDiagnostics& d = diagnostics_;
  d = SpectralDiagnostics{};
  d.geometry = g;
  d.useful_flops = s.row_route ? 16.0 * s.nxh() * s.region.height * s.exposures * double(V)
                               : g.useful_flops(s.exposures, V);
  d.row_route = s.row_route;
  d.velocity_chunks = chunks;
  d.fused_scoring = s.fused_scoring;
  d.times.forward_ms = elapsed_ms(s.events[0], s.events[1]);
  d.times.tables_ms = elapsed_ms(s.events[1], s.events[2]);
  cudaEvent_t previous = s.events[2];
  for (int c = 0; c < chunks; ++c) {
    d.times.contraction_ms += elapsed_ms(previous, s.chunk_events[3 * c]);
    d.times.inverse_ms += elapsed_ms(s.chunk_events[3 * c], s.chunk_events[3 * c + 1]);
    d.times.scoring_ms += elapsed_ms(s.chunk_events[3 * c + 1], s.chunk_events[3 * c + 2]);
    previous = s.chunk_events[3 * c + 2];
  }
  d.times.scoring_ms += elapsed_ms(previous, s.events[3]);  // the exact gather of untrusted trials
  d.times.total_ms = elapsed_ms(s.events[0], s.events[3]);

  // Digest: partials merged in velocity order, strips in order within a velocity (deterministic).
  SearchResult result;
  result.digest.z_thr = s.z_thr;
  s.host_partials = s.partials.download(s.stream);
  for (const DigestPartial& p : s.host_partials) {
    d.clamped_trials += p.clamped;
    Digest part;
    part.z_thr = s.z_thr;
    part.sumA = p.sumA;
    part.sumB = p.sumB;
    part.scored = p.scored;
    part.count = p.count;
    if (p.argmax_velocity >= 0) {
      part.maxZ = p.maxZ;
      part.argmax_velocity = p.argmax_velocity;
      part.argmax_x = p.argmax_x;
      part.argmax_y = p.argmax_y;
    }
    result.digest.merge(part);
  }
  {
    const std::vector<unsigned int> bits = s.floor_bits.download(s.stream);
    d.b_floor = bits.empty() ? 0.0f : std::bit_cast<float>(bits[0]);
    if (bits.size() > 1 && s.exact_below > 0)
      d.b_trusted = std::max(d.b_floor, s.exact_below * float(s.exposures) * std::bit_cast<float>(bits[1]));
    else if (s.fractional)
      d.b_trusted = d.b_floor;
  }

  auto make_candidate = [&](int x, int y, int velocity, float A, float B, float Z) {
    Candidate c;
    c.x = x, c.y = y, c.velocity = velocity;
    if (velocity >= 0) {
      const Velocity vel = bank.velocity(std::size_t(velocity));
      c.vx = float(vel.vx), c.vy = float(vel.vy);
      c.flux = A / B;
    }
    c.A = A, c.B = B, c.Z = Z;
    return c;
  };
  // Trials gathered exactly: in (velocity, y, x) order, so the digest is the same run after run.
  std::vector<RecomputedTrial> exact(recomputed);
  if (recomputed)
    SHIFTSTACK_CUDA_CHECK(cudaMemcpy(exact.data(), s.recompute.get(), recomputed * sizeof(RecomputedTrial),
                                     cudaMemcpyDeviceToHost));
  std::sort(exact.begin(), exact.end(), [](const RecomputedTrial& a, const RecomputedTrial& b) {
    if (a.velocity != b.velocity) return a.velocity < b.velocity;
    if (a.y != b.y) return a.y < b.y;
    return a.x < b.x;
  });
  d.recomputed_trials = std::int64_t(recomputed);
  std::vector<int4> trials;
  for (const RecomputedTrial& t : exact) {
    if (!(t.B > 0)) continue;  // the reference scores only B > 0
    const float Z = t.A / std::sqrt(t.B);  // FP32, as the device scores (the same rounding)
    result.digest.add(t.A, t.B, Z, t.x, t.y, t.velocity);
    if (s.policy.collect_candidates && Z > s.policy.candidate_threshold) {
      require(result.candidates.size() < std::size_t(s.policy.max_candidates),
              "candidate list exceeds max_candidates (" + std::to_string(s.policy.max_candidates) +
                  "): raise the candidate threshold or the limit");
      result.candidates.push_back(make_candidate(t.x, t.y, t.velocity, t.A, t.B, Z));
      trials.push_back(make_int4(t.x, t.y, t.velocity, 0));
    }
  }
  if (s.policy.collect_candidates) {
    const unsigned long long found = s.candidate_count.download(s.stream)[0];
    require(found <= (unsigned long long)s.policy.max_candidates,
            "candidate list of " + std::to_string(found) + " trials exceeds max_candidates (" +
                std::to_string(s.policy.max_candidates) + "): raise the candidate threshold or the limit");
    require(found <= s.candidates.size(), "candidate list of " + std::to_string(found) +
                                              " trials exceeds this engine's device buffer of " +
                                              std::to_string(s.candidates.size()) + ": raise the threshold");
    std::vector<DeviceCandidate> list(found);
    if (found)
      SHIFTSTACK_CUDA_CHECK(cudaMemcpy(list.data(), s.candidates.get(), found * sizeof(DeviceCandidate),
                                       cudaMemcpyDeviceToHost));
    for (const auto& c : list) {
      result.candidates.push_back(make_candidate(c.x, c.y, c.velocity, c.A, c.B, c.Z));
      trials.push_back(make_int4(c.x, c.y, c.velocity, 0));
    }
  }
  if (s.policy.top_k > 0) {
    const TopEntry* top = s.host_top.get();
    const int* counts = s.host_top_counts.get();
    const std::size_t entries = s.top.size();
    const int k = s.policy.top_k;
    // Independent entries (half a million for a 256 x 256 CCD at k = 8): the host's threads.
#pragma omp parallel for schedule(static) if (entries > 65536)
    for (std::size_t i = 0; i < entries; ++i) {
      const std::size_t origin = i / k;
      const int x = s.region.x0 + int(origin % s.region.width), y = s.region.y0 + int(origin / s.region.width);
      const TopEntry& t = top[i];
      top_list[i] = t.velocity < 0
                        ? Candidate{x, y, -1, 0, 0, 0, 0, -std::numeric_limits<float>::infinity(), 0, 0}
                        : make_candidate(x, y, t.velocity, t.A, t.B, t.Z);
      top_list[i].obs_count = counts[i];
    }
    result.top_k = std::move(top_list);
  }
  if (!trials.empty()) {
    const std::vector<int> counts = observation_counts(s, trials);
    for (std::size_t n = 0; n < result.candidates.size(); ++n) result.candidates[n].obs_count = counts[n];
  }
  std::sort(result.candidates.begin(), result.candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.velocity != b.velocity) return a.velocity < b.velocity;
    if (a.y != b.y) return a.y < b.y;
    return a.x < b.x;
  });
  result.seconds = d.times.total_ms * 1e-3;
  return result;
}

}  // namespace shiftstack::cuda
