// Text and colour helpers of the report; the work model of the roofline.
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <ctime>

#include "config/log.h"
#include "report/draw.h"

namespace ktune::report {

std::string strf(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  if (n < 0) return "";
  if (size_t(n) < sizeof buf) return std::string(buf, size_t(n));
  std::string out(size_t(n) + 1, '\0');
  va_start(args, format);
  std::vsnprintf(out.data(), out.size(), format, args);
  va_end(args);
  out.resize(size_t(n));
  return out;
}

std::string num(double v) {
  if (!std::isfinite(v)) return "-";
  const double a = std::fabs(v);
  if (a == 0) return "0";
  if (a >= 100) return strf("%.0f", v);
  if (a >= 10) return strf("%.1f", v);
  if (a >= 1) return strf("%.2f", v);
  return strf("%.3g", v);
}

std::string escape_html(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string dims_text(const Problem& problem) {
  std::string s;
  for (const auto& [name, value] : problem.dims) {
    if (!s.empty()) s += ' ';
    s += name + "=" + std::to_string(value);
  }
  return s;
}

std::string params_text(const Params& params) {
  std::string s;
  for (const auto& [name, value] : params) {
    if (!s.empty()) s += ' ';
    s += name + "=" + std::to_string(value);
  }
  return s;
}

std::string utc_now() {
  return utc_iso8601(std::time(nullptr));
}

std::string utc_text(std::int64_t unix_seconds) {
  if (unix_seconds <= 0) return "";
  return utc_strftime(unix_seconds, "%Y-%m-%d %H:%M UTC");
}

std::string time_colour(double ratio) {
  // Viridis-like stops, fastest first (bright yellow) to 4x slower (dark violet).
  static constexpr double k_stops[][3] = {
      {253, 231, 37}, {94, 201, 98}, {33, 145, 140}, {59, 82, 139}, {68, 1, 84}};
  if (std::isnan(ratio)) ratio = 4;                  // no time to compare: the far end
  double t = std::log2(std::max(ratio, 1.0)) / 2.0;  // 0 at best, 1 at 4x
  t = std::clamp(t, 0.0, 1.0) * 4.0;
  const int i = std::min(int(t), 3);
  const double f = t - i;
  int rgb[3];
  for (int c = 0; c < 3; ++c)
    rgb[c] = int(std::lround(k_stops[i][c] + (k_stops[i + 1][c] - k_stops[i][c]) * f));
  return strf("#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

std::string series_colour(size_t index) {
  static constexpr const char* k_colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                              "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  return k_colours[index % std::size(k_colours)];
}

Work gemm_work(const Problem& p) {
  const double m = double(p.dim("M")), n = double(p.dim("N")), k = double(p.dim("K"));
  if (m <= 0 || n <= 0 || k <= 0) return {};
  const double in = std::max(dtype_bytes(p.dtype), 1);
  const double out = std::max(dtype_bytes(p.out_dtype.empty() ? p.dtype : p.out_dtype), 1);
  return Work{.flops = 2 * m * n * k, .bytes = in * (m * k + k * n) + out * m * n};
}

double flops_per_element(std::string_view op) {
  if (op == "softmax") return 5;    // max, subtract, exp, sum, divide
  if (op == "layernorm") return 8;  // mean, variance (2), normalise (2), scale, shift, ...
  if (op == "rmsnorm") return 4;    // square, sum, normalise, scale
  if (op == "reduce_sum") return 1;
  if (op == "transpose") return 0;
  return -1;
}

}  // namespace ktune::report
