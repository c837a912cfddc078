// Tests that need a tool from outside the build (redis-server, zsh): they skip where it is
// missing on a developer's machine, and fail where KTUNE_REQUIRE_TEST_TOOLS is set (.ci/run
// sets it), so that a CI image losing a package cannot turn a whole suite green unrun. Only the
// GPU tests skip everywhere (ctest label gpu).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>

namespace ktune::testing {
// KTUNE_REQUIRE_TEST_TOOLS set, non-empty and not "0" (the shell tests read it the same way).
inline bool test_tools_required() {
  const char* v = std::getenv("KTUNE_REQUIRE_TEST_TOOLS");
  return v && *v && std::string_view(v) != "0";
}
}  // namespace ktune::testing

// In a test body or SetUp (it returns from the function, as GTEST_SKIP does).
#define KTUNE_REQUIRE_TOOL(present, what)                                           \
  if (!(present)) {                                                                 \
    if (::ktune::testing::test_tools_required())                                    \
      FAIL() << (what) << " is not installed, and KTUNE_REQUIRE_TEST_TOOLS is set"; \
    else                                                                            \
      GTEST_SKIP() << (what) << " is not installed (.ci/bootstrap installs it)";    \
  }                                                                                 \
  static_assert(true)
