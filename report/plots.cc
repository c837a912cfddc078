// The line and point plots: convergence (best so far against trial index, one curve per
// search), the roofline of winners against the device's measured ceilings, and the achieved
// bandwidth of the memory-bound winners.
#include <algorithm>
#include <cmath>
#include <limits>

#include "report/draw.h"

namespace ktune::report {

namespace {

// A log10 axis mapped onto [a, b] pixels.
struct LogAxis {
  double lo, hi;  // data range, > 0
  double a, b;    // pixels
  double operator()(double v) const {
    const double t =
        (std::log10(std::max(v, lo)) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    if (std::isnan(t)) return a;  // a range that no log axis holds (lo <= 0): the axis' start
    return a + (b - a) * std::clamp(t, 0.0, 1.0);
  }
};

// A "nice" step (1, 2 or 5 x 10^k) that cuts `range` into about `parts` pieces.
double nice_step(double range, double parts) {
  const double raw = range / parts;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

// Ticks for a log axis: decades (with 2x and 5x within when there are few); when the range is
// under a decade, evenly spaced nice values, so a narrow axis still has labels.
std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> ticks;
  // Data that reached a log axis unchecked (0, NaN, inf) gets no ticks, not 2^31 of them.
  if (!(lo > 0 && hi > lo && std::isfinite(hi)) || std::log10(hi) - std::log10(lo) > 60)
    return ticks;
  const int d0 = int(std::floor(std::log10(lo))), d1 = int(std::ceil(std::log10(hi)));
  const bool fine = d1 - d0 <= 2;
  for (int d = d0; d <= d1; ++d)
    for (double m : {1.0, 2.0, 5.0}) {
      if (!fine && m != 1.0) continue;
      const double v = m * std::pow(10.0, d);
      if (v >= lo * 0.999 && v <= hi * 1.001) ticks.push_back(v);
    }
  if (ticks.size() >= 3) return ticks;
  ticks.clear();
  const double step = nice_step(hi - lo, 4);
  for (double v = std::ceil(lo / step) * step; v <= hi; v += step) ticks.push_back(v);
  return ticks;
}

// The roofline's points, each labelled: the labels stand in a column right of the plot at
// `label_x`, from `top` down in the points' vertical order (never above their point), each joined
// to its point by a leader, so a dense cluster stays readable. *bottom: the last label's baseline
// (the column can run past the plot).
std::string labelled_points(const std::vector<RooflinePoint>& points, const LogAxis& x,
                            const LogAxis& y, const Ceilings& c, int label_x, int top,
                            double* bottom) {
  std::string s;
  std::vector<size_t> order(points.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return points[a].tflops > points[b].tflops; });
  const double line = 13;
  double next_y = double(top) + 8;
  for (size_t rank = 0; rank < order.size(); ++rank) {
    const RooflinePoint& p = points[order[rank]];
    const double px = x(p.intensity), py = y(p.tflops);
    const double ly = std::max(next_y, py);
    next_y = ly + line;
    const double bound = std::min(c.tensor_tflops, p.intensity * c.copy_tbps);
    const std::string colour = series_colour(std::hash<std::string>{}(p.op) % 8);
    const std::string text = p.label + " \u2014 " + num(p.tflops) + " TFLOP/s" +
                             (p.gbps > 0 ? ", " + num(p.gbps) + " GB/s" : "") +
                             strf(" (%.0f%% of roof)", 100 * p.tflops / bound);
    s += strf("<line class=\"leader\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>", px, py,
              label_x - 3, ly - 4);
    s += strf("<circle class=\"point\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>", px, py,
              colour.c_str()) +
         escape_html(text + "\n" + p.where) + "</title></circle>";
    s += strf("<text class=\"plabel\" x=\"%d\" y=\"%.1f\" fill=\"%s\">", label_x, ly,
              colour.c_str()) +
         escape_html(text) + "</text>";
    *bottom = ly;
  }
  return s;
}

// A trial with a time a log axis can hold: a zero (a file's, a hand-built set's) is left out.
bool plottable(const Trial& t) {
  return t.outcome == Outcome::ok && t.median_us > 0;
}

}  // namespace

std::string convergence_svg(const std::vector<const TrialSet*>& sets, double table_best_us) {
  double best = std::numeric_limits<double>::infinity(), first = 0;
  size_t max_index = 1;
  for (const TrialSet* set : sets) {
    bool seen = false;
    for (const Trial& t : set->trials) {
      if (!plottable(t)) continue;
      best = std::min(best, t.median_us);
      if (!seen) first = std::max(first, t.median_us), seen = true;
    }
    max_index = std::max(max_index, set->trials.size());
  }
  if (!std::isfinite(best)) return "<p class=\"note\">no successful trial to plot</p>";
  if (table_best_us > 0) best = std::min(best, table_best_us);
  // The key (one line per search) stands under the plot.
  const int w = 560, left = 58, right = 12, top = 12, bottom = 40, plot_h = 240;
  const int h = plot_h + 13 * int(sets.size()) + 4;
  const LogAxis y{best * 0.95, std::max({first, table_best_us, best * 1.15}) * 1.05,
                  double(plot_h - bottom), double(top)};
  auto x = [&](double i) {
    return left + (w - left - right) * (i - 1) / std::max<double>(double(max_index) - 1, 1);
  };
  std::string s = strf(
      "<svg class=\"convergence\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "role=\"img\">",
      w, h, w, h);
  for (double v : log_ticks(y.lo, y.hi))
    s += strf(
        "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>"
        "<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>",
        left, w - right, y(v), y(v), left - 4, y(v) + 4, num(v).c_str());
  const size_t step = std::max<size_t>(1, size_t(nice_step(double(max_index), 5)));
  for (size_t i = step; i <= max_index; i += step)
    s += strf("<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%zu</text>",
              x(double(i)), plot_h - bottom + 14, i);
  s += strf("<text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">trial</text>",
            left + (w - left - right) / 2, plot_h - 8);
  s += strf(
      "<text class=\"axis\" x=\"12\" y=\"%d\" transform=\"rotate(-90 12 %d)\" "
      "text-anchor=\"middle\">best so far (us)</text>",
      (plot_h - bottom) / 2, (plot_h - bottom) / 2);
  if (table_best_us > 0)
    s += strf(
        "<line class=\"winner\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"><title>the table's "
        "winner: %s us</title></line><text class=\"tick\" x=\"%d\" y=\"%.1f\" "
        "text-anchor=\"end\">table winner %s us</text>",
        left, w - right, y(table_best_us), y(table_best_us), num(table_best_us).c_str(), w - right,
        y(table_best_us) - 3, num(table_best_us).c_str());
  for (size_t k = 0; k < sets.size(); ++k) {
    const TrialSet& set = *sets[k];
    const std::string colour = series_colour(k);
    std::string path, marks;
    double so_far = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < set.trials.size(); ++i) {
      const Trial& t = set.trials[i];
      if (!plottable(t) || t.median_us >= so_far) continue;
      const double px = x(double(i + 1)), py = y(t.median_us);
      path += path.empty() ? strf("M%.1f %.1f", px, py) : strf("H%.1fV%.1f", px, py);
      so_far = t.median_us;
      marks += strf(
          "<circle class=\"improve\" cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"><title>"
          "trial %zu: %s us\n%s %s</title></circle>",
          px, py, colour.c_str(), i + 1, num(t.median_us).c_str(),
          escape_html(t.template_name).c_str(), escape_html(params_text(t.params)).c_str());
    }
    if (!path.empty()) path += strf("H%.1f", x(double(set.trials.size())));
    s += "<path class=\"curve\" d=\"" + path + "\" stroke=\"" + colour + "\"/>" + marks;
    const std::string label = (set.strategy.empty() ? "?" : set.strategy) + " (" + set.source + ")";
    s += strf("<text class=\"key\" x=\"%d\" y=\"%d\" fill=\"%s\">&#9644; %s</text>", left,
              plot_h + 4 + int(k) * 13, colour.c_str(), escape_html(label).c_str());
  }
  s += "</svg>";
  return s;
}

