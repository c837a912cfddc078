// ktune::Kernel without a GPU: what it refuses before touching the driver (a cubin that is not
// what its description says, argument kinds it cannot pass, the wrong number of buffers), the
// clear error where there is no driver, and the wire helpers it relies on (base64, cubin ELF).
#include <gtest/gtest.h>

#include "client/base64.h"
#include "client/cubin.h"
#include "client/cuda_api.h"
#include "client/kernel.h"
#include "config/config.h"
#include "templates/registry.h"
#include "templates/space.h"
#include "tuner/compiler.h"

namespace ktune {
namespace {

using protocol::ArgKind;

TEST(Base64Test, RoundTripsEveryLengthAndRefusesGarbage) {
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    const std::string enc = protocol::base64_encode(bytes);
    EXPECT_EQ(enc.size() % 4, 0u);
    auto dec = protocol::base64_decode(enc);
    ASSERT_TRUE(dec) << i;
    EXPECT_EQ(*dec, bytes) << i;
    bytes += char(i * 37 + 11);
  }
  EXPECT_EQ(protocol::base64_encode("ktune"), "a3R1bmU=");
  EXPECT_EQ(*protocol::base64_decode("a3R1bmU="), "ktune");
  for (const char* bad : {"a3R1bmU", "a3R1b!U=", "a3=1bmU=", "====", "a==="})
    EXPECT_FALSE(protocol::base64_decode(bad)) << bad;
}

TEST(CubinTest, ArchStrings) {
  EXPECT_EQ(arch_sm("sm_80"), 80);
  EXPECT_EQ(arch_sm("sm_90a"), 90);
  EXPECT_EQ(arch_sm("sm_100a"), 100);
  EXPECT_EQ(arch_sm("compute_90"), 0);
  EXPECT_EQ(arch_sm("sm_"), 0);
  EXPECT_EQ(arch_sm("sm_90x"), 0);
}

protocol::LaunchArg arg(std::string name, ArgKind kind, std::string dtype, std::int64_t count,
                        double value = 0) {
  protocol::LaunchArg a;
  a.name = std::move(name);
  a.kind = kind;
  a.dtype = std::move(dtype);
  a.count = count;
  a.bytes = count * protocol::dtype_bytes(a.dtype);
  a.value = value;
  return a;
}

// A served softmax kernel, compiled here for `arch` (NVRTC needs no GPU).
protocol::KernelImage softmax_image(const std::string& arch) {
  static const TemplateRegistry templates = TemplateRegistry::load({builtin_template_dir()});
  const KernelTemplate& t = *templates.find("softmax");
  const Problem p{"softmax", "fp32", "fp32", "", {{"rows", 8}, {"cols", 1024}}};
  auto limits = *DeviceLimits::for_arch(arch);
  auto inst = instantiate(t, p, limits, *heuristic_config(t, p, limits));
  EXPECT_TRUE(inst);
  Compiler compiler({.threads = 1});
  auto r = compiler.compile({&t, inst->name_expression, arch});
  EXPECT_TRUE(r.ok()) << r.log;
  protocol::KernelImage image;
  image.template_name = "softmax";
  image.device = "test";
  image.lowered_name = r.kernel.lowered_name;
  image.cubin = r.kernel.cubin;
  image.launch.name_expression = inst->name_expression;
  image.launch.arch = arch;
  image.launch.grid = inst->launch.grid;
  image.launch.block = inst->launch.block;
  image.launch.args = {arg("x", ArgKind::in, "fp32", 8192), arg("y", ArgKind::out, "fp32", 8192),
                       arg("rows", ArgKind::scalar, "i32", 0, 8),
                       arg("cols", ArgKind::scalar, "i32", 0, 1024)};
  return image;
}

TEST(CubinTest, InspectsAServedCubin) {
  const auto image = softmax_image("sm_80");
  auto info = inspect_cubin(image.cubin);
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_EQ(info->sm, 80);
  EXPECT_TRUE(info->has_symbol(image.lowered_name));
  EXPECT_FALSE(info->has_symbol("_Z3foov"));
  EXPECT_FALSE(inspect_cubin("not an elf at all, but long enough to have a header......"));
  std::string truncated = image.cubin.substr(0, 200);
  EXPECT_FALSE(inspect_cubin(truncated)) << "section headers out of bounds";
}

TEST(KernelTest, RefusesACubinThatIsNotWhatItsDescriptionSays) {
  auto image = softmax_image("sm_80");
  auto other_arch = image;
  other_arch.launch.arch = "sm_90";
  auto k = Kernel::create(other_arch);
  ASSERT_FALSE(k);
  EXPECT_NE(k.error().message.find("compiled for sm_80 but its description says sm_90"),
            std::string::npos)
      << k.error().message;
  auto no_entry = image;
  no_entry.lowered_name = "_Z9not_there";
  k = Kernel::create(no_entry);
  ASSERT_FALSE(k);
  EXPECT_NE(k.error().message.find("has no entry '_Z9not_there'"), std::string::npos);
  auto garbage = image;
  garbage.cubin = "garbage";
  EXPECT_FALSE(Kernel::create(garbage));
  auto tensor_map = image;
  tensor_map.launch.args.push_back(arg("tmA", ArgKind::tensor_map, "", 0));
  k = Kernel::create(tensor_map);
  ASSERT_FALSE(k);
  EXPECT_NE(k.error().message.find("tensor_map"), std::string::npos);
}

TEST(KernelTest, TakesItsBuffersInOrderAndCountsThem) {
  auto image = softmax_image("sm_80");
  image.launch.args.insert(image.launch.args.begin() + 2, arg("ws", ArgKind::workspace, "i32", 4));
  auto k = Kernel::create(image);
  ASSERT_TRUE(k) << k.error().message;
  EXPECT_EQ((*k)->buffer_names(), (std::vector<std::string>{"x", "y"})) << "workspaces are its own";
  auto r = (*k)->launch({1, 2, 3}, nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, protocol::ErrorKind::bad_request);
  EXPECT_NE(r.error().message.find("takes 2 buffers (x, y), 3 given"), std::string::npos)
      << r.error().message;
}

// Without a driver (CI), creating a Kernel works and launching says why it cannot.
TEST(KernelTest, WithoutADriverALaunchIsAClearError) {
  if (cuda::CudaApi::get()) GTEST_SKIP() << "a CUDA driver is present (the gpu tests launch)";
  auto k = Kernel::create(softmax_image("sm_90"));
  ASSERT_TRUE(k) << k.error().message;
  auto r = (*k)->launch({0x1000, 0x2000}, nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, protocol::ErrorKind::unavailable);
  EXPECT_NE(r.error().message.find("no CUDA driver"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace ktune
