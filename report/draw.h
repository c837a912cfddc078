// Internal to report/: text formatting, colour scales and the plots, each a function from data
// to an SVG (or HTML) fragment. Every mark a test counts carries a class: heatmap cells
// `cell`, failure marks `fail`, convergence improvements `improve`, roofline points `point`,
// bandwidth bars `bw`, miss bars `miss`, job bars `job`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "report/report.h"

namespace ktune::report {

// printf into a std::string.
[[gnu::format(printf, 1, 2)]] std::string strf(const char* format, ...);
// A number for people: 3 significant digits, no exponent for everyday sizes.
std::string num(double value);
// "M=4096 N=4096 K=4096" / "BLOCK_M=128 BLOCK_N=256 ..."
std::string dims_text(const Problem& problem);
std::string params_text(const Params& params);
// Unix seconds as "2026-12-01 20:37 UTC"; "" for 0.
std::string utc_text(std::int64_t unix_seconds);

// Colour for a time `ratio` = time / best (1 = fastest): bright for fast, dark for slow,
// saturating at 4x.
std::string time_colour(double ratio);
// One colour per series (convergence curves, roofline ops).
std::string series_colour(size_t index);

// FLOPs and bytes a winner moves, by the model stated on the page (report.cc's roofline note).
struct Work {
  double flops = 0;
  double bytes = 0;
};
Work gemm_work(const Problem& problem);
// Per-element FLOPs of the memory-bound ops (0 for data movement only, -1 unknown op).
double flops_per_element(std::string_view op);

// Plots. Each returns a self-contained fragment.
std::string heatmap_html(const std::vector<const TrialSet*>& sets);
std::string convergence_svg(const std::vector<const TrialSet*>& sets, double table_best_us);
// Replayed strategies: fraction of the sweep's best speed against trials (log), one curve
// (class `replaycurve`) per strategy.
std::string replay_svg(const ReplayCurves& replay);

struct RooflinePoint {
  std::string label;  // "gemm M=8192 N=8192 K=8192"
  std::string op;
  double intensity = 0;  // FLOP/byte
  double tflops = 0;     // achieved
  double gbps = 0;       // achieved, memory-bound ops
  std::string where;     // provenance for the tooltip
  std::string device;    // the device class id it was measured on
};
std::string roofline_svg(const std::vector<RooflinePoint>& points, const Ceilings& ceilings);
std::string bandwidth_svg(const std::vector<RooflinePoint>& points, const Ceilings& ceilings);

}  // namespace ktune::report
