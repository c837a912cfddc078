// ktune::Kernel without a GPU: what it refuses before touching the driver (a cubin that is not
// what its description says, malformed tensor maps, the wrong number of buffers), the clear
// error where there is no driver, the wire helpers it relies on (base64, cubin ELF), and the
// cuTensorMapEncodeTiled inputs it plans from the daemon's description of a gemm_tma config.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>

#include "client/base64.h"
#include "client/cubin.h"
#include "client/cuda_api.h"
#include "client/kernel.h"
#include "config/config.h"
#include "daemon/launch.h"
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
}

// create_like() takes another shape of the same cubin only: another cubin id, arch or entry is
// refused (its cubin is not the one held), and the new Kernel shares the bytes.
TEST(KernelTest, CreateLikeTakesOnlyADescriptionOfTheSameCubin) {
  auto image = softmax_image("sm_80");
  image.launch.cubin_id = "00000000000000aa";
  auto k = Kernel::create(image);
  ASSERT_TRUE(k) << k.error().message;
  EXPECT_TRUE((*k)->image().cubin.empty());
  EXPECT_EQ((*k)->cubin(), image.cubin);
  auto launch = image.launch;
  launch.grid[0] = 77;
  auto like = Kernel::create_like(**k, launch, "softmax|other");
  ASSERT_TRUE(like) << like.error().message;
  EXPECT_EQ((*like)->cubin().data(), (*k)->cubin().data());
  EXPECT_EQ((*like)->description().grid[0], 77u);
  EXPECT_EQ((*like)->image().problem_key, "softmax|other");
  EXPECT_EQ((*like)->buffer_names(), (*k)->buffer_names());
  for (auto edit : {+[](protocol::LaunchDescription& d) { d.cubin_id = "00000000000000bb"; },
                    +[](protocol::LaunchDescription& d) { d.cubin_id.clear(); },
                    +[](protocol::LaunchDescription& d) { d.arch = "sm_90"; },
                    +[](protocol::LaunchDescription& d) { d.name_expression += " "; }}) {
    auto other = launch;
    edit(other);
    auto r = Kernel::create_like(**k, other, "x");
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, protocol::ErrorKind::bad_request);
  }
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

// The daemon's description of a gemm_tma config (what the kernel op sends), for M x N x K bf16.
protocol::LaunchDescription gemm_tma_description(std::int64_t m, std::int64_t n, std::int64_t k,
                                                 Instance* instance = nullptr) {
  static const TemplateRegistry templates = TemplateRegistry::load({builtin_template_dir()});
  const KernelTemplate& t = *templates.find("gemm_tma");
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", m}, {"N", n}, {"K", k}}};
  auto limits = *DeviceLimits::for_arch("sm_90a");
  auto config = heuristic_config(t, p, limits);
  EXPECT_TRUE(config) << config.error().message;
  auto inst = instantiate(t, p, limits, *config);
  EXPECT_TRUE(inst) << inst.error().message;
  if (instance) *instance = *inst;
  return describe_launch(t, *inst, "sm_90a");
}

// A Kernel over a gemm_tma description. The cubin is softmax's (create() checks the cubin's arch
// and entry, not the arguments against it), so no gemm_tma compile is needed.
protocol::KernelImage gemm_tma_image(std::int64_t m, std::int64_t n, std::int64_t k) {
  static const protocol::KernelImage softmax = softmax_image("sm_90");
  auto image = softmax;
  image.template_name = "gemm_tma";
  image.launch.args = gemm_tma_description(m, n, k).args;
  return image;
}

protocol::LaunchArg& named(protocol::LaunchDescription& d, std::string_view name) {
  for (auto& a : d.args)
    if (a.name == name) return a;
  throw std::runtime_error("no argument " + std::string(name));
}

