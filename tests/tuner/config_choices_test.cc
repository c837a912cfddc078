// The keys of config/ that name a value of a component above it (a strategy, a GPU policy, an L2
// timing) accept exactly the names that component parses: config cannot call those parsers, so
// its lists are held equal to theirs here.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "config/config.h"
#include "store/records.h"
#include "tuner/gpu_policy.h"
#include "tuner/strategy/registry.h"

namespace ktune {
namespace {

std::set<std::string> choices_of(std::string_view key) {
  for (const ConfigKey& k : config_keys())
    if (k.name == key) return {k.choices.begin(), k.choices.end()};
  ADD_FAILURE() << "no config key " << key;
  return {};
}

TEST(ConfigChoicesTest, StrategiesAreTheRegistrys) {
  const auto names = strategy_names();
  EXPECT_EQ(choices_of("tuning.strategy"), std::set<std::string>(names.begin(), names.end()));
}

TEST(ConfigChoicesTest, GpuPoliciesAreThePolicysModes) {
  std::set<std::string> modes;
  for (auto m : {GpuPolicyMode::idle, GpuPolicyMode::always, GpuPolicyMode::never})
    modes.emplace(to_string(m));
  EXPECT_EQ(choices_of("tuning.gpu_policy"), modes);
  for (const std::string& c : modes) EXPECT_TRUE(parse_gpu_policy_mode(c)) << c;
}

TEST(ConfigChoicesTest, L2TimingsAreTheStoresKnownOnes) {
  std::set<std::string> timings;
  for (auto t : {TimingL2::flushed, TimingL2::rotated}) timings.emplace(to_string(t));
  EXPECT_EQ(choices_of("tuning.timing_l2"), timings);
  for (const std::string& c : timings) EXPECT_TRUE(parse_timing_l2(c)) << c;
}

// Every listed value loads, and the message for one that is not lists them.
TEST(ConfigChoicesTest, EveryChoiceLoadsAndOthersAreRefusedWithTheList) {
  for (std::string_view key : {"tuning.strategy", "tuning.gpu_policy", "tuning.timing_l2"}) {
    for (const std::string& c : choices_of(key)) {
      DaemonConfig config = default_config();
      EXPECT_TRUE(apply_config_assignment(config, std::string(key) + "=" + c)) << key << "=" << c;
    }
    DaemonConfig config = default_config();
    auto refused = apply_config_assignment(config, std::string(key) + "=bogus");
    ASSERT_FALSE(refused) << key;
    for (const std::string& c : choices_of(key))
      EXPECT_NE(refused.error().message.find(c), std::string::npos) << refused.error().message;
  }
}

}  // namespace
}  // namespace ktune
