#include "config/problem.h"

#include <gtest/gtest.h>

#include <limits>

namespace ktune {
namespace {

Problem gemm(std::int64_t m, std::int64_t n, std::int64_t k) {
  return Problem{"gemm", "bf16", "bf16", "rr", {{"M", m}, {"N", n}, {"K", k}}};
}

TEST(ProblemTest, KeyRoundTrips) {
  const Problem p = gemm(4096, 14336, 4096);
  EXPECT_EQ(p.key(), "gemm|bf16|bf16|rr|M=4096,N=14336,K=4096");
  auto back = parse_problem_key(p.key());
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, p);
}

// The key's text, written into one buffer, is what concatenating its parts gives, for any dims.
TEST(ProblemTest, KeyTextForAnyDims) {
  const Problem one{"reduce_sum", "fp32", "fp32", "", {{"n", 7}}};
  EXPECT_EQ(one.key(), "reduce_sum|fp32|fp32||n=7");
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  const std::int64_t small = std::numeric_limits<std::int64_t>::min();
  const Problem odd{"gemm", "fp16", "fp32", "rc", {{"M", big}, {"N", small}, {"K", 0}}};
  EXPECT_EQ(odd.key(),
            "gemm|fp16|fp32|rc|M=" + std::to_string(big) + ",N=" + std::to_string(small) + ",K=0");
  EXPECT_EQ(Problem{}.key(), "||||");
}

TEST(ProblemTest, RejectsAbsurdDims) {
  EXPECT_FALSE(validate_problem(gemm(0, 1, 1)));
  EXPECT_FALSE(validate_problem(gemm(-5, 1, 1)));
  EXPECT_FALSE(validate_problem(gemm(std::int64_t(1) << 31, 1, 1)));
  // Each dim in range, but the product overflows any element count.
  auto r = validate_problem(gemm(1 << 20, 1 << 20, 1 << 20));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("2^48"), std::string::npos);
  EXPECT_TRUE(validate_problem(gemm(1, 1, 1)));
}

TEST(ProblemTest, RejectsUnknownDtype) {
  Problem p = gemm(8, 8, 8);
  p.dtype = "int4";
  auto r = validate_problem(p);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "dtype: unknown 'int4' (bf16, fp16, fp32)");
}

TEST(ProblemTest, ParseDims) {
  auto d = parse_dims("M=16, N=4096,K=4096");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->size(), 3u);
  EXPECT_EQ((*d)[1], (std::pair<std::string, std::int64_t>{"N", 4096}));
  EXPECT_FALSE(parse_dims("M=16,M=3"));
  EXPECT_FALSE(parse_dims("M=abc"));
  EXPECT_FALSE(parse_dims("M"));
  auto huge = parse_dims("M=99999999999999999999999");
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().message, "dims M: 99999999999999999999999 is out of range (below 2^63)");
  auto none = parse_dims(" ");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message, "dims: none given (e.g. M=4096,N=4096,K=4096)");
}

TEST(ProblemTest, ParamsCanonicalOrder) {
  auto p = parse_params("B=2,A=1");
  ASSERT_TRUE(p);
  EXPECT_EQ(params_to_string(*p), "A=1,B=2");
}

TEST(ProblemTest, DeviceClassIdRoundTrips) {
  DeviceClass d{"NVIDIA H200", 90, 132, 140};
  EXPECT_EQ(d.id(), "nvidia-h200.sm90.132sm.140gib");
  auto back = parse_device_class_id(d.id());
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->cc, 90);
  EXPECT_EQ(back->sm_count, 132);
  EXPECT_EQ(back->id(), d.id());
  EXPECT_FALSE(parse_device_class_id("nvidia-h200"));
  EXPECT_FALSE(parse_device_class_id("x.smXX.1sm.1gib"));
}

TEST(ProblemTest, LimitsForArch) {
  EXPECT_EQ(DeviceLimits::for_arch("sm_80")->max_smem_per_block, 166912);
  EXPECT_EQ(DeviceLimits::for_arch("sm_90a")->cc, 90);
  EXPECT_FALSE(DeviceLimits::for_arch("sm_70"));
}

}  // namespace
}  // namespace ktune
