#include "shiftstack/svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "shiftstack/error.hpp"

namespace shiftstack::svg {

namespace {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string number(double v, int digits = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

std::string coordinate(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// Tick label: as short as the step allows.
std::string tick_label(double v, double step) {
  if (std::abs(v) < 1e-12 * std::max(1.0, std::abs(step))) return "0";
  const int decimals = step >= 1 ? 0 : int(std::ceil(-std::log10(step) - 1e-9));
  char buf[64];
  if (std::abs(v) >= 1e5 || std::abs(v) < 1e-4)
    std::snprintf(buf, sizeof buf, "%.3g", v);
  else
    std::snprintf(buf, sizeof buf, "%.*f", std::min(decimals, 8), v);
  return buf;
}

struct Range {
  double low = std::numeric_limits<double>::infinity();
  double high = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    low = std::min(low, v);
    high = std::max(high, v);
  }
  bool empty() const { return !(low <= high); }
};

}  // namespace

std::vector<double> nice_ticks(double low, double high, int target) {
  std::vector<double> ticks;
  if (!(high > low) || target < 1) {
    ticks.push_back(low);
    return ticks;
  }
  const double raw = (high - low) / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  const double first = std::ceil(low / step - 1e-9) * step;
  for (double t = first; t <= high + 1e-9 * step; t += step) ticks.push_back(std::abs(t) < 1e-12 * step ? 0 : t);
  return ticks;
}

std::string render(const Plot& p) {
  // Legend entries, laid out in rows under the title (wrapping at the plot's width).
  struct Entry {
    std::string label, color;
    bool dashed, band;
    double x, y;
  };
  std::vector<Entry> entries;
  for (const auto& s : p.series)
    if (!s.label.empty()) entries.push_back({s.label, s.color, s.dashed, false, 0, 0});
  for (const auto& b : p.bands)
    if (!b.label.empty()) entries.push_back({b.label, b.color, false, true, 0, 0});
  {
    double lx = 78, ly = 41;
    for (auto& e : entries) {
      const double w = 36 + 6.2 * double(e.label.size());
      if (lx > 78 && lx + w > p.width - 10) lx = 78, ly += 16;
      e.x = lx, e.y = ly;
      lx += w;
    }
  }
  const double legend_rows = entries.empty() ? 1 : (entries.back().y - 41) / 16 + 1;

  // Layout: margins for the axis labels, the legend under the title.
  const double left = 78, right = 24, top = 42 + 16 * legend_rows, bottom = p.footnote.empty() ? 62 : 80;
  const double plot_w = p.width - left - right, plot_h = p.height - top - bottom;
  const bool categorical = !p.categories.empty();

  Range xr, yr;
  for (const auto& s : p.series) {
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      xr.add(s.x[i] + s.x_offset);
      if (i < s.y.size()) yr.add(s.y[i]);
      if (i < s.y_low.size()) yr.add(s.y_low[i]);
      if (i < s.y_high.size()) yr.add(s.y_high[i]);
    }
  }
  for (const auto& b : p.bands) yr.add(b.low), yr.add(b.high);
  for (const auto& l : p.lines) yr.add(l.y);
  if (categorical) {
    xr.low = -0.5;
    xr.high = double(p.categories.size()) - 0.5;
  }
  if (xr.empty()) xr.low = 0, xr.high = 1;
  if (yr.empty()) yr.low = 0, yr.high = 1;
  if (p.log_y) {
    yr.low = std::max(yr.low, 1e-300);
    if (!(yr.high > yr.low)) yr.high = yr.low * 10;
  }
  double x_lo = p.x_min.value_or(xr.low), x_hi = p.x_max.value_or(xr.high);
  double y_lo = p.y_min.value_or(yr.low), y_hi = p.y_max.value_or(yr.high);
  if (!(x_hi > x_lo)) x_lo -= 0.5, x_hi += 0.5;
  if (!(y_hi > y_lo)) {
    const double pad = std::max(1e-6, std::abs(y_lo) * 0.01);
    y_lo -= pad, y_hi += pad;
  }
  if (!p.log_y && !p.y_min && !p.y_max) {
    const double pad = 0.06 * (y_hi - y_lo);
    y_lo -= pad, y_hi += pad;
  }
  if (!categorical && !p.x_min && !p.x_max) {
    const double pad = 0.04 * (x_hi - x_lo);
    x_lo -= pad, x_hi += pad;
  }
  if (p.log_y) {
    y_lo = std::pow(10.0, std::floor(std::log10(y_lo)));
    y_hi = std::pow(10.0, std::ceil(std::log10(y_hi)));
    if (!(y_hi > y_lo)) y_hi = y_lo * 10;
  }

