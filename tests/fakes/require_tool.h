// Tests that need a tool from outside the build (redis-server, zsh): they skip where it is
// missing on a developer's machine, and fail where KTUNE_REQUIRE_TEST_TOOLS is set (.ci/test
// sets it), so that a CI image losing a package cannot turn a whole suite green unrun. Only the
// GPU tests skip everywhere (ctest label gpu).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>

// In a test body or SetUp (it returns from the function, as GTEST_SKIP does).
#define KTUNE_REQUIRE_TOOL(present, what)                                           \
  if (!(present)) {                                                                 \
    if (std::getenv("KTUNE_REQUIRE_TEST_TOOLS"))                                    \
      FAIL() << (what) << " is not installed, and KTUNE_REQUIRE_TEST_TOOLS is set"; \
    else                                                                            \
      GTEST_SKIP() << (what) << " is not installed (.ci/bootstrap installs it)";    \
  }                                                                                 \
  static_assert(true)
