// The manifest's tensor-map arguments, unpassed buffers, cluster launches and max_active_clusters
// (docs/templates.md): parsing, the errors a bad manifest gets, the constraints the loader adds
// for cuTensorMapEncodeTiled, and what instantiate() makes of them. The test template is
// tests/data/templates/tma_copy (its GPU side is in tests/tuner/gpu_test.cc).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "templates/manifest.h"
#include "templates/registry.h"
#include "templates/space.h"

namespace ktune {
namespace {

const std::string k_yaml =
    std::string(KTUNE_SOURCE_DIR) + "/tests/data/templates/tma_copy/tma_copy.yaml";

std::string yaml_text() {
  std::ifstream in(k_yaml);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `t` with `from` replaced by `to` (once).
std::string replaced(std::string t, const std::string& from, const std::string& to) {
  const auto pos = t.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return pos == std::string::npos ? t : t.replace(pos, from.size(), to);
}

// The test manifest with `from` replaced by `to` (once).
std::string edited(const std::string& from, const std::string& to) {
  return replaced(yaml_text(), from, to);
}

Problem copy_problem(std::int64_t rows, std::int64_t cols) {
  return Problem{"tma_copy", "fp32", "fp32", "", {{"rows", rows}, {"cols", cols}}};
}

const Params k_config{{"BOX_R", 32}, {"CLUSTER", 2}, {"PERSISTENT", 1}};

TEST(TensorMapManifestTest, ParsesMapsClustersAndTheOccupancyVariable) {
  auto m = parse_manifest(yaml_text(), "tma_copy.yaml");
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_EQ(m->args.size(), 5u);
  const ArgSpec& map = m->args[1];
  EXPECT_EQ(map.kind, ArgKind::tensor_map);
  EXPECT_EQ(map.map.buffer, "x");
  ASSERT_EQ(map.map.dims.size(), 2u);
  EXPECT_EQ(map.map.dims[0].text, "cols");
  ASSERT_EQ(map.map.strides.size(), 1u);
  EXPECT_EQ(map.map.strides[0].text, "cols * in_bytes");
  ASSERT_EQ(map.map.element_strides.size(), 2u);
  EXPECT_EQ(map.map.element_strides[1].text, "1");  // the default
  EXPECT_EQ(map.map.swizzle, TensorMapSwizzle::none);
  EXPECT_EQ(map.map.l2_promotion, TensorMapL2Promotion::b256);
  EXPECT_EQ(map.map.oob_fill, TensorMapOobFill::zeros);
  EXPECT_EQ(m->launch.cluster[0].text, "CLUSTER");
  EXPECT_TRUE(m->grid_reads_max_active_clusters());
  // The loader's own constraints for the map come after the manifest's (none here).
  bool strides = false, box = false;
  for (const auto& c : m->constraints) {
    strides |= c.why.find("tmx: tensor map strides[0]") == 0;
    box |= c.why.find("tmx: tensor map box[1] (BOX_R)") == 0;
  }
  EXPECT_TRUE(strides);
  EXPECT_TRUE(box);
}

TEST(TensorMapManifestTest, OptionalFieldsAndUnpassedBuffers) {
  const std::string text = replaced(
      edited("box: [32, BOX_R]}", "box: [32, BOX_R], element_strides: [1, 1], swizzle: 128B, "
                                  "l2_promotion: 64B, oob_fill: nan}"),
      "count: rows * cols}\n  - {name: tmx", "count: rows * cols, pass: false}\n  - {name: tmx");
  auto m = parse_manifest(text, "tma_copy.yaml");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_FALSE(m->args[0].pass);
  EXPECT_EQ(m->args[1].map.swizzle, TensorMapSwizzle::b128);
  EXPECT_EQ(m->args[1].map.l2_promotion, TensorMapL2Promotion::b64);
  EXPECT_EQ(m->args[1].map.oob_fill, TensorMapOobFill::nan);
  // 32 fp32 = 128 bytes fit the 128B swizzle span; a 64-wide box would not.
  bool span = false;
  for (const auto& c : m->constraints) span |= c.why.find("128B swizzle span") != std::string::npos;
  EXPECT_TRUE(span);
}

TEST(TensorMapManifestTest, StructuralErrorsNameFileLineAndField) {
  struct Case {
    std::string from, to, expect;
  };
  const std::vector<Case> cases = {
      {"tensor_map: x,", "tensor_map: z,", "args[1].tensor_map: 'z' is not a buffer argument"},
      {"tensor_map: x,", "tensor_map: rows,", "'rows' is not a buffer argument"},
      {"strides: [\"cols * in_bytes\"]", "strides: []", "args[1].strides: expected 1 byte strides"},
      {"box: [32, BOX_R]}", "box: [32]}", "args[1].box: expected 2 box sizes"},
      {"box: [32, BOX_R]}", "box: [32, BOX_R], swizzle: 256B}",
       "args[1].swizzle: expected none, 32B, 64B or 128B"},
      {"box: [32, BOX_R]}", "box: [32, BOX_R], oob_fill: ones}", "expected zeros or nan"},
      {"box: [32, BOX_R]}", "box: [32, BOX_R], element_strides: [1]}",
       "args[1].element_strides: expected 2 element strides"},
      {"dims: [cols, rows]", "dims: [cols, rows, 1, 1, 1, 1]", "expected 1 to 5 dimensions"},
      {"box: [32, BOX_R]}", "box: [32, BOX_R], colour: red}", "args[1].colour: unknown key"},
      {"dims: [cols, rows]", "dims: [cols, ROWS]", "args[1].dims[1]: unknown variable 'ROWS'"},
      {"count: rows * cols}\n  - {name: tmx", "count: rows * cols, pass: maybe}\n  - {name: tmx",
       "args[0].pass: expected true or false"},
      {"{name: y, buffer: out, dtype: out, count: rows * cols}",
       "{name: y, buffer: out, dtype: out, count: rows * cols, pass: false}",
       "args[2].pass: buffer 'y' is not passed and no tensor_map maps it"},
      {"block: [128, 1, 1]", "block: [128, 1, max_active_clusters]",
       "launch.block[2]: max_active_clusters may only be used in launch.grid"},
      {"groups: ceil_div(tiles, CLUSTER)", "groups: min(tiles, max_active_clusters)",
       "derived.groups: max_active_clusters may only be used in launch.grid"},
      {"cluster: [CLUSTER, 1, 1]", "cluster: [CLUSTER, 1]", "launch.cluster: expected [x, y, z]"},
      {"smem: 0}", "smem: 0, cluster: [2, 1, 1]}", ""},  // a reference may launch clusters too
  };
  for (const auto& c : cases) {
    const std::string text = edited(c.from, c.to);
    auto m = parse_manifest(text, "tma_copy.yaml");
    if (c.expect.empty()) {
      EXPECT_TRUE(m) << c.to << ": " << m.error().message;
      continue;
    }
    ASSERT_FALSE(m) << c.to;
    EXPECT_NE(m.error().message.find(c.expect), std::string::npos) << m.error().message;
    EXPECT_TRUE(m.error().message.starts_with("tma_copy.yaml:")) << m.error().message;
  }
}

TEST(TensorMapSpaceTest, InstantiateEvaluatesMapsAndClusterAndFallbackOccupancy) {
  auto t = TemplateRegistry::load_template(k_yaml);
  ASSERT_TRUE(t) << t.error().message;
  auto inst = instantiate(**t, copy_problem(1000, 776), DeviceLimits{}, k_config);
  ASSERT_TRUE(inst) << inst.error().message;
  EXPECT_EQ(inst->name_expression, "ktune_tma_copy<32, 2>");
  ASSERT_EQ(inst->args.size(), 5u);
  const ArgValue& map = inst->args[1];
  EXPECT_EQ(map.kind, ArgKind::tensor_map);
  EXPECT_EQ(map.dtype, "fp32");  // the buffer's
  EXPECT_EQ(map.map.buffer, "x");
  EXPECT_EQ(map.map.dims, (std::vector<std::uint64_t>{776, 1000}));
  EXPECT_EQ(map.map.strides, (std::vector<std::uint64_t>{776 * 4}));
  EXPECT_EQ(map.map.box, (std::vector<std::uint32_t>{32, 32}));
  EXPECT_EQ(map.map.element_strides, (std::vector<std::uint32_t>{1, 1}));
  EXPECT_TRUE(inst->args[0].pass);
  EXPECT_EQ(inst->launch.cluster, (std::array<std::uint32_t, 3>{2, 1, 1}));
  // 32 x 25 = 800 tiles in 400 pairs; without a GPU, max_active_clusters = 132 SMs / 2.
  EXPECT_TRUE(inst->grid_reads_max_active_clusters);
  EXPECT_EQ(inst->max_active_clusters, 66);
  EXPECT_EQ(inst->launch.grid[0], 132u);
  // What the worker measured replaces the fallback.
  auto measured = instantiate(**t, copy_problem(1000, 776), DeviceLimits{}, k_config, 60);
  ASSERT_TRUE(measured);
  EXPECT_EQ(measured->max_active_clusters, 60);
  EXPECT_EQ(measured->launch.grid[0], 120u);
  // One block per tile without persistence.
  Params tiles = k_config;
  tiles["PERSISTENT"] = 0;
  EXPECT_EQ(instantiate(**t, copy_problem(1000, 776), DeviceLimits{}, tiles)->launch.grid[0], 800u);
}

TEST(TensorMapSpaceTest, LoaderConstraintsPruneWhatTheDriverWouldRefuse) {
  auto t = TemplateRegistry::load_template(k_yaml);
  ASSERT_TRUE(t) << t.error().message;
  // 774 fp32 per row: 3096-byte rows are not 16-byte aligned, so no config can be encoded.
  auto space = SearchSpace::build(**t, copy_problem(1000, 774), DeviceLimits{});
  ASSERT_FALSE(space);
  EXPECT_NE(space.error().message.find("tmx: tensor map strides[0] (cols * in_bytes bytes) must be "
                                       "a multiple of 16"),
            std::string::npos)
      << space.error().message;
  auto bad = instantiate(**t, copy_problem(1000, 774), DeviceLimits{}, k_config);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("multiple of 16"), std::string::npos);
  // A box over 256 rows is pruned, not sent to the worker.
  std::string text = edited("BOX_R: [8, 32]", "BOX_R: [8, 32, 512]");
  auto dir = std::filesystem::temp_directory_path() /
             ("ktune-tmap-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::create_directories(dir / "tma_copy");
  std::filesystem::copy_file(std::filesystem::path(k_yaml).replace_extension(".cuh"),
                             dir / "tma_copy/tma_copy.cuh",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string rel = "../../../../templates/common/";
  for (size_t p; (p = text.find(rel)) != std::string::npos;)
    text.replace(p, rel.size(), std::string(KTUNE_SOURCE_DIR) + "/templates/common/");
  std::ofstream(dir / "tma_copy/tma_copy.yaml") << text;
  auto wide = TemplateRegistry::load_template((dir / "tma_copy/tma_copy.yaml").string());
  ASSERT_TRUE(wide) << wide.error().message;
  auto s = SearchSpace::build(**wide, copy_problem(4096, 4096), DeviceLimits{});
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->report().valid, 8);  // BOX_R 8 and 32 only
  ASSERT_FALSE(s->report().pruned.empty());
  EXPECT_EQ(s->report().pruned[0].why, "tmx: tensor map box[1] (BOX_R) must be 1..256 elements (TMA)");
  std::filesystem::remove_all(dir);
}

// The loader's rules count an i32 buffer's elements as 4 bytes (they counted 0, so every rule
// held): a 2-element inner box is 8 bytes, not a multiple of 16.
TEST(TensorMapSpaceTest, LoaderConstraintsCountI32ElementsAsFourBytes) {
  const std::string y = "  - {name: y, buffer: out, dtype: out, count: rows * cols}\n";
  auto with_box = [&](int inner) {
    return edited(y, y +
                         "  - {name: idx, buffer: in, dtype: i32, count: rows * cols}\n"
                         "  - {name: tmi, tensor_map: idx, dims: [cols, rows], strides: [\"cols * "
                         "4\"], box: [" +
                         std::to_string(inner) + ", BOX_R]}\n");
  };
  auto m = parse_manifest(with_box(2), "tma_copy.yaml");
  ASSERT_TRUE(m) << m.error().message;
  KernelTemplate t;
  t.manifest = std::move(*m);
  auto space = SearchSpace::build(t, copy_problem(1024, 1024), DeviceLimits{});
  ASSERT_FALSE(space);
  EXPECT_NE(space.error().message.find(
                "tmi: tensor map inner box (2 elements) must be a multiple of 16 bytes"),
            std::string::npos)
      << space.error().message;
  m = parse_manifest(with_box(4), "tma_copy.yaml");
  ASSERT_TRUE(m) << m.error().message;
  t.manifest = std::move(*m);
  space = SearchSpace::build(t, copy_problem(1024, 1024), DeviceLimits{});
  ASSERT_TRUE(space) << space.error().message;
  // cols i32 elements span cols * 4 bytes: a 1024-byte stride over 1024 elements is too short.
  m = parse_manifest(replaced(with_box(4), "strides: [\"cols * 4\"]", "strides: [\"cols\"]"),
                     "tma_copy.yaml");
  ASSERT_TRUE(m) << m.error().message;
  t.manifest = std::move(*m);
  space = SearchSpace::build(t, copy_problem(1024, 1024), DeviceLimits{});
  ASSERT_FALSE(space);
  EXPECT_NE(space.error().message.find("tmi: tensor map strides[0] (cols) must span dims[0]"),
            std::string::npos)
      << space.error().message;
}

TEST(TensorMapSpaceTest, GridMustBeWholeClusters) {
  auto m = parse_manifest(edited("* CLUSTER\", 1, 1]", "* CLUSTER + 1\", 1, 1]"), "tma_copy.yaml");
  ASSERT_TRUE(m) << m.error().message;
  KernelTemplate t;
  t.manifest = std::move(*m);
  auto inst = instantiate(t, copy_problem(1000, 776), DeviceLimits{}, k_config);
  ASSERT_FALSE(inst);
  EXPECT_NE(inst.error().message.find("launch.grid[0] (133) is not a multiple of the cluster's (2)"),
            std::string::npos)
      << inst.error().message;
  Params one = k_config;
  one["CLUSTER"] = 1;
  EXPECT_TRUE(instantiate(t, copy_problem(1000, 776), DeviceLimits{}, one));
}

}  // namespace
}  // namespace ktune