  auto px = [&](double x) { return left + (x - x_lo) / (x_hi - x_lo) * plot_w; };
  auto py = [&](double y) {
    const double t = p.log_y ? (std::log10(std::max(y, 1e-300)) - std::log10(y_lo)) /
                                   (std::log10(y_hi) - std::log10(y_lo))
                             : (y - y_lo) / (y_hi - y_lo);
    return top + (1 - t) * plot_h;
  };
  auto clamp_y = [&](double y) { return std::clamp(py(y), top, top + plot_h); };

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << p.width << "\" height=\"" << p.height
    << "\" viewBox=\"0 0 " << p.width << ' ' << p.height
    << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << p.width / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">"
    << escape(p.title) << "</text>\n";
  o << "<defs><clipPath id=\"area\"><rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << plot_w
    << "\" height=\"" << plot_h << "\"/></clipPath></defs>\n";

  // Bands and grid first, so the data draws on top.
  for (const auto& b : p.bands) {
    const double y0 = clamp_y(b.high), y1 = clamp_y(b.low);
    o << "<rect x=\"" << coordinate(left) << "\" y=\"" << coordinate(y0) << "\" width=\"" << coordinate(plot_w)
      << "\" height=\"" << coordinate(std::max(0.0, y1 - y0)) << "\" fill=\"" << b.color
      << "\" fill-opacity=\"0.15\"/>\n";
  }
  std::vector<double> y_ticks;
  if (p.log_y) {
    for (double t = y_lo; t <= y_hi * 1.0001; t *= 10) y_ticks.push_back(t);
  } else {
    y_ticks = nice_ticks(y_lo, y_hi, 6);
  }
  const double y_step = y_ticks.size() > 1 ? y_ticks[1] - y_ticks[0] : 1;
  for (double t : y_ticks) {
    const double y = py(t);
    if (y < top - 0.5 || y > top + plot_h + 0.5) continue;
    o << "<line x1=\"" << coordinate(left) << "\" x2=\"" << coordinate(left + plot_w) << "\" y1=\""
      << coordinate(y) << "\" y2=\"" << coordinate(y) << "\" stroke=\"#e3e3e3\"/>\n";
    o << "<text x=\"" << coordinate(left - 6) << "\" y=\"" << coordinate(y + 4)
      << "\" text-anchor=\"end\">" << escape(p.log_y ? number(t, 7) : tick_label(t, y_step)) << "</text>\n";
  }
  if (categorical) {
    for (std::size_t i = 0; i < p.categories.size(); ++i) {
      const double x = px(double(i));
      o << "<text x=\"" << coordinate(x) << "\" y=\"" << coordinate(top + plot_h + 18)
        << "\" text-anchor=\"middle\">" << escape(p.categories[i]) << "</text>\n";
    }
  } else {
    const auto x_ticks = nice_ticks(x_lo, x_hi, 7);
    const double x_step = x_ticks.size() > 1 ? x_ticks[1] - x_ticks[0] : 1;
    for (double t : x_ticks) {
      const double x = px(t);
      o << "<line x1=\"" << coordinate(x) << "\" x2=\"" << coordinate(x) << "\" y1=\"" << coordinate(top)
        << "\" y2=\"" << coordinate(top + plot_h) << "\" stroke=\"#f0f0f0\"/>\n";
      o << "<text x=\"" << coordinate(x) << "\" y=\"" << coordinate(top + plot_h + 18)
        << "\" text-anchor=\"middle\">" << escape(tick_label(t, x_step)) << "</text>\n";
    }
  }
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << plot_w << "\" height=\"" << plot_h
    << "\" fill=\"none\" stroke=\"#333\"/>\n";
  for (const auto& l : p.lines) {
    const double y = py(l.y);
    if (y < top || y > top + plot_h) continue;
    o << "<line x1=\"" << coordinate(left) << "\" x2=\"" << coordinate(left + plot_w) << "\" y1=\""
      << coordinate(y) << "\" y2=\"" << coordinate(y) << "\" stroke=\"" << l.color << "\""
      << (l.dashed ? " stroke-dasharray=\"6 4\"" : "") << "/>\n";
    if (!l.label.empty())
      o << "<text x=\"" << coordinate(left + plot_w - 4) << "\" y=\"" << coordinate(y - 4)
        << "\" text-anchor=\"end\" fill=\"" << l.color << "\" font-size=\"11\">" << escape(l.label) << "</text>\n";
  }

