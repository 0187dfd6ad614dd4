// cuda-tree's level tables, checked without a GPU: a host emulation of its three tree kernels
// (leaves from the cube, parents as shift-and-add, the streamed root), run over the tables exactly
// as the kernels read them, must give every trial the floats cpu-tree gives it, over one band or
// several. The GPU suite (tests/cuda/test_cuda_tree.cpp) checks the kernels themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "cuda/tree/tree_tables.hpp"
#include "shiftstack/tree.hpp"
#include "../test_support.hpp"
#include "tree/tree_plan.hpp"

using namespace shiftstack;
using namespace shiftstack::testing;
using namespace shiftstack::cuda::tree_gpu;

namespace {

struct Trial {
  int x, y, velocity;
  float A, B;
};

// The kernels' arithmetic on the host: a sample is decode()'s weighted value, 0 outside the
// image or where invalid; leaves add their exposures in plan order, parents child 0 + child 1,
// or, where the level below is fused, (g0 + g1) + (g2 + g3); the root a0 + a1 or (g0 + g1) +
// (g2 + g3). Returns the trials with B > 0 of the band whose first origin is (x0, y0).
void emulate_band(const tree::Plan& plan, const BandPlan& band, const EncodedStack& s, int x0, int y0,
                  std::vector<Trial>& out) {
  std::vector<float> buffer[2] = {std::vector<float>(band.buffer_floats[0], std::numeric_limits<float>::quiet_NaN()),
                                  std::vector<float>(band.buffer_floats[1], std::numeric_limits<float>::quiet_NaN())};
  auto sample = [&](int e, int x, int y) -> std::pair<float, float> {
    if (x < 0 || y < 0 || x >= s.width || y >= s.height) return {0.0f, 0.0f};
    const DecodedSample d = decode(s, e, std::size_t(y) * s.width + x);
    return d.valid ? std::make_pair(d.psi, d.phi) : std::make_pair(0.0f, 0.0f);
  };
  auto sum = [](int sources, const float* c, const std::int64_t* q) {
    return sources == 2 ? c[q[0]] + c[q[1]] : (c[q[0]] + c[q[1]]) + (c[q[2]] + c[q[3]]);
  };
  for (int l = plan.depth; l >= 1; --l) {
    const LevelPlan& L = band.level[l];
    if (L.buffer < 0) {
      EXPECT_TRUE(L.parents.empty() && L.leaves.empty()) << "level " << l << " is never formed";
      continue;
    }
    float* o = buffer[L.buffer].data();
    const float* c = buffer[1 - L.buffer].data();
    for (const LeafEntry& e : L.leaves)
      for (int r = 0; r < e.height; ++r)
        for (int i = 0; i < e.width; ++i) {
          const LeafSample& f = L.samples[e.first];
          auto [a, b] = sample(f.exposure, x0 + f.dx + i, y0 + f.dy + r);
          for (int k = 1; k < e.count; ++k) {
            const LeafSample& q = L.samples[e.first + k];
            const auto [pa, pb] = sample(q.exposure, x0 + q.dx + i, y0 + q.dy + r);
            a += pa;
            b += pb;
          }
          const std::int64_t at = e.out + kPixelFloats * (std::int64_t(r) * e.width + i);
          o[at] = a;
          o[at + 1] = b;
        }
    for (const ParentEntry& e : L.parents)
      for (int r = 0; r < e.height; ++r)
        for (int i = 0; i < e.width; ++i) {
          std::int64_t q[4], q1[4];
          for (int s = 0; s < L.sources; ++s) {
            q[s] = e.src[s] + std::int64_t(r) * e.stride[s] + kPixelFloats * i;
            q1[s] = q[s] + 1;
          }
          const std::int64_t at = e.out + kPixelFloats * (std::int64_t(r) * e.width + i);
          o[at] = sum(L.sources, c, q);
          o[at + 1] = sum(L.sources, c, q1);
        }
  }
  const float* maps = buffer[band.root_buffer].data();
  for (int v = 0; v < band.Va * band.Vb; ++v) {
    const int a = v % band.Va, b = v / band.Va;
    for (int r = 0; r < band.rows; ++r)
      for (int i = 0; i < band.width; ++i) {
        std::int64_t q[4];
        for (int s = 0; s < band.sources; ++s)
          q[s] = band.x_part[s * band.Va + a] + band.y_part[s * band.Vb + b] + std::int64_t(r) * band.stride[s] +
                 kPixelFloats * i;
        // Two sources: a0 + a1; four: (g0 + g1) + (g2 + g3), as the root kernel adds them.
        const float A = band.sources == 2 ? maps[q[0]] + maps[q[1]]
                                          : (maps[q[0]] + maps[q[1]]) + (maps[q[2]] + maps[q[3]]);
        const float B = band.sources == 2 ? maps[q[0] + 1] + maps[q[1] + 1]
                                          : (maps[q[0] + 1] + maps[q[1] + 1]) + (maps[q[2] + 1] + maps[q[3] + 1]);
        // A map pixel nothing wrote stays NaN and fails B > 0 and the comparison below.
        EXPECT_FALSE(std::isnan(A) || std::isnan(B)) << "unwritten map read at v " << v << " (" << i << "," << r << ")";
        if (B > 0) out.push_back({x0 + i, y0 + r, v, A, B});
      }
  }
}

std::vector<Trial> emulate(const tree::Plan& plan, const EncodedStack& s, int band_rows, bool fuse_root,
                           bool fuse_levels) {
  std::vector<Trial> out;
  for (int y0 = 0; y0 < s.height; y0 += band_rows) {
    const int rows = std::min(band_rows, s.height - y0);
    const BandPlan band =
        make_band_plan(plan, s.width, rows, fuse_root, fuse_levels ? LevelFusion::everywhere : LevelFusion::none);
    EXPECT_EQ(band.sources, fuse_root ? 4 : 2) << "both children of these roots are parents";
    emulate_band(plan, band, s, 0, y0, out);
  }
  std::sort(out.begin(), out.end(), [](const Trial& p, const Trial& q) {
    if (p.velocity != q.velocity) return p.velocity < q.velocity;
    if (p.y != q.y) return p.y < q.y;
    return p.x < q.x;
  });
  return out;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_cpu_tree_floats(const KitStack& kit, Encoding enc, const std::vector<int>& band_rows) {
  const EncodedStack stack = encode_kit(kit, enc);
  auto cpu = make_engine("cpu-tree-screen");
  OutputPolicy policy;
  policy.collect_candidates = true;
  policy.candidate_threshold = -std::numeric_limits<double>::infinity();  // every scored trial
  const SearchResult c = search(*cpu, stack, kit.bank, policy);
  ASSERT_TRUE(c.note.find("exhaustive") == std::string::npos) << c.note;
  const tree::Plan plan = tree::make_plan(kit.bank, {});
  for (int rows : band_rows)
    for (int fusion = 0; fusion < 4; ++fusion) {
    const bool fuse_root = fusion & 1, fuse_levels = fusion & 2;
    SCOPED_TRACE(to_string(enc) + ", bands of " + std::to_string(rows) + " rows" + (fuse_root ? ", root fused" : "") +
                 (fuse_levels ? ", levels fused" : ""));
    const std::vector<Trial> g = emulate(plan, stack, rows, fuse_root, fuse_levels);
    ASSERT_EQ(g.size(), c.candidates.size());
    std::size_t differing = 0;
    for (std::size_t k = 0; k < g.size(); ++k) {
      const Candidate& q = c.candidates[k];
      const bool same = g[k].x == q.x && g[k].y == q.y && g[k].velocity == q.velocity && same_bits(g[k].A, q.A) &&
                        same_bits(g[k].B, q.B);
      if (!same && differing++ < 5)
        ADD_FAILURE() << "trial " << k << ": tables (" << g[k].x << "," << g[k].y << ",v" << g[k].velocity << ") A "
                      << g[k].A << " B " << g[k].B << "; cpu-tree (" << q.x << "," << q.y << ",v" << q.velocity
                      << ") A " << q.A << " B " << q.B;
    }
    EXPECT_EQ(differing, 0u);
    }
}

}  // namespace

TEST(CudaTreeTables, EveryTrialIsCpuTreesFloatsOnCi) {
  for (Encoding enc : all_encodings()) expect_cpu_tree_floats(make_kit(workload("ci")), enc, {128, 40});
}

// An odd image, bands of uneven height, a cadence in nights (a deeper, unbalanced plan).
TEST(CudaTreeTables, EveryTrialIsCpuTreesFloatsOnAnUnevenNightsStack) {
  KitOptions o = workload("nights");
  o.width = 53;
  o.height = 29;
  o.exposures = 40;
  o.nights = 4;
  o.vx_count = 11;
  o.vy_count = 9;
  o.inject = false;
  expect_cpu_tree_floats(make_kit(o), Encoding::fp32, {29, 11});
}

// Exposures taken at the same epoch (pairs, as with two detectors) make leaves of several
// exposures: one velocity per axis over a zero span.
TEST(CudaTreeTables, LeavesOfSeveralExposures) {
  KitOptions o = workload("ci");
  o.width = 45;
  o.height = 31;
  o.inject = false;
  KitStack kit = make_kit(o);
  for (int e = 1; e < kit.bank.exposures(); e += 2) kit.bank.epochs[e] = kit.bank.epochs[e - 1];
  const tree::Plan plan = tree::make_plan(kit.bank, {});
  int multi = 0;
  for (const tree::Node& n : plan.nodes) multi += n.leaf() && n.count > 1;
  ASSERT_GT(multi, 0);
  expect_cpu_tree_floats(kit, Encoding::fp32, {31, 13});
}

TEST(CudaTreeTables, LevelsAlternateBuffersAndTheRootReadsLevelOne) {
  const KitStack kit = make_kit(workload("ci"));
  const tree::Plan plan = tree::make_plan(kit.bank, {});
  const BandPlan band = make_band_plan(plan, 128, 128);
  ASSERT_EQ(band.level.size(), std::size_t(plan.depth + 1));
  EXPECT_EQ(band.Va * band.Vb, int(kit.bank.size()));
  EXPECT_EQ(band.root_additions, std::int64_t(128) * 128 * 289);
  for (int l = 1; l <= plan.depth; ++l) {
    ASSERT_EQ(band.level[l].buffer, (plan.depth - l) % 2) << "every level formed, alternating from the deepest";
    EXPECT_LE(band.level[l].floats, band.buffer_floats[band.level[l].buffer]);
    for (const ParentEntry& e : band.level[l].parents) {
      // Every read lies inside the child level's maps.
      for (int c = 0; c < 2; ++c) {
        EXPECT_GE(e.src[c], 0);
        EXPECT_EQ(e.src[c] % kPixelFloats, 0) << "a pixel's pair is read as one aligned load";
        EXPECT_LE(e.src[c] + std::int64_t(e.height - 1) * e.stride[c] + kPixelFloats * std::int64_t(e.width),
                  std::int64_t(band.level[l + 1].floats));
      }
      EXPECT_EQ(e.out % kPixelFloats, 0);
      EXPECT_LE(e.out + kPixelFloats * std::int64_t(e.width) * e.height, std::int64_t(band.level[l].floats));
    }
  }
  EXPECT_GT(band.traffic_bytes(), 16.0 * double(band.root_additions));
  // The root's visiting order holds every velocity once.
  std::vector<int> order = band.root_order;
  ASSERT_EQ(order.size(), std::size_t(band.Va) * band.Vb);
  std::sort(order.begin(), order.end());
  for (std::size_t v = 0; v < order.size(); ++v) ASSERT_EQ(order[v], int(v));

  // Fused: level 1 is never formed, the root reads level 2 (its buffer) at four sources, each
  // read inside level 2's maps, and the root's additions are three per trial and channel.
  const BandPlan fused = make_band_plan(plan, 128, 128, true);
  ASSERT_EQ(fused.sources, 4);
  EXPECT_EQ(fused.root_buffer, fused.level[2].buffer);
  EXPECT_EQ(fused.level[1].buffer, -1);
  EXPECT_EQ(fused.level[1].floats, 0u);
  EXPECT_TRUE(fused.level[1].parents.empty() && fused.level[1].leaves.empty());
  EXPECT_EQ(fused.root_additions, 3 * band.root_additions);
  EXPECT_LE(fused.buffer_floats[1], band.buffer_floats[1]);
  for (int s = 0; s < 4; ++s)
    for (int a = 0; a < fused.Va; ++a)
      for (int b = 0; b < fused.Vb; ++b) {
        const std::int64_t first = fused.x_part[s * fused.Va + a] + fused.y_part[s * fused.Vb + b];
        EXPECT_GE(first, 0);
        EXPECT_EQ(first % kPixelFloats, 0);
        EXPECT_LE(first + std::int64_t(127) * fused.stride[s] + kPixelFloats * 128,
                  std::int64_t(fused.level[2].floats));
      }
}

// Fused levels: one level in two below the root's children is never formed; each level above one
// reads four grandchildren inside the formed level two below, the buffers still alternate, the
// largest buffer does not grow and the additions count three per pixel of such a level.
TEST(CudaTreeTables, FusedLevelsReadTwoLevelsDown) {
  const KitStack kit = make_kit(workload("ci"));
  const tree::Plan plan = tree::make_plan(kit.bank, {});
  const BandPlan plain = make_band_plan(plan, 128, 128, true);
  const BandPlan band = make_band_plan(plan, 128, 128, true, LevelFusion::everywhere);
  ASSERT_LT(band.formed_levels, plain.formed_levels);
  EXPECT_LE(std::max(band.buffer_floats[0], band.buffer_floats[1]),
            std::max(plain.buffer_floats[0], plain.buffer_floats[1]));
  std::size_t written = 0, written_plain = 0;  // the floats the levels store
  for (int l = 1; l <= plan.depth; ++l) {
    written += band.level[l].floats;
    written_plain += plain.level[l].floats;
  }
  EXPECT_LT(written, written_plain);
  int previous = -1;  // the buffer of the formed level below
  for (int l = plan.depth; l >= 1; --l) {
    const LevelPlan& L = band.level[l];
    if (L.buffer < 0) {
      if (l < plan.depth) {
        EXPECT_GE(band.level[l + 1].buffer, 0) << "never two levels in a row unformed";
      }
      continue;
    }
    if (previous >= 0) {
      EXPECT_NE(L.buffer, previous);
    }
    previous = L.buffer;
    const int source_level = L.sources == 4 ? l + 2 : l + 1;
    if (L.sources == 4) {
      ASSERT_EQ(band.level[l + 1].buffer, -1);
      EXPECT_EQ(L.additions, 3 * plain.level[l].additions);
    }
    for (const ParentEntry& e : L.parents)
      for (int s = 0; s < L.sources; ++s) {
        EXPECT_GE(e.src[s], 0);
        EXPECT_EQ(e.src[s] % kPixelFloats, 0);
        EXPECT_LE(e.src[s] + std::int64_t(e.height - 1) * e.stride[s] + kPixelFloats * std::int64_t(e.width),
                  std::int64_t(band.level[source_level].floats));
      }
  }
}

// The engine's choice skips a level only where it holds at least half the floats of the level
// above: on ci it skips what `everywhere` skips; on the nights cadence level 3 is a quarter of
// level 2 and stays formed (level 4, larger than level 3, is skipped instead).
TEST(CudaTreeTables, WorthwhileFusionSkipsOnlyLargeLevels) {
  for (const char* name : {"ci", "nights"}) {
    SCOPED_TRACE(name);
    KitOptions o = workload(name);
    o.width = 64, o.height = 64, o.inject = false;  // the plan depends on the bank alone
    const tree::Plan plan = tree::make_plan(make_kit(o).bank, {});
    const BandPlan every = make_band_plan(plan, 256, 256, true, LevelFusion::everywhere);
    const BandPlan worth = make_band_plan(plan, 256, 256, true, LevelFusion::worthwhile);
    const BandPlan none = make_band_plan(plan, 256, 256, true, LevelFusion::none);
    ASSERT_LT(every.formed_levels, none.formed_levels);
    ASSERT_LT(worth.formed_levels, none.formed_levels);
    for (int l = 2; l < plan.depth; ++l)
      if (worth.level[l + 1].buffer < 0) {
        EXPECT_GE(double(none.level[l + 1].floats), kFusionMinRatio * double(none.level[l].floats)) << "level " << l + 1;
      }
    if (std::string(name) == "ci") {
      for (int l = 1; l <= plan.depth; ++l) EXPECT_EQ(worth.level[l].buffer < 0, every.level[l].buffer < 0) << l;
    } else {
      EXPECT_LT(double(none.level[3].floats), kFusionMinRatio * double(none.level[2].floats));
      EXPECT_LT(every.level[3].buffer, 0);
      EXPECT_GE(worth.level[3].buffer, 0);
      EXPECT_LT(worth.level[4].buffer, 0);
    }
  }
}