std::string replay_svg(const ReplayCurves& r) {
  double lo = 1, max_trials = 2;
  for (const auto& c : r.curves)
    for (const auto& [t, f] : c.points) lo = std::min(lo, f), max_trials = std::max(max_trials, t);
  lo = std::max(0.0, std::floor((lo - 0.02) * 20) / 20);  // a multiple of 0.05 below the data
  const int w = 560, left = 58, right = 12, top = 12, bottom = 40, plot_h = 220;
  const int h = plot_h + 13 * int(r.curves.size()) + 4;
  const LogAxis x{1, max_trials, double(left), double(w - right)};
  auto y = [&](double f) { return top + (plot_h - bottom - top) * (1 - (f - lo) / (1 - lo)); };
  std::string s =
      strf("<svg class=\"replay\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">",
           w, h, w, h);
  for (double v : log_ticks(1, max_trials))
    s += strf("<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>", x(v),
              plot_h - bottom + 14, num(v).c_str());
  const double step = nice_step(1 - lo, 4);
  for (double f = std::ceil(lo / step) * step; f <= 1.0001; f += step)
    s += strf(
        "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>"
        "<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.2f</text>",
        left, w - right, y(f), y(f), left - 4, y(f) + 4, f);
  s += strf(
      "<line class=\"winner\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>"
      "<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">98%% of the best</text>",
      left, w - right, y(0.98), y(0.98), w - right, y(0.98) + 12);
  s += strf("<text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">trials (log)</text>",
            left + (w - left - right) / 2, plot_h - 8);
  s += strf(
      "<text class=\"axis\" x=\"12\" y=\"%d\" transform=\"rotate(-90 12 %d)\" "
      "text-anchor=\"middle\">best found / best</text>",
      (plot_h - bottom) / 2, (plot_h - bottom) / 2);
  for (size_t k = 0; k < r.curves.size(); ++k) {
    const auto& c = r.curves[k];
    const std::string colour = series_colour(k);
    std::string path;
    for (const auto& [t, f] : c.points)
      path += strf("%s%.1f %.1f", path.empty() ? "M" : "L", x(t), y(f));
    s += "<path class=\"replaycurve\" d=\"" + path + "\" stroke=\"" + colour + "\"><title>" +
         escape_html(c.strategy) + "</title></path>";
    s += strf("<text class=\"key\" x=\"%d\" y=\"%d\" fill=\"%s\">&#9644; ", left,
              plot_h + 4 + int(k) * 13, colour.c_str()) +
         escape_html(c.strategy + ": 98% of the best after " + num(c.trials_to_98pct) +
                     " trials (median)") +
         "</text>";
  }
  return s + "</svg>";
}

