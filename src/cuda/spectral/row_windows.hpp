// The row route's windows (cuda-tc, spectra.cuh): which rows of the FP16 spectra a CTA of
// `group_rows` consecutive rows b copies per exposure, and where each row b reads inside them.
// Host code, so that it is tested without a GPU (tests/cuda/test_full_spectrum.cpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace shiftstack::cuda {

struct RowWindows {
  std::vector<std::int32_t> start;   // [group][E_pad]: first row of the window past the tile's first (even)
  std::vector<std::int32_t> offset;  // [b < vb_padded][E_pad]: where row b's 16 rows begin in the window
  int rows = 0;                      // rows copied per exposure (even): 16 + the widest offset
  int pitch = 0;                     // rows between exposures in shared memory (4 mod 8: bank spread)
  int span = 0;                      // rows j per (mx, e) of the spectra: image row region_y0 + min_sy + j
};

// shift_y: [b][exposures] integer shifts; min_sy, max_sy their extent. Padded exposures and rows
// b past vb get offset 0 and start 0. A window holds the 16 rows of a CTA tile read by every row b
// of the group: row b, exposure e, tile row r reads window row offset[b][e] + r, which is image
// row region_y0 + tile_first + r + sy[b][e] once the window starts at
// tile_first + start[group][e] rows into the spectra.
inline RowWindows plan_row_windows(const std::vector<std::int32_t>& shift_y, int vb, int exposures,
                                   int exposures_padded, int group_rows, int min_sy, int max_sy, int region_height) {
  RowWindows w;
  const int vb_padded = (vb + group_rows - 1) / group_rows * group_rows, groups = vb_padded / group_rows;
  w.start.assign(std::size_t(groups) * exposures_padded, 0);
  w.offset.assign(std::size_t(vb_padded) * exposures_padded, 0);
  int widest = 0;
  for (int group = 0; group < groups; ++group) {
    const int b_first = group * group_rows, b_last = std::min(vb, b_first + group_rows);
    for (int e = 0; e < exposures; ++e) {
      int lowest = std::numeric_limits<int>::max();
      for (int b = b_first; b < b_last; ++b) lowest = std::min(lowest, shift_y[std::size_t(b) * exposures + e] - min_sy);
      const int first = lowest & ~1;  // 16-byte copies hold two rows
      w.start[std::size_t(group) * exposures_padded + e] = first;
      for (int b = b_first; b < b_last; ++b) {
        const int rel = shift_y[std::size_t(b) * exposures + e] - min_sy - first;
        w.offset[std::size_t(b) * exposures_padded + e] = rel;
        widest = std::max(widest, rel);
      }
    }
  }
  w.rows = (16 + widest + 1) / 2 * 2;
  w.pitch = w.rows;
  while (w.pitch % 8 != 4) w.pitch += 2;
  const int tiles = (region_height + 15) / 16;
  w.span = (tiles * 16 + (max_sy - min_sy) + w.rows + 1) / 2 * 2;
  return w;
}

}  // namespace shiftstack::cuda
