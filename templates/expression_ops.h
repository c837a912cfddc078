// The operators and functions ktune adds to muparser's expression language, and the muparser
// built-ins the manifests use, with muparser's exact definitions. One definition serves the
// compiled evaluator (expression.cc) and the muparser reference it is tested against
// (tests/templates/muparser_reference.cc), so both compute them identically.
// Pure functions of doubles; thread-safe.
#pragma once

#include <algorithm>
#include <cmath>

namespace ktune::expr_ops {

// Whether `a` truncates to a long long (casting anything else is undefined behaviour): finite and
// in [-2^63, 2^63) (no double lies strictly between -2^63 - 1 and -2^63).
inline bool fits_long_long(double a) {
  return a >= -9223372036854775808.0 && a < 9223372036854775808.0;
}
// `a % b`: remainder of the operands truncated to integers; NaN when b truncates to 0 or an
// operand is not finite or lies outside the 64-bit integers (+-2^63). `a % -1` is 0.
inline double remainder(double a, double b) {
  if (!fits_long_long(a) || !fits_long_long(b)) return std::nan("");
  const auto ib = static_cast<long long>(b);
  if (ib == 0) return std::nan("");
  if (ib == -1) return 0;  // LLONG_MIN % -1 overflows (SIGFPE on x86)
  return double(static_cast<long long>(a) % ib);
}
// `!a`: 1 when a is 0, else 0 (NaN is true, so !NaN is 0).
inline double logical_not(double a) {
  return a == 0 ? 1 : 0;
}
inline double floor(double a) {
  return std::floor(a);
}
inline double ceil(double a) {
  return std::ceil(a);
}
// ceil(a / b); NaN when b is 0.
inline double ceil_div(double a, double b) {
  if (b == 0) return std::nan("");
  return std::ceil(a / b);
}
// 1 when a is a positive integral power of two, else 0; NaN when a is not finite. Exact for every
// double (no cast to an integer, which is undefined past 2^63).
inline double is_pow2(double a) {
  if (!std::isfinite(a)) return std::nan("");
  int exponent = 0;
  return (a >= 1 && std::frexp(a, &exponent) == 0.5) ? 1 : 0;
}

// muparser's built-ins (muParserTemplateMagic.h, 2.3.3), not the <cmath> functions of the same
// name: log2 is log(v) / log(2) and abs keeps -0 and NaN as they are.
inline double log2(double v) {
  return std::log(v) / std::log(2.0);
}
inline double abs(double v) {
  return (v >= 0) ? v : -v;
}
// min/max fold left from the first argument with std::min/std::max, so a NaN counts only when
// it comes first.
inline double min(const double* args, int n) {
  double r = args[0];
  for (int i = 0; i < n; ++i) r = std::min(r, args[i]);
  return r;
}
inline double max(const double* args, int n) {
  double r = args[0];
  for (int i = 0; i < n; ++i) r = std::max(r, args[i]);
  return r;
}

}  // namespace ktune::expr_ops