std::string roofline_svg(const std::vector<RooflinePoint>& all, const Ceilings& c) {
  std::vector<RooflinePoint> points;
  for (const auto& p : all)
    if (p.intensity > 0 && p.tflops > 0) points.push_back(p);
  // The plot is 420 px high; the svg grows when the labels column is longer.
  const int plot_w = 520, label_w = 480, h = 420, left = 60, top = 14, bottom = 44;
  const int w = left + plot_w + label_w;
  double x_lo = 0.1, x_hi = 10000, y_lo = 0.1, y_hi = 2000;
  for (const auto& p : points) {
    x_lo = std::min(x_lo, p.intensity / 2);
    x_hi = std::max(x_hi, p.intensity * 2);
    y_lo = std::min(y_lo, p.tflops / 2);
  }
  const LogAxis x{x_lo, x_hi, double(left), double(left + plot_w)};
  const LogAxis y{y_lo, y_hi, double(h - bottom), double(top)};
  std::string s;  // the drawing; the svg element, sized to it, goes in front at the end
  for (double v : log_ticks(x_lo, x_hi))
    s += strf(
        "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>"
        "<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>",
        x(v), x(v), top, h - bottom, x(v), h - bottom + 14, num(v).c_str());
  for (double v : log_ticks(y_lo, y_hi))
    s += strf(
        "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>"
        "<text class=\"tick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>",
        left, left + plot_w, y(v), y(v), left - 4, y(v) + 4, num(v).c_str());
  s += strf(
      "<text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">arithmetic intensity "
      "(FLOP/byte)</text>",
      left + plot_w / 2, h - 8);
  s += strf(
      "<text class=\"axis\" x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" "
      "text-anchor=\"middle\">achieved TFLOP/s</text>",
      (h - bottom) / 2, (h - bottom) / 2);
  // Roofs: bandwidth slope up to the ridge, then flat at the tensor peak.
  const double bw_tflops_per_intensity = c.copy_tbps;  // TB/s x FLOP/B = TFLOP/s
  const double ridge = c.tensor_tflops / bw_tflops_per_intensity;
  s += strf("<polyline class=\"roof\" points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\"/>", x(x_lo),
            y(x_lo * bw_tflops_per_intensity), x(ridge), y(c.tensor_tflops), x(x_hi),
            y(c.tensor_tflops));
  s += strf(
      "<text class=\"roofkey\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">tensor peak %s "
      "TFLOP/s</text>",
      x(x_hi) - 4, y(c.tensor_tflops) - 5, num(c.tensor_tflops).c_str());
  const double label_i = std::max(x_lo * 4, 0.5);
  s += strf(
      "<text class=\"roofkey\" x=\"%.1f\" y=\"%.1f\" transform=\"rotate(%.1f %.1f %.1f)\">copy "
      "%s TB/s</text>",
      x(label_i) + 4, y(label_i * bw_tflops_per_intensity) - 6,
      -std::atan2(y(label_i) - y(label_i * 10), x(label_i * 10) - x(label_i)) * 180 / M_PI,
      x(label_i) + 4, y(label_i * bw_tflops_per_intensity) - 6, num(c.copy_tbps).c_str());
  if (c.mma_sync_tflops > 0) {
    const double r2 = c.mma_sync_tflops / bw_tflops_per_intensity;
    s += strf(
        "<line class=\"roof2\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
        "<text class=\"roofkey\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">mma.sync ceiling "
        "%s</text>",
        x(r2), x(x_hi), y(c.mma_sync_tflops), y(c.mma_sync_tflops), x(x_hi) - 4,
        y(c.mma_sync_tflops) + 12, num(c.mma_sync_tflops).c_str());
  }
  double last_label = 0;
  s += labelled_points(points, x, y, c, left + plot_w + 36, top, &last_label);
  const int svg_h = std::max(h, int(std::ceil(last_label)) + 8);
  return strf(
             "<svg class=\"roofline\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
             "role=\"img\">",
             w, svg_h, w, svg_h) +
         s + "</svg>";
}