// The inputs the tuner's worker passes cuTensorMapEncodeTiled (tuner/gpu_worker.cc
// GpuWorker::tensor_map), restated here with cuda.h's names: the plan must hold exactly these.
// The heuristic serves the first two shapes a config that stores C directly (tmC is then the
// 16-byte map over C's start that nothing reads) and the third the TMA-store epilogue (tmC over
// all of C, 16-row boxes of 128 bytes).
TEST(TensorMapTest, PlansWhatTheWorkerEncodesForTheSameConfig) {
  for (auto [m, n, k] :
       {std::array<std::int64_t, 3>{256, 512, 128}, {200, 300, 136}, {1024, 2048, 1024}}) {
    Instance inst;
    auto d = gemm_tma_description(m, n, k, &inst);
    std::vector<std::string> buffers;
    for (const auto& a : d.args)
      if (a.kind == ArgKind::in || a.kind == ArgKind::out || a.kind == ArgKind::inout)
        buffers.push_back(a.name);
    EXPECT_EQ(buffers, (std::vector<std::string>{"A", "B", "C"}));
    int maps = 0;
    for (const auto& v : inst.args) {
      if (v.kind != ktune::ArgKind::tensor_map) continue;
      ++maps;
      auto plan = parse_tensor_map(named(d, v.name), d.args, buffers);
      ASSERT_TRUE(plan) << plan.error().message;
      EXPECT_EQ(plan->name, v.name);
      EXPECT_EQ(buffers[size_t(plan->buffer)], v.map.buffer);
      EXPECT_EQ(plan->data_type, std::uint32_t(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16));
      ASSERT_EQ(plan->rank, v.map.dims.size());
      EXPECT_EQ(plan->rank, 2u);
      for (size_t i = 0; i < plan->rank; ++i) {
        EXPECT_EQ(plan->dims[i], v.map.dims[i]);
        EXPECT_EQ(plan->box[i], v.map.box[i]);
        EXPECT_EQ(plan->element_strides[i], v.map.element_strides[i]);
      }
      EXPECT_EQ(plan->strides[0], v.map.strides[0]);
      if (v.map.buffer == "C") {
        const bool tma_store = inst.params.at("EPILOGUE") == 2;
        EXPECT_EQ(tma_store, m == 1024) << "the heuristic's epilogue";
        EXPECT_EQ(plan->strides[0], tma_store ? std::uint64_t(n) * 2 : 16u);
        EXPECT_EQ(plan->dims[0], tma_store ? std::uint64_t(n) : 8u);
        EXPECT_EQ(plan->dims[1], tma_store ? std::uint64_t(m) : 1u);
        EXPECT_EQ(plan->box[0], tma_store ? 64u : 8u);
        EXPECT_EQ(plan->box[1], tma_store ? 16u : 1u);
      } else {
        EXPECT_EQ(plan->strides[0], std::uint64_t(k) * 2) << "K-major rows of bf16";
        EXPECT_EQ(plan->dims[0], std::uint64_t(k));
        EXPECT_EQ(plan->dims[1], std::uint64_t(v.map.buffer == "A" ? m : n));
      }
      EXPECT_EQ(plan->interleave, std::uint32_t(CU_TENSOR_MAP_INTERLEAVE_NONE));
      EXPECT_EQ(plan->swizzle, std::uint32_t(CU_TENSOR_MAP_SWIZZLE_128B));
      EXPECT_EQ(plan->l2_promotion, std::uint32_t(CU_TENSOR_MAP_L2_PROMOTION_L2_256B));
      EXPECT_EQ(plan->oob_fill, std::uint32_t(CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
    }
    EXPECT_EQ(maps, 3);
  }
  // The other enum values map in the driver's order; the dtypes to the driver's types.
  auto d = gemm_tma_description(256, 512, 128);
  const std::vector<std::string> buffers{"A", "B", "C"};
  const std::pair<const char*, std::uint32_t> swizzles[] = {{"none", CU_TENSOR_MAP_SWIZZLE_NONE},
                                                            {"32B", CU_TENSOR_MAP_SWIZZLE_32B},
                                                            {"64B", CU_TENSOR_MAP_SWIZZLE_64B}};
  for (auto [text, code] : swizzles) {
    named(d, "tmA").tensor_map["swizzle"] = text;
    EXPECT_EQ(parse_tensor_map(named(d, "tmA"), d.args, buffers)->swizzle, code) << text;
  }
  const std::pair<const char*, std::uint32_t> l2s[] = {
      {"none", CU_TENSOR_MAP_L2_PROMOTION_NONE},
      {"64B", CU_TENSOR_MAP_L2_PROMOTION_L2_64B},
      {"128B", CU_TENSOR_MAP_L2_PROMOTION_L2_128B}};
  for (auto [text, code] : l2s) {
    named(d, "tmA").tensor_map["l2_promotion"] = text;
    EXPECT_EQ(parse_tensor_map(named(d, "tmA"), d.args, buffers)->l2_promotion, code) << text;
  }
  named(d, "tmA").tensor_map["oob_fill"] = "nan";
  EXPECT_EQ(parse_tensor_map(named(d, "tmA"), d.args, buffers)->oob_fill,
            std::uint32_t(CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA));
  const std::pair<const char*, std::uint32_t> types[] = {{"fp16", CU_TENSOR_MAP_DATA_TYPE_FLOAT16},
                                                         {"fp32", CU_TENSOR_MAP_DATA_TYPE_FLOAT32},
                                                         {"i32", CU_TENSOR_MAP_DATA_TYPE_INT32}};
  for (auto [dtype, code] : types) {
    named(d, "A").dtype = dtype;
    named(d, "A").bytes = named(d, "A").count * protocol::dtype_bytes(dtype);
    auto plan = parse_tensor_map(named(d, "tmA"), d.args, buffers);
    ASSERT_TRUE(plan) << dtype << ": " << plan.error().message;
    EXPECT_EQ(plan->data_type, code) << dtype;
  }
}

TEST(TensorMapTest, AGemmTmaImageTakesABCAndPassesTheMaps) {
  auto k = Kernel::create(gemm_tma_image(200, 300, 136));
  ASSERT_TRUE(k) << k.error().message;
  EXPECT_EQ((*k)->buffer_names(), (std::vector<std::string>{"A", "B", "C"}))
      << "A and B are no kernel parameters, but the maps are encoded from their addresses";
  auto r = (*k)->launch({1, 2}, nullptr);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("takes 3 buffers (A, B, C), 2 given"), std::string::npos)
      << r.error().message;
}

TEST(TensorMapTest, MalformedMapsAreRefusedNamingTheArgument) {
  struct Case {
    const char* what;
    std::function<void(protocol::LaunchDescription&)> edit;
    const char* says;
  };
  const Case cases[] = {
      {"no object", [](auto& d) { named(d, "tmB").tensor_map = nullptr; },
       "tensor_map argument 'tmB': no \"tensor_map\" object"},
      {"no dims", [](auto& d) { named(d, "tmB").tensor_map.erase("dims"); }, "'tmB': malformed"},
      {"dims not numbers",
       [](auto& d) {
         named(d, "tmB").tensor_map["dims"] = {"K", "N"};
       },
       "'tmB': malformed"},
      {"rank 0",
       [](auto& d) {
         auto& t = named(d, "tmB").tensor_map;
         t["dims"] = protocol::Json::array();
         t["strides"] = t["box"] = t["element_strides"] = protocol::Json::array();
       },
       "'tmB': rank 0 (dims) is not 1 to 5"},
      {"rank 6", [](auto& d) { named(d, "tmB").tensor_map["dims"] = {1, 1, 1, 1, 1, 1}; },
       "'tmB': rank 6"},
      {"strides",
       [](auto& d) {
         named(d, "tmB").tensor_map["strides"] = {256, 256};
       },
       "'tmB': 2 strides for rank 2 (needs rank - 1)"},
      {"box", [](auto& d) { named(d, "tmB").tensor_map["box"] = {64}; },
       "'tmB': box and element_strides need 2 entries each (have 1 and 2)"},
      {"swizzle", [](auto& d) { named(d, "tmB").tensor_map["swizzle"] = "256B"; },
       "'tmB': unknown swizzle '256B'"},
      {"l2", [](auto& d) { named(d, "tmB").tensor_map["l2_promotion"] = "1K"; },
       "'tmB': unknown l2_promotion '1K'"},
      {"oob", [](auto& d) { named(d, "tmB").tensor_map["oob_fill"] = "ones"; },
       "'tmB': unknown oob_fill 'ones'"},
      {"no buffer", [](auto& d) { named(d, "tmB").tensor_map["buffer"] = "Z"; },
       "'tmB': maps 'Z', which is no argument"},
      {"a scalar", [](auto& d) { named(d, "tmB").tensor_map["buffer"] = "K"; },
       "'tmB': maps 'K', which is not an in/out/inout buffer"},
      {"a workspace", [](auto& d) { named(d, "tmB").tensor_map["buffer"] = "tile_counters"; },
       "'tmB': maps 'tile_counters', which is not an in/out/inout buffer"},
      {"dtype", [](auto& d) { named(d, "B").dtype = "i64"; },
       "buffer 'B' has dtype 'i64', which TMA cannot map"},
      {"past the buffer", [](auto& d) { named(d, "B").bytes -= 2; },
       "'tmB': spans 139264 bytes but 'B' holds 139262"},
  };
  for (const auto& c : cases) {
    auto image = gemm_tma_image(256, 512, 136);
    c.edit(image.launch);
    auto k = Kernel::create(image);
    ASSERT_FALSE(k) << c.what;
    EXPECT_EQ(k.error().kind, protocol::ErrorKind::bad_request) << c.what;
    EXPECT_NE(k.error().message.find(c.says), std::string::npos)
        << c.what << ": " << k.error().message;
  }
}

// Lending address 0 is refused (launches on streams that already had their own set would have been
// handed a null workspace).
TEST(KernelTest, LendingANullWorkspaceIsRefused) {
  auto image = softmax_image("sm_80");
  image.launch.args.insert(image.launch.args.begin() + 2, arg("ws", ArgKind::workspace, "i32", 4));
  auto k = Kernel::create(image);
  ASSERT_TRUE(k) << k.error().message;
  auto r = (*k)->borrow_workspace("ws", 0, 16);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, protocol::ErrorKind::bad_request);
  EXPECT_NE(r.error().message.find("lend a device address, not 0"), std::string::npos)
      << r.error().message;
}

