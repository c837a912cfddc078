#include "templates/manifest.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <regex>

#include "templates/registry.h"
#include "templates/space.h"

namespace ktune {
namespace {

const std::string k_scale_dir = std::string(KTUNE_SOURCE_DIR) + "/tests/data/templates";
const std::string k_scale = k_scale_dir + "/scale/scale.yaml";

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string scale_text() {
  return read_all(k_scale);
}

// `text` with `from` replaced by `to` (once).
std::string edited(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return text.replace(pos, from.size(), to);
}

// The scale manifest with `from` replaced by `to` (once).
std::string edited(const std::string& from, const std::string& to) {
  return edited(scale_text(), from, to);
}

int line_of(const std::string& text, const std::string& needle) {
  const auto pos = text.find(needle);
  return int(std::count(text.begin(), text.begin() + long(pos), '\n')) + 1;
}

// The manifest `text` is refused at the line holding `at`, with a message holding `expect`.
void expect_refused_at(const std::string& text, const std::string& at, const std::string& expect) {
  auto m = parse_manifest(text, "scale.yaml");
  ASSERT_FALSE(m) << text;
  EXPECT_EQ(m.error().message.find("scale.yaml:" + std::to_string(line_of(text, at)) + ": "), 0u)
      << m.error().message;
  EXPECT_NE(m.error().message.find(expect), std::string::npos) << m.error().message;
}

Problem scale_problem(std::int64_t n, const std::string& dtype = "fp32") {
  return Problem{"scale", dtype, dtype, "", {{"n", n}}};
}

TEST(ManifestTest, LoadsTheTestTemplate) {
  auto m = load_manifest(k_scale);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->name, "scale");
  EXPECT_EQ(m->params.size(), 3u);
  EXPECT_EQ(m->params[2].values, (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(m->space_size(), 6 * 4 * 4);
  EXPECT_TRUE(m->supports(scale_problem(100), 90));
  EXPECT_FALSE(m->supports(scale_problem(100), 75));
  EXPECT_FALSE(m->supports(scale_problem(100, "fp16"), 90));
}

// A space pruned only at its last param is not walked for minutes: the enumeration stops after
// 20M steps with an error that says what to do (4 params of 100 values walked on a lookup thread
// with nothing valid to show for it).
TEST(ManifestTest, AnEnumerationThatPrunesOnlyAtTheEndIsStoppedWithAReason) {
  std::string text = edited("  WAVES: {range: [1, 4]}\n",
                            "  WAVES: {range: [1, 4]}\n  P1: {range: [1, 100]}\n"
                            "  P2: {range: [1, 100]}\n  P3: {range: [1, 100]}\n");
  text =
      edited(text, "    why: vector width must divide n\n",
             "    why: vector width must divide n\n  - expr: P1 + P2 + P3 < 0\n    why: never\n");
  for (const char* rule : {"{THREADS: 128, VEC: 1, WAVES: 1", "{THREADS: 256, VEC: 4, WAVES: 2"})
    text = edited(text, rule, std::string(rule) + ", P1: 1, P2: 1, P3: 1");
  auto m = parse_manifest(text, "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
  auto space = SearchSpace::build(KernelTemplate{*m, "", "", {}, "h", "h"}, scale_problem(4096),
                                  DeviceLimits{});
  ASSERT_FALSE(space);
  EXPECT_NE(space.error().message.find("more than 20M steps (96000000 configs before pruning)"),
            std::string::npos)
      << space.error().message;
}

TEST(ManifestTest, YamlSyntaxErrorNamesFileAndLine) {
  const std::string text = edited("  VEC: [1, 2, 4, 8]", "  VEC: [1, 2, 4, 8");
  auto m = parse_manifest(text, "scale.yaml");
  ASSERT_FALSE(m);
  EXPECT_TRUE(std::regex_search(m.error().message, std::regex(R"(^scale\.yaml:\d+: YAML: )")))
      << m.error().message;
}

TEST(ManifestTest, UnknownParamInExpressionNamesFileLineAndName) {
  const std::string text = edited("n % VEC == 0", "n % VECTOR == 0");
  auto m = parse_manifest(text, "scale.yaml");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().message,
            "scale.yaml:" + std::to_string(line_of(text, "n % VECTOR")) +
                ": constraints[1]: unknown variable 'VECTOR' in 'n % VECTOR == 0'");
}

TEST(ManifestTest, UnknownNameInLaunchAndArgs) {
  auto m = parse_manifest(edited("block: [THREADS, 1, 1]", "block: [THREAD, 1, 1]"), "scale.yaml");
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message.find("launch.block[0]: unknown variable 'THREAD'"), std::string::npos)
      << m.error().message;
  m = parse_manifest(edited("count: n, init", "count: N, init"), "scale.yaml");
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message.find("args[0].count: unknown variable 'N'"), std::string::npos);
}

TEST(ManifestTest, StructuralErrors) {
  struct Case {
    std::string from, to, expect;
  };
  const std::vector<Case> cases = {
      {"THREADS: [64,", "THREADS: [sixty,", "params.THREADS[0]: expected an integer, got 'sixty'"},
      {"op: scale", "op: scale\ncolour: blue", "colour: unknown key"},
      {"{name: y, buffer: out,", "{name: y, buffer: sideways,",
       "args[1].buffer: expected in, out, inout or workspace"},
      {"params: {THREADS: 256, VEC: 4, WAVES: 2}", "params: {THREADS: 256, VEC: 4}",
       "missing param WAVES"},
      {"params: {THREADS: 256, VEC: 4, WAVES: 2}", "params: {THREADS: 256, VEC: 3, WAVES: 2}",
       "value 3 is not in the domain"},
      {"template_args: [T_IN, T_OUT, THREADS, VEC]", "template_args: [T_IN, T_OUT, THREADS, WIDTH]",
       "'WIDTH' is not T_IN"},
      {"template_args: [T_IN, T_OUT]", "template_args: [T_IN, T_OUT, VEC]",
       "a reference kernel cannot depend on the params"},
      {"tolerance: {fp32: 1e-6, bf16: 1e-2}", "tolerance: {fp32: 1e-6}",
       "no tolerance for output dtype bf16"},
      {"name: scale", "name: scaler", "must match the file name 'scale'"},
      {"  - when: n < 4096\n", "  - when: n < 4096 +\n", "heuristic[0].when: bad expression"},
      // heuristic_rank orders templates before a config exists: the problem only.
      {"op: scale", "op: scale\nheuristic_rank: THREADS > 128",
       "heuristic_rank: may name the problem's dims"},
      {"op: scale", "op: scale\nheuristic_rank: sm_count > 100", "heuristic_rank: unknown"},
      {"op: scale", "op: scale\nk_slices: SLICES", "k_slices: unknown"},
      {"op: scale", "op: scale\nk_slices: max_active_clusters",
       "k_slices: max_active_clusters may only be used in launch.grid"},
  };
  for (const auto& c : cases) {
    auto m = parse_manifest(edited(c.from, c.to), "scale.yaml");
    ASSERT_FALSE(m) << c.to;
    EXPECT_NE(m.error().message.find(c.expect), std::string::npos) << m.error().message;
    EXPECT_TRUE(m.error().message.starts_with("scale.yaml:")) << m.error().message;
  }
}

// Ranges at the ends of int64 load without overflowing (which looped until memory ran out).
TEST(ManifestTest, RangeAtTheEndsOfInt64) {
  // WAVES's domain replaced by `range`, and the heuristic's WAVES by its first value.
  auto with_waves = [](const std::string& range, const std::string& first) {
    std::string t = edited("WAVES: {range: [1, 4]}", "WAVES: " + range);
    t = edited(t, "WAVES: 1}", "WAVES: " + first + "}");
    return edited(t, "WAVES: 2}", "WAVES: " + first + "}");
  };
  auto m = parse_manifest(
      with_waves("{range: [9223372036854775800, 9223372036854775807]}", "9223372036854775807"),
      "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_EQ(m->params[2].values.size(), 8u);
  EXPECT_EQ(m->params[2].values.front(), 9223372036854775800);
  EXPECT_EQ(m->params[2].values.back(), 9223372036854775807);
  m = parse_manifest(with_waves("{range: [9223372036854775000, 9223372036854775807], step: 400}",
                                "9223372036854775400"),
                     "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(
      m->params[2].values,
      (std::vector<std::int64_t>{9223372036854775000, 9223372036854775400, 9223372036854775800}));
  const std::string text = with_waves("{range: [-9223372036854775808, 9223372036854775807]}", "0");
  m = parse_manifest(text, "scale.yaml");
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().message, "scale.yaml:" + std::to_string(line_of(text, "WAVES")) +
                                   ": params.WAVES.range: expected lo <= hi, step >= 1, at most "
                                   "4096 values");
}

// A range gives at most 4096 values (it accepted 4097).
TEST(ManifestTest, RangeGivesAtMost4096Values) {
  auto with_waves = [](const std::string& range) {
    return edited(edited("WAVES: {range: [1, 4]}", "WAVES: " + range), "WAVES: 2}", "WAVES: 1}");
  };
  auto m = parse_manifest(with_waves("{range: [1, 4096]}"), "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->params[2].values.size(), 4096u);
  m = parse_manifest(with_waves("{range: [1, 8191], step: 2}"), "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->params[2].values.size(), 4096u);
  for (const std::string range : {"{range: [0, 4096]}", "{range: [1, 8193], step: 2}"}) {
    m = parse_manifest(with_waves(range), "scale.yaml");
    ASSERT_FALSE(m) << range;
    EXPECT_NE(m.error().message.find("params.WAVES.range: expected lo <= hi, step >= 1, at most "
                                     "4096 values"),
              std::string::npos)
        << m.error().message;
  }
}

// Folding the heuristic rules' plans evaluates `(THREADS / 0) % -1` at load: NaN (the
// constraint fails), not a SIGFPE that killed the daemon on reload.
TEST(ManifestTest, RemainderOfInfinityLoads) {
  auto m = parse_manifest(edited("  - expr: n % VEC == 0", "  - expr: (THREADS / 0) % -1 == 0"),
                          "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
  for (const auto& plan : m->slots.rules) EXPECT_FALSE(plan.fixed_constraints_hold);
}

// A key given twice in any mapping is an error at the second (YAML keeps both, and the loader
// read only the first: a second `constraints:` block was silently ignored).
TEST(ManifestTest, RepeatedKeysAreRejected) {
  struct Case {
    std::string from, to, second, expect;
  };
  const std::vector<Case> cases = {
      {"template_args: [T_IN, T_OUT, THREADS, VEC]",
       "template_args: [T_IN, T_OUT, THREADS, VEC]\nconstraints:\n  - n > 1000000000",
       "constraints:\n  - n > 1", "constraints: repeated key (first at line 17)"},
      {"op: scale", "op: scale\nop: other", "op: other", "op: repeated key (first at line 2)"},
      {"WAVES: {range: [1, 4]}", "WAVES: {range: [1, 4], range: [1, 8]}", "WAVES: {range",
       "params.WAVES.range: repeated key"},
      {"  VEC: [1, 2, 4, 8]", "  VEC: [1, 2, 4, 8]\n  VEC: [1, 2]", "VEC: [1, 2]\n",
       "params.VEC: repeated key"},
      {"  elems_per_block: THREADS * VEC", "  elems_per_block: THREADS * VEC\n  elems_per_block: 1",
       "elems_per_block: 1", "derived.elems_per_block: repeated key"},
      {"block: [THREADS, 1, 1]", "block: [THREADS, 1, 1]\n  block: [64, 1, 1]", "block: [64",
       "launch.block: repeated key"},
      {"count: n, init", "count: n, count: 1, init", "{name: x", "args[0].count: repeated key"},
      {"{name: n, scalar: i32, value: n}", "{name: n, scalar: i32, value: n, value: 1}",
       "{name: n, scalar", "args[2].value: repeated key"},
      {"tolerance: {fp32: 1e-6, bf16: 1e-2}", "tolerance: {fp32: 1e-6, bf16: 1e-2, fp32: 1}",
       "tolerance:", "tolerance.fp32: repeated key"},
      {"metric: {bytes: n * (in_bytes + out_bytes)}", "metric: {bytes: n, bytes: 2 * n}",
       "metric:", "metric.bytes: repeated key"},
      {"params: {THREADS: 128, VEC: 1, WAVES: 1}",
       "params: {THREADS: 128, VEC: 1, WAVES: 1, VEC: 2}", "params: {THREADS: 128",
       "heuristic[0].params.VEC: repeated key"},
      {"  - when: n < 4096\n", "  - when: n < 4096\n    when: n < 8\n", "when: n < 8",
       "heuristic[0].when: repeated key"},
      {"  - expr: n % VEC == 0\n", "  - expr: n % VEC == 0\n    expr: n > 1\n", "expr: n > 1",
       "constraints[1].expr: repeated key"},
      {"  entry: ktune_scale_ref", "  entry: ktune_scale_ref\n  entry: other", "entry: other",
       "reference.entry: repeated key"},
      {"min_cc: 80", "min_cc: 80\nlayouts: {a: {X: 1, X: 2}}",
       "layouts:", "layouts.a.X: repeated key"},
      {"min_cc: 80", "min_cc: 80\nlayouts: {a: {X: 1}, a: {X: 2}}",
       "layouts:", "layouts.a: repeated key"},
  };
  for (const auto& c : cases) expect_refused_at(edited(c.from, c.to), c.second, c.expect);
}

// Every name means one thing: a dim, param, layout constant or derived value may not take another's
// name or a built-in one (`dims: [n, cc]` silently read the device's cc as the dim).
TEST(ManifestTest, NamesAreDefinedOnce) {
  struct Case {
    std::string from, to, second, expect;
  };
  const std::string layouts = "min_cc: 80\nlayouts: ";
  const std::vector<Case> cases = {
      {"dims: [n]", "dims: [n, cc]", "dims:", "dims[1]: 'cc' is a built-in name"},
      {"dims: [n]", "dims: [n, sm_count]", "dims:", "dims[1]: 'sm_count' is a built-in name"},
      {"dims: [n]", "dims: [in_bytes]", "dims:", "dims[0]: 'in_bytes' is a built-in name"},
      {"dims: [n]", "dims: [n, max_active_clusters]",
       "dims:", "dims[1]: 'max_active_clusters' is a built-in name"},
      {"dims: [n]", "dims: [n, n]", "dims:", "dims[1]: 'n' given twice"},
      {"dims: [n]", "dims: [n, VEC]", "dims:", "dims[1]: 'VEC' is also a param"},
      {"  VEC: [1, 2, 4, 8]", "  VEC: [1, 2, 4, 8]\n  max_threads_per_block: [1]",
       "max_threads_per_block: [1]",
       "params.max_threads_per_block: 'max_threads_per_block' is a "
       "built-in name"},
      {"  VEC: [1, 2, 4, 8]", "  VEC: [1, 2, 4, 8]\n  T_IN: [1]", "T_IN: [1]",
       "params.T_IN: 'T_IN' is a built-in name"},
      {"min_cc: 80", layouts + "{a: {n: 1}}", "layouts:", "layouts.a.n: 'n' is also a dim"},
      {"min_cc: 80", layouts + "{a: {X: 1}, b: {THREADS: 1}}",
       "layouts:", "layouts.b.THREADS: 'THREADS' is also a param"},
      {"min_cc: 80", layouts + "{a: {l2_bytes: 1}}",
       "layouts:", "layouts.a.l2_bytes: 'l2_bytes' is a built-in name"},
      {"min_cc: 80", layouts + "{a: {out_bytes: 1}}",
       "layouts:", "layouts.a.out_bytes: 'out_bytes' is a built-in name"},
      {"  elems_per_block: THREADS * VEC", "  elems_per_block: THREADS * VEC\n  T_OUT: 1",
       "T_OUT: 1", "derived.T_OUT: name already in use"},
      {"  elems_per_block: THREADS * VEC", "  elems_per_block: THREADS * VEC\n  cc: 1", "cc: 1",
       "derived.cc: name already in use"},
  };
  for (const auto& c : cases) expect_refused_at(edited(c.from, c.to), c.second, c.expect);
  // One constant in several layouts is one name, a value per layout.
  auto m =
      parse_manifest(edited("min_cc: 80", layouts + "{a: {X: 1, Y: 0}, b: {X: 0}}"), "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->slots.layouts.at("a")[0].first, m->slots.layouts.at("b")[0].first);
}

// A heuristic rule's `when` is tested before its params are bound, so it may not read them (it
// read 0 for the first rule, the previous rule's values after): THREADS * VEC <= n held for
// n = 100 and served THREADS 256.
TEST(ManifestTest, HeuristicWhenMayNotReadParamsOrDerivedValues) {
  for (const std::string when :
       {"THREADS * VEC <= n", "elems_per_block <= n", "n < 4096 && VEC > 0"}) {
    const std::string text = edited("  - when: n < 4096\n", "  - when: " + when + "\n");
    auto m = parse_manifest(text, "scale.yaml");
    ASSERT_FALSE(m) << when;
    EXPECT_EQ(m.error().message.find("scale.yaml:" + std::to_string(line_of(text, when)) +
                                     ": heuristic[0].when: may name the problem's dims"),
              0u)
        << m.error().message;
  }
  auto m = parse_manifest(edited("  - when: n < 4096\n", "  - when: n < sm_count * in_bytes\n"),
                          "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
}

// heuristic_values name what several rules compare once: bound with the problem before the rules
// are tried (in order, each may read the ones before), never a param or a derived value, and read
// by nothing but the rules (so outside the kernel hash: RegistryTest below); a value that cannot
// be evaluated (sm_count 0) is NaN, so a rule reading it does not hold.
TEST(ManifestTest, HeuristicValuesNameWhatTheRulesCompare) {
  const std::string values =
      "heuristic_values:\n  blocks: ceil_div(n, 256)\n  waves: ceil_div(blocks, sm_count)\n"
      "  small: waves <= 1\nheuristic:\n";
  const std::string text =
      edited(edited("heuristic:\n", values), "  - when: n < 4096\n", "  - when: small\n");
  auto m = parse_manifest(text, "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_EQ(m->heuristic_values.size(), 3u);
  const KernelTemplate t{*m, "", "", {}, "h", "h"};
  const DeviceLimits h100 = *DeviceLimits::for_arch("sm_90");  // 132 SMs
  // 132 blocks of 256 are one wave; 133 are two.
  EXPECT_EQ(heuristic_config(t, scale_problem(132 * 256), h100)->at("THREADS"), 128);
  EXPECT_EQ(heuristic_config(t, scale_problem(132 * 256 + 256), h100)->at("THREADS"), 256);
  // No SM count: waves = ceil_div(blocks, 0) is no number, so `small` does not hold.
  DeviceLimits no_sms = h100;
  no_sms.sm_count = 0;
  EXPECT_EQ(heuristic_config(t, scale_problem(256), no_sms)->at("THREADS"), 256);
}

TEST(ManifestTest, HeuristicValuesReadTheProblemAloneAndOnlyTheRulesReadThem) {
  const auto with = [](const std::string& body) {
    return edited("heuristic:\n", "heuristic_values:\n" + body + "heuristic:\n");
  };
  expect_refused_at(with("  per_thread: n / THREADS\n"), "n / THREADS",
                    "heuristic_values.per_thread: may name the problem's dims");
  expect_refused_at(with("  blocks: n / elems_per_block\n"), "n / elems_per_block",
                    "not params or derived values ('elems_per_block')");
  expect_refused_at(with("  n: 2 * n\n"), "  n: 2 * n", "heuristic_values.n: name already in use");
  expect_refused_at(with("  sm_count: 1\n"), "  sm_count: 1", "name already in use");
  expect_refused_at(with("  a: b\n  b: 1\n"), "  a: b", "'b'");  // in order: b is not yet known
  expect_refused_at(with("  g: max_active_clusters\n"), "  g: max_active_clusters", "launch.grid");
  // One that nothing reads is refused at its line (a rule edited away from it, or misspelt).
  expect_refused_at(edited(with("  big: n > 4096\n  bigger: n > 8192\n"), "  - when: n < 4096\n",
                           "  - when: big\n"),
                    "  bigger: n > 8192", "heuristic_values.bigger: read by no rule's when");
  // A constraint is part of the kernel's space, not of the rules: it cannot read one.
  const std::string text =
      edited(with("  big: n > 4096\n"), "constraints:\n", "constraints:\n  - big\n");
  expect_refused_at(text, "  - big", "'big'");
}

// A workspace says whether it needs zeroing (`zero: kept`, the default: zeroed once, left zeroed by
// the kernel) or is scratch (`zero: none`); only workspaces say it, and only with those words.
TEST(ManifestTest, WorkspaceZeroing) {
  const std::string ws = "  - {name: y, buffer: out, dtype: out, count: n}\n";
  auto with = [&](const std::string& arg) { return edited(ws, ws + arg); };
  auto m = parse_manifest(with("  - {name: t, buffer: workspace, dtype: i32, count: 1}\n"),
                          "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->args[2].zero, WorkspaceZero::kept);
  m = parse_manifest(with("  - {name: t, buffer: workspace, dtype: fp32, count: n, zero: none}\n"),
                     "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->args[2].zero, WorkspaceZero::none);
  auto inst =
      instantiate(KernelTemplate{*m, "", "", {}, "h", "h"}, scale_problem(4096),
                  *DeviceLimits::for_arch("sm_90"), {{"THREADS", 128}, {"VEC", 1}, {"WAVES", 1}});
  ASSERT_TRUE(inst) << inst.error().message;
  EXPECT_EQ(inst->args[2].zero, WorkspaceZero::none);
  m = parse_manifest(with("  - {name: t, buffer: workspace, dtype: i32, count: 1, zero: maybe}\n"),
                     "scale.yaml");
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message.find("expected kept or none"), std::string::npos)
      << m.error().message;
  m = parse_manifest(edited("{name: y, buffer: out, dtype: out, count: n}",
                            "{name: y, buffer: out, dtype: out, count: n, zero: none}"),
                     "scale.yaml");
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message.find("only a workspace"), std::string::npos) << m.error().message;
}

TEST(ManifestTest, ConstraintThatPrunesEverythingIsNamed) {
  const std::string text =
      edited("    why: vector width must divide n",
             "    why: vector width must divide n\n  - expr: THREADS > 4096\n    why: impossible");
  auto dir =
      std::filesystem::temp_directory_path() / ("ktune-manifest-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "scale");
  std::filesystem::copy_file(k_scale_dir + "/scale/scale.cuh", dir / "scale/scale.cuh",
                             std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "scale/scale.yaml") << std::regex_replace(
      text, std::regex(R"(\.\./\.\./\.\./\.\./)"), std::string(KTUNE_SOURCE_DIR) + "/");
  auto t = TemplateRegistry::load_template((dir / "scale/scale.yaml").string());
  ASSERT_TRUE(t) << t.error().message;
  auto space = SearchSpace::build(**t, scale_problem(1 << 20), DeviceLimits{});
  ASSERT_FALSE(space);
  const std::string msg = space.error().message;
  EXPECT_NE(msg.find((dir / "scale/scale.yaml").string() + ":" +
                     std::to_string(line_of(text, "THREADS > 4096"))),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("prune every config"), std::string::npos) << msg;
  EXPECT_NE(msg.find("impossible"), std::string::npos) << msg;
  std::filesystem::remove_all(dir);
}

// A metric or scalar argument that evaluates to a non-finite number (a division by zero) makes
// instantiate fail, naming it: NaN or inf would reach the worker's request and the winner's
// throughput as JSON null.
TEST(SpaceTest, NonFiniteMetricOrScalarIsRefusedByName) {
  auto dir =
      std::filesystem::temp_directory_path() / ("ktune-nonfinite-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "scale");
  std::filesystem::copy_file(k_scale_dir + "/scale/scale.cuh", dir / "scale/scale.cuh",
                             std::filesystem::copy_options::overwrite_existing);
  const Params p{{"THREADS", 256}, {"VEC", 4}, {"WAVES", 2}};
  for (auto [from, to, named] :
       {std::tuple{"metric: {bytes: n * (in_bytes + out_bytes)}",
                   "metric: {bytes: n / (VEC - VEC)}", "metric: evaluates to inf"},
        std::tuple{"{name: a, scalar: f32, value: 1.5}",
                   "{name: a, scalar: f32, value: 0 / (n - n)}", "args.a.value: evaluates to"}}) {
    std::ofstream(dir / "scale/scale.yaml")
        << std::regex_replace(edited(from, to), std::regex(R"(\.\./\.\./\.\./\.\./)"),
                              std::string(KTUNE_SOURCE_DIR) + "/");
    auto t = TemplateRegistry::load_template((dir / "scale/scale.yaml").string());
    ASSERT_TRUE(t) << t.error().message;
    auto inst = instantiate(**t, scale_problem(1 << 20), DeviceLimits{}, p);
    ASSERT_FALSE(inst) << to;
    EXPECT_NE(inst.error().message.find(named), std::string::npos) << inst.error().message;
  }
  std::filesystem::remove_all(dir);
}

TEST(SpaceTest, EnumeratesAndReportsPruning) {
  auto t = TemplateRegistry::load_template(k_scale);
  ASSERT_TRUE(t) << t.error().message;
  // n = 1004: VEC 8 does not divide; THREADS 2048 exceeds the block limit.
  auto space = SearchSpace::build(**t, scale_problem(1004), DeviceLimits{});
  ASSERT_TRUE(space) << space.error().message;
  const auto& r = space->report();
  EXPECT_EQ(r.total, 96);
  EXPECT_EQ(r.valid, 5 * 3 * 4);  // THREADS 64..1024, VEC 1,2,4, WAVES 1..4
  EXPECT_EQ(space->configs().size(), 60u);
  ASSERT_EQ(r.pruned.size(), 2u);
  EXPECT_EQ(r.pruned[0].why, "vector width must divide n");
  EXPECT_EQ(r.pruned[0].configs, 5 * 1 * 4);
  EXPECT_EQ(r.pruned[1].why, "block too large for the device");
  EXPECT_EQ(r.pruned[1].configs, 1 * 4 * 4);
}

TEST(SpaceTest, InstantiateMakesNameLaunchAndArgs) {
  auto t = TemplateRegistry::load_template(k_scale);
  ASSERT_TRUE(t);
  const Params p{{"THREADS", 256}, {"VEC", 4}, {"WAVES", 2}};
  auto inst = instantiate(**t, scale_problem(1 << 20, "bf16"), DeviceLimits{}, p);
  ASSERT_TRUE(inst) << inst.error().message;
  EXPECT_EQ(inst->name_expression, "ktune_scale<ktune_bf16, ktune_bf16, 256, 4>");
  EXPECT_EQ(inst->launch.grid[0], 132u * 2);
  EXPECT_EQ(inst->launch.block[0], 256u);
  ASSERT_EQ(inst->args.size(), 4u);
  EXPECT_EQ(inst->args[0].dtype, "bf16");
  EXPECT_EQ(inst->args[0].count, 1 << 20);
  EXPECT_EQ(inst->args[0].init.a, -2);
  EXPECT_FALSE(inst->args[2].is_buffer());
  EXPECT_EQ(inst->args[3].value, 1.5);
  EXPECT_EQ(inst->metric, double(1 << 20) * 4);

  auto bad = instantiate(**t, scale_problem(1001), DeviceLimits{}, p);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("vector width must divide n"), std::string::npos);
  EXPECT_FALSE(instantiate(**t, scale_problem(1024), DeviceLimits{}, {{"THREADS", 256}}));

  auto ref = reference_instance(**t, scale_problem(1000), DeviceLimits{});
  ASSERT_TRUE(ref) << ref.error().message;
  EXPECT_EQ(ref->name_expression, "ktune_scale_ref<float, float>");
  EXPECT_EQ(ref->launch.grid[0], 4u);
}

// k_slices describes a config (its units summed into one output) and never fails one: a value
// that is not a whole number from 1 to 1e9 reads as 1, as does a manifest without it.
TEST(SpaceTest, KSlicesIsEvaluatedPerConfigAndReadsAsOneWhereItCannotCount) {
  const Params p{{"THREADS", 256}, {"VEC", 4}, {"WAVES", 3}};
  const Problem n = scale_problem(1 << 20);
  auto slices = [&](const std::string& expr) -> std::int64_t {
    auto m = parse_manifest(
        expr.empty() ? scale_text() : edited("min_cc: 80", "min_cc: 80\nk_slices: " + expr),
        k_scale);
    EXPECT_TRUE(m) << m.error().message;
    if (!m) return -1;
    KernelTemplate t;
    t.manifest = std::move(*m);
    auto inst = instantiate(t, n, DeviceLimits{}, p);
    EXPECT_TRUE(inst) << expr << ": " << inst.error().message;
    return inst ? inst->k_slices : -1;
  };
  EXPECT_EQ(slices(""), 1);
  EXPECT_EQ(slices("WAVES"), 3);
  EXPECT_EQ(slices("n / 4096 - WAVES"), 253) << "dims and params";
  EXPECT_EQ(slices("WAVES / 2"), 1) << "1.5";
  EXPECT_EQ(slices("WAVES - 3"), 1) << "0";
  EXPECT_EQ(slices("WAVES % 0"), 1) << "NaN";
}

TEST(SpaceTest, HeuristicPicksFirstMatchingValidRule) {
  auto t = TemplateRegistry::load_template(k_scale);
  ASSERT_TRUE(t);
  EXPECT_EQ(heuristic_config(**t, scale_problem(100), DeviceLimits{})->at("THREADS"), 128);
  EXPECT_EQ(heuristic_config(**t, scale_problem(1 << 20), DeviceLimits{})->at("VEC"), 4);
  // n = 4098: the default rule's VEC 4 does not divide; falls back to the first valid config.
  auto p = heuristic_config(**t, scale_problem(4098), DeviceLimits{});
  ASSERT_TRUE(p);
  EXPECT_TRUE(instantiate(**t, scale_problem(4098), DeviceLimits{}, *p));
}

// Every rule's config that fits, whatever its `when`, in manifest order and once each.
TEST(SpaceTest, RuleConfigsListEveryRuleThatFitsWhateverItsWhen) {
  auto t = TemplateRegistry::load_template(k_scale);
  ASSERT_TRUE(t);
  const Params small{{"THREADS", 128}, {"VEC", 1}, {"WAVES", 1}};
  const Params wide{{"THREADS", 256}, {"VEC", 4}, {"WAVES", 2}};
  EXPECT_EQ(rule_configs(**t, scale_problem(102), DeviceLimits{}), (std::vector<Params>{small}))
      << "n = 102: VEC 4 does not divide it, whatever the rule's when";
  EXPECT_EQ(rule_configs(**t, scale_problem(1 << 20), DeviceLimits{}),
            (std::vector<Params>{small, wide}))
      << "the first rule's when does not hold at n = 2^20; its config still fits";
  auto twin =
      parse_manifest(edited("  - params: {THREADS: 256, VEC: 4, WAVES: 2}\n",
                            "  - when: n > 8\n    params: {THREADS: 128, VEC: 1, WAVES: 1}\n"
                            "  - params: {THREADS: 256, VEC: 4, WAVES: 2}\n"),
                     "scale.yaml");
  ASSERT_TRUE(twin) << twin.error().message;
  EXPECT_EQ(rule_configs(KernelTemplate{*twin, "", "", {}, "h", "h"}, scale_problem(1 << 20),
                         DeviceLimits{}),
            (std::vector<Params>{small, wide}))
      << "a config two rules share is listed once";
  Problem other = scale_problem(1 << 20);
  other.dtype = "no-such-dtype";
  EXPECT_TRUE(rule_configs(**t, other, DeviceLimits{}).empty()) << "an unsupported problem";
}

// What instantiate() says when launch geometry or an argument evaluates out of range: the
// expression's place, its value and the range (the text is built only on failure).
TEST(SpaceTest, InstantiateNamesTheLaunchOrArgumentOutOfRange) {
  const Params p{{"THREADS", 256}, {"VEC", 4}, {"WAVES", 2}};
  auto m =
      parse_manifest(edited("block: [THREADS, 1, 1]", "block: [THREADS * 8, 1, 1]"), "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
  auto inst =
      instantiate(KernelTemplate{*m, "", "", {}, "h", "h"}, scale_problem(4096), DeviceLimits{}, p);
  ASSERT_FALSE(inst);
  EXPECT_EQ(inst.error().message, "scale.yaml: launch.block[0]: 2048 is out of range 1..1024");
  m = parse_manifest(edited("grid: [min(", "grid: [0.5 + min("), "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
  inst =
      instantiate(KernelTemplate{*m, "", "", {}, "h", "h"}, scale_problem(4096), DeviceLimits{}, p);
  ASSERT_FALSE(inst);
  EXPECT_EQ(inst.error().message, "scale.yaml: launch.grid[0]: expected an integer, got 4.500000");
  m = parse_manifest(edited("{name: y, buffer: out, dtype: out, count: n}",
                            "{name: y, buffer: out, dtype: out, count: n - 5000}"),
                     "scale.yaml");
  ASSERT_TRUE(m) << m.error().message;
  inst =
      instantiate(KernelTemplate{*m, "", "", {}, "h", "h"}, scale_problem(4096), DeviceLimits{}, p);
  ASSERT_FALSE(inst);
  EXPECT_EQ(inst.error().message, "args.y.count < 1");
}

// A copy of the scale template in a directory of its own, with extra files beside it.
class ScaleCopy {
 public:
  ScaleCopy()
      : m_dir(std::filesystem::temp_directory_path() /
              ("ktune-includes-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(m_dir / "scale");
  }
  ~ScaleCopy() { std::filesystem::remove_all(m_dir); }

  void write(const std::string& name, const std::string& text) const {
    std::ofstream(m_dir / "scale" / name) << text;
  }
  // Writes the manifest (`headers` in place of the scale's, source scale.cuh) and the source
  // (`source_head`, then the scale's source) and loads the template.
  Result<std::unique_ptr<KernelTemplate>> load(const std::string& headers,
                                               const std::string& source_head) const {
    write("scale.yaml", edited("headers: [../../../../templates/common/ktune_common.cuh]",
                               "headers: [" + headers + "]"));
    std::ifstream in(k_scale_dir + "/scale/scale.cuh");
    std::stringstream ss;
    ss << in.rdbuf();
    write("scale.cuh", source_head + ss.str());
    return TemplateRegistry::load_template(path());
  }
  std::string path() const { return (m_dir / "scale/scale.yaml").string(); }
  std::string common() const {
    return std::string(KTUNE_SOURCE_DIR) + "/templates/common/ktune_common.cuh";
  }

 private:
  std::filesystem::path m_dir;
};

// A quoted #include must name a header the manifest lists: NVRTC would read any other from the
// daemon's working directory (or an -I path), outside the template's hash, so editing it changed
// no cubin key and no stored winner.
TEST(RegistryTest, QuotedIncludesMustBeListedHeaders) {
  const ScaleCopy copy;
  copy.write("extra.cuh", "#define KTUNE_EXTRA 1\n");
  auto t = copy.load(copy.common(), "// extra\n #  include \"extra.cuh\"  // unlisted\n");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().message, copy.path().substr(0, copy.path().size() - 4) + "cuh:2: #include " +
                                   "\"extra.cuh\" is not one of the headers " + copy.path() +
                                   " lists (NVRTC would read it from outside the template, "
                                   "unhashed)");
  // Listed, it is hashed: editing it changes the template's hash.
  t = copy.load(copy.common() + ", extra.cuh", "#include \"extra.cuh\"\n");
  ASSERT_TRUE(t) << t.error().message;
  const std::string hash = (*t)->hash;
  copy.write("extra.cuh", "#define KTUNE_EXTRA 2\n");
  t = TemplateRegistry::load_template(copy.path());
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_NE((*t)->hash, hash);
  // A listed header's own includes are checked too.
  copy.write("extra.cuh", "#pragma once\n#include \"more.cuh\"\n");
  copy.write("more.cuh", "\n");
  t = TemplateRegistry::load_template(copy.path());
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message.find("extra.cuh:2: #include \"more.cuh\" is not one of the headers"),
            std::string::npos)
      << t.error().message;
  // NVRTC's own headers and commented-out lines are fine; a computed include is not.
  EXPECT_TRUE(copy.load(copy.common(), "#include <cuda_fp16.h>\n// #include \"extra.cuh\"\n"));
  t = copy.load(copy.common(), "#define H \"extra.cuh\"\n#include H\n");
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message.find("scale.cuh:2: only #include \"header\""), std::string::npos)
      << t.error().message;
  // Two listed headers of one file name: NVRTC gets headers by file name.
  copy.write("ktune_common.cuh", "\n");
  t = copy.load(copy.common() + ", ktune_common.cuh", "");
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message.find("headers: two headers named ktune_common.cuh"),
            std::string::npos)
      << t.error().message;
}

// The kernel hash covers what a config compiles to and which configs are valid, not the rules
// that choose one or the words that describe it; the content hash covers every byte, the way the
// one hash did before 2026-12-06 (records written then name it).
TEST(RegistryTest, TheKernelHashLeavesOutHeuristicsDescriptionAndLayout) {
  const ScaleCopy copy;
  auto load = [&](const std::string& manifest) {
    copy.write("scale.yaml", manifest);
    auto t = TemplateRegistry::load_template(copy.path());
    EXPECT_TRUE(t) << t.error().message;
    return t ? std::pair{(*t)->hash, (*t)->content_hash} : std::pair<std::string, std::string>{};
  };
  const std::string base = edited("headers: [../../../../templates/common/ktune_common.cuh]",
                                  "headers: [" + copy.common() + "]");
  copy.write("scale.cuh", read_all(k_scale_dir + "/scale/scale.cuh"));
  const auto [kernel, content] = load(base);
  // The content hash is the hash records carried before: every part with its length.
  auto part = [](const std::string& s) { return std::to_string(s.size()) + ":" + s; };
  EXPECT_EQ(content, xxh3_hex(part(base) + part(read_all(k_scale_dir + "/scale/scale.cuh")) +
                              part("ktune_common.cuh") + part(read_all(copy.common()))));
  EXPECT_NE(kernel, content);
  for (const auto& [what, manifest] : std::vector<std::pair<std::string, std::string>>{
           {"a heuristic rule",
            edited(base, "{THREADS: 128, VEC: 1, WAVES: 1}", "{THREADS: 64, VEC: 2, WAVES: 1}")},
           {"the heuristic's order",
            edited(base, "min_cc: 80", "min_cc: 80\nheuristic_rank: n >= 4096")},
           {"the values the rules name",
            edited(
                edited(base, "heuristic:\n", "heuristic_values:\n  small: n < 4096\nheuristic:\n"),
                "  - when: n < 4096\n", "  - when: small\n")},
           {"the k-slices lookups tell tiles from units by",
            edited(base, "min_cc: 80", "min_cc: 80\nk_slices: WAVES")},
           {"the description", edited(base, "(test template)", "(edited)")},
           {"a comment and the layout",
            edited(base, "dims: [n]", "# the one dim\ndims:\n  - n   # elements")}}) {
    const auto [k, c] = load(manifest);
    EXPECT_EQ(k, kernel) << what;
    EXPECT_NE(c, content) << what;
  }
  for (const auto& [what, manifest] : std::vector<std::pair<std::string, std::string>>{
           {"a param's values", edited(base, "VEC: [1, 2, 4, 8]", "VEC: [1, 2, 4]")},
           {"a constraint", edited(base, "n % VEC == 0", "n % (2 * VEC) == 0")},
           {"the launch", edited(base, "smem: 0\nargs", "smem: 16\nargs")},
           {"an argument's value", edited(base, "value: 1.5", "value: 2.5")},
           {"a quoted scalar for a plain one", edited(base, "version: 1", "version: \"1\"")},
           {"the version", edited(base, "version: 1", "version: 2")}}) {
    const auto [k, c] = load(manifest);
    EXPECT_NE(k, kernel) << what;
    EXPECT_NE(c, content) << what;
  }
  // Hashes of earlier versions of the kernel: outside the kernel hash, and names of this kernel.
  {
    const auto [k, c] =
        load(edited(base, "min_cc: 80", "min_cc: 80\nprevious_hashes: [" + content + "]"));
    EXPECT_EQ(k, kernel);
    auto t = TemplateRegistry::load_template(copy.path());
    ASSERT_TRUE(t);
    EXPECT_TRUE((*t)->same_kernel(content)) << "the listed hash";
    EXPECT_TRUE((*t)->same_kernel(kernel));
    EXPECT_TRUE((*t)->same_kernel(c));
    EXPECT_FALSE((*t)->same_kernel("0123456789abcdef"));
    EXPECT_EQ((*t)->known_hashes(), (std::vector<std::string>{kernel, c, content}));
    copy.write("scale.yaml", edited(base, "min_cc: 80", "min_cc: 80\nprevious_hashes: [ABC]"));
    t = TemplateRegistry::load_template(copy.path());
    ASSERT_FALSE(t);
    EXPECT_NE(t.error().message.find("previous_hashes[0]: 'ABC': expected 16 lowercase hex digits"),
              std::string::npos)
        << t.error().message;
  }
  // The source is in both.
  copy.write("scale.cuh", read_all(k_scale_dir + "/scale/scale.cuh") + "\n// edited\n");
  const auto [k, c] = load(base);
  EXPECT_NE(k, kernel);
  EXPECT_NE(c, content);
}

// Include paths and forced includes in nvrtc_options would reach unhashed headers too.
TEST(ManifestTest, NvrtcOptionsMayNotAddIncludePaths) {
  for (const std::string option :
       {"-I/tmp", "-I", "--include-path=/tmp", "-include", "--pre-include=x.h"}) {
    const std::string text =
        edited("min_cc: 80", "min_cc: 80\nnvrtc_options: [-lineinfo, \"" + option + "\"]");
    auto m = parse_manifest(text, "scale.yaml");
    ASSERT_FALSE(m) << option;
    EXPECT_EQ(
        m.error().message.find("scale.yaml:" + std::to_string(line_of(text, "nvrtc_options")) +
                               ": nvrtc_options[1]: '" + option + "': no include paths"),
        0u)
        << m.error().message;
  }
  EXPECT_TRUE(parse_manifest(
      edited("min_cc: 80", "min_cc: 80\nnvrtc_options: [-lineinfo, --use_fast_math]"),
      "scale.yaml"));
}

TEST(RegistryTest, LoadsDirectoriesAndReportsBadOnes) {
  auto reg = TemplateRegistry::load({k_scale_dir, "/nonexistent/ktune"});
  ASSERT_EQ(reg.all().size(), 3u);  // fault, scale and tma_copy
  EXPECT_EQ(reg.all()[1]->name(), "scale");
  EXPECT_EQ(reg.all()[1]->hash.size(), 16u);
  ASSERT_EQ(reg.errors().size(), 1u);
  EXPECT_NE(reg.errors()[0].message.find("/nonexistent/ktune"), std::string::npos);
  EXPECT_EQ(reg.for_problem(scale_problem(64), 90).size(), 1u);
  EXPECT_TRUE(reg.for_problem(scale_problem(64), 70).empty());
  EXPECT_EQ(reg.ops(), (std::vector<std::string>{"fault", "scale", "tma_copy"}));
}

}  // namespace
}  // namespace ktune