std::string bandwidth_svg(const std::vector<RooflinePoint>& all, const Ceilings& c) {
  std::vector<const RooflinePoint*> points;
  for (const auto& p : all)
    if (p.gbps > 0) points.push_back(&p);
  if (points.empty()) return "";
  const int left = 250, bar_w = 420, row = 18, top = 8;
  const int h = top + row * int(points.size()) + 30, w = left + bar_w + 120;
  const double full = std::max(c.copy_tbps * 1000, 1.0) * 1.1;
  std::string s = strf(
      "<svg class=\"bandwidth\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "role=\"img\">",
      w, h, w, h);
  for (size_t i = 0; i < points.size(); ++i) {
    const RooflinePoint& p = *points[i];
    const double bw = std::min(p.gbps, full);
    const int y = top + int(i) * row;
    s += strf("<text class=\"tick\" x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 6, y + 12) +
         escape_html(p.label) + "</text>";
    s += strf("<rect class=\"bw\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\"><title>", left,
              y + 2, bar_w * bw / full, row - 5) +
         escape_html(p.where) + "</title></rect>";
    s += strf("<text class=\"tick\" x=\"%.1f\" y=\"%d\">%s GB/s (%.0f%% of copy)</text>",
              left + bar_w * bw / full + 4, y + 12, num(p.gbps).c_str(),
              100 * p.gbps / (c.copy_tbps * 1000));
  }
  const double copy_x = left + bar_w * c.copy_tbps * 1000 / full;
  s += strf(
      "<line class=\"roof\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>"
      "<text class=\"roofkey\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">copy %s TB/s</text>",
      copy_x, copy_x, top, h - 22, copy_x, h - 8, num(c.copy_tbps).c_str());
  s += "</svg>";
  return s;
}

}  // namespace ktune::report