// A buffer off 16 bytes is refused before the driver sees it (a misaligned access faults, and the
// fault ends the CUDA context).
TEST(KernelTest, AnUnalignedBufferIsRefusedBeforeTheLaunch) {
  auto k = Kernel::create(softmax_image("sm_90"));
  ASSERT_TRUE(k) << k.error().message;
  auto r = (*k)->launch({0x1000, 0x2008}, nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, protocol::ErrorKind::bad_request);
  EXPECT_NE(r.error().message.find("': its address 0x2008 is not 16-byte aligned"),
            std::string::npos)
      << r.error().message;
}

// A null buffer is refused before the driver sees it (the launch would fault and end the
// context).
TEST(KernelTest, ANullBufferIsRefusedBeforeTheLaunch) {
  auto k = Kernel::create(softmax_image("sm_90"));
  ASSERT_TRUE(k) << k.error().message;
  auto r = (*k)->launch({0, 0x2000}, nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, protocol::ErrorKind::bad_request);
  EXPECT_NE(r.error().message.find("buffer 'x': its address is 0"), std::string::npos)
      << r.error().message;
}

// A scalar override must name one of the kernel's f32 coefficients, with a value f32 holds: an
// unknown name ran with the default (alpha for Alpha), and a dimension ran a grid sized for
// another shape (a larger M wrote out of bounds).
TEST(KernelTest, AScalarOverrideNamesAnF32CoefficientTheKernelHas) {
  auto image = softmax_image("sm_90");
  image.launch.args.push_back(arg("scale", ArgKind::scalar, "f32", 0, 1));
  auto k = Kernel::create(image);
  ASSERT_TRUE(k) << k.error().message;
  const std::uint64_t buffers[] = {0x1000, 0x2000};
  struct Case {
    ScalarArg o;
    std::string says;
  } cases[] = {
      {{"Scale", 2.0}, "the kernel has no scalar 'Scale' (its scalars: rows, cols, scale)"},
      {{"rows", 16}, "scalar 'rows' is a dimension the kernel was served for (rows=8)"},
      {{"scale", 1e300}, "does not fit the kernel's f32"},
  };
  for (const auto& c : cases) {
    auto r = (*k)->launch(buffers, nullptr, std::span<const ScalarArg>(&c.o, 1));
    ASSERT_FALSE(r) << c.says;
    EXPECT_EQ(r.error().kind, protocol::ErrorKind::bad_request);
    EXPECT_NE(r.error().message.find(c.says), std::string::npos) << r.error().message;
  }
  if (cuda::CudaApi::get()) return;  // with a driver, a valid override would launch
  const ScalarArg ok{"scale", 0.5};
  auto r = (*k)->launch(buffers, nullptr, std::span<const ScalarArg>(&ok, 1));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, protocol::ErrorKind::unavailable) << "checked, then no driver";
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