  // Data, clipped to the plot area.
  o << "<g clip-path=\"url(#area)\">\n";
  for (const auto& s : p.series) {
    const std::size_t n = std::min(s.x.size(), s.y.size());
    if (s.line && n > 1) {
      o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"1.8\""
        << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << " points=\"";
      for (std::size_t i = 0; i < n; ++i)
        if (std::isfinite(s.y[i])) o << coordinate(px(s.x[i] + s.x_offset)) << ',' << coordinate(py(s.y[i])) << ' ';
      o << "\"/>\n";
    }
    for (std::size_t i = 0; i < n; ++i) {
      const double x = px(s.x[i] + s.x_offset);
      if (i < s.y_low.size() && i < s.y_high.size() && std::isfinite(s.y_low[i]) && std::isfinite(s.y_high[i])) {
        const double y0 = py(s.y_low[i]), y1 = py(s.y_high[i]);
        o << "<line x1=\"" << coordinate(x) << "\" x2=\"" << coordinate(x) << "\" y1=\"" << coordinate(y0)
          << "\" y2=\"" << coordinate(y1) << "\" stroke=\"" << s.color << "\" stroke-width=\"1.5\"/>\n";
        for (double y : {y0, y1})
          o << "<line x1=\"" << coordinate(x - 5) << "\" x2=\"" << coordinate(x + 5) << "\" y1=\""
            << coordinate(y) << "\" y2=\"" << coordinate(y) << "\" stroke=\"" << s.color
            << "\" stroke-width=\"1.5\"/>\n";
      }
      if (s.markers && std::isfinite(s.y[i]))
        o << "<circle cx=\"" << coordinate(x) << "\" cy=\"" << coordinate(py(s.y[i])) << "\" r=\"3.5\" fill=\""
          << s.color << "\"><title>" << escape(s.label) << ": " << number(s.y[i], 7) << "</title></circle>\n";
    }
  }
  o << "</g>\n";

  for (const auto& e : entries) {
    if (e.band)
      o << "<rect x=\"" << coordinate(e.x) << "\" y=\"" << coordinate(e.y - 5)
        << "\" width=\"18\" height=\"10\" fill=\"" << e.color << "\" fill-opacity=\"0.3\"/>\n";
    else
      o << "<line x1=\"" << coordinate(e.x) << "\" x2=\"" << coordinate(e.x + 18) << "\" y1=\"" << coordinate(e.y)
        << "\" y2=\"" << coordinate(e.y) << "\" stroke=\"" << e.color << "\" stroke-width=\"2.5\""
        << (e.dashed ? " stroke-dasharray=\"4 3\"" : "") << "/>\n";
    o << "<text x=\"" << coordinate(e.x + 23) << "\" y=\"" << coordinate(e.y + 4) << "\" font-size=\"11\">"
      << escape(e.label) << "</text>\n";
  }

  o << "<text x=\"" << coordinate(left + plot_w / 2) << "\" y=\"" << coordinate(top + plot_h + 38)
    << "\" text-anchor=\"middle\">" << escape(p.x_label) << "</text>\n";
  o << "<text transform=\"translate(18," << coordinate(top + plot_h / 2)
    << ") rotate(-90)\" text-anchor=\"middle\">" << escape(p.y_label) << "</text>\n";
  if (!p.footnote.empty())
    o << "<text x=\"" << coordinate(left) << "\" y=\"" << coordinate(p.height - 10)
      << "\" font-size=\"10\" fill=\"#666\">" << escape(p.footnote) << "</text>\n";
  o << "</svg>\n";
  return o.str();
}

void write(const Plot& plot, const std::string& path) {
  std::ofstream out(path);
  require(bool(out), "cannot write plot '" + path + "'");
  out << render(plot);
  require(bool(out), "error while writing plot '" + path + "'");
}

}  // namespace shiftstack::svg
