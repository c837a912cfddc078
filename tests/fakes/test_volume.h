// How much volume a test that needs it (scale checks, randomized comparisons) runs. Sanitizer
// builds run such tests ~30x slower, so there they run an eighth of it; the checks are the same,
// and the release suite runs the full volume the docs quote.
#pragma once

namespace ktune::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr int k_volume_divisor = 8;
#else
inline constexpr int k_volume_divisor = 1;
#endif

constexpr int volume(int n) {
  return n / k_volume_divisor;
}

}  // namespace ktune::testing
