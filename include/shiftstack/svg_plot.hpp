// Small self-contained SVG charts (points with error bars, lines, reference bands) for the
// validation reports: no plotting dependency, text output any browser shows.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace shiftstack::svg {

struct Series {
  std::string label;
  std::string color = "#1f77b4";
  std::vector<double> x, y;
  std::vector<double> y_low, y_high;  // error bars; empty = none
  bool line = true;                   // join the points
  bool markers = true;
  bool dashed = false;
  double x_offset = 0;                // shifts a series sideways on category axes so bars do not overlap
};

struct Band {  // horizontal shaded band, e.g. a tolerance around a target
  double low = 0, high = 0;
  std::string color = "#2ca02c";
  std::string label;
};

struct ReferenceLine {  // horizontal line, e.g. the target value or a pass bar
  double y = 0;
  std::string color = "#444444";
  std::string label;
  bool dashed = true;
};

struct Plot {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  std::vector<Band> bands;
  std::vector<ReferenceLine> lines;
  // When set, x values are indices 0..n-1 into these tick labels.
  std::vector<std::string> categories;
  bool log_y = false;
  std::optional<double> x_min, x_max, y_min, y_max;  // default: fitted to the data
  std::string footnote;                              // small text under the plot (card, commit, date)
  double width = 760, height = 460;
};

// The plot as an SVG document.
std::string render(const Plot& plot);
// Writes render(plot) to path; throws Error when the file cannot be written.
void write(const Plot& plot, const std::string& path);

// Tick positions covering [low, high] with a 1-2-5 step, about `target` of them.
std::vector<double> nice_ticks(double low, double high, int target = 6);

}  // namespace shiftstack::svg
