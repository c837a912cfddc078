// The kernel op and launch descriptions, through the dispatcher (no sockets, no GPU): cubins that
// are ELF images for the asked arch holding the lowered entry, one compile however many ask at
// once, clear refusals, and launch descriptions that say what the manifests say.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "client/launch.h"
#include "daemon/kernels.h"
#include "daemon/launch.h"
#include "templates/space.h"
#include "tests/fakes/daemon_parts.h"

namespace ktune {
namespace {

using protocol::Json;

const std::string k_h200 = "nvidia-h200.sm90.132sm.140gib";
const std::string k_a100 = "nvidia-a100-sxm4-80gb.sm80.108sm.80gib";

// ---- an ELF64 reader of its own, so the test does not check client/cubin.cc with itself ----

struct Elf {
  std::uint16_t machine = 0;
  std::uint8_t abi_version = 0;
  std::uint32_t flags = 0;
  std::vector<std::string> symbols;  // .symtab names
};

template <typename T>
T at(const std::string& b, size_t off) {
  T v{};
  if (off + sizeof(T) <= b.size()) std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

std::optional<Elf> read_elf64(const std::string& b) {
  if (b.size() < 64 ||
      b.compare(0, 4,
                "\x7f"
                "ELF") != 0 ||
      b[4] != 2 || b[5] != 1)
    return std::nullopt;
  Elf e;
  e.abi_version = std::uint8_t(b[8]);
  e.machine = at<std::uint16_t>(b, 18);
  e.flags = at<std::uint32_t>(b, 48);
  const auto shoff = at<std::uint64_t>(b, 40);
  const auto shentsize = at<std::uint16_t>(b, 58), shnum = at<std::uint16_t>(b, 60);
  auto sh = [&](size_t i) { return shoff + i * shentsize; };
  for (size_t i = 0; i < shnum; ++i) {
    if (at<std::uint32_t>(b, sh(i) + 4) != 2) continue;  // SHT_SYMTAB
    const auto off = at<std::uint64_t>(b, sh(i) + 24), size = at<std::uint64_t>(b, sh(i) + 32);
    const auto link = at<std::uint32_t>(b, sh(i) + 40);
    const auto entsize = at<std::uint64_t>(b, sh(i) + 56);
    const auto strtab = at<std::uint64_t>(b, sh(link) + 24);
    for (auto s = off; entsize >= 24 && s + entsize <= off + size && s + entsize <= b.size();
         s += entsize)
      if (const auto name = at<std::uint32_t>(b, s); name != 0 && strtab + name < b.size())
        e.symbols.emplace_back(b.c_str() + strtab + name);
  }
  return e;
}

// The SM an NVIDIA cubin's e_flags name (ELF ABI 8+: bits 8..15; before: bits 0..7).
int elf_sm(const Elf& e) {
  return e.abi_version >= 8 ? int(e.flags >> 8 & 0xff) : int(e.flags & 0xff);
}

// ---- fixture -------------------------------------------------------------------------------

// A compile backend the test completes by hand: proves who waits for what, without timing.
struct GatedCompiler {
  struct Pending {
    CompileRequest request;
    std::function<void(CompileResult)> done;
  };
  std::mutex mutex;
  std::vector<Pending> pending;
  KernelService::CompileFn fn() {
    return [this](CompileRequest r, std::function<void(CompileResult)> done) {
      std::lock_guard lock(mutex);
      pending.push_back({std::move(r), std::move(done)});
    };
  }
  size_t size() {
    std::lock_guard lock(mutex);
    return pending.size();
  }
};

const Json k_softmax = {
    {"op", "softmax"}, {"dtype", "bf16"}, {"dims", {{"rows", 64}, {"cols", 4096}}}};

class KernelOpTest : public ::testing::Test {
 protected:
  KernelOpTest() : m_templates(TemplateRegistry::load({builtin_template_dir()})) {
    NodeIdentity node;
    node.driver = "none";
    node.nvrtc = Compiler::nvrtc_version();
    node.node_id = "test-node";
    node.gpu_error = "no GPU in tests";
    m_parts = std::make_unique<testing::DaemonParts>(default_config(), m_templates, node);
    m_compiler =
        std::make_unique<Compiler>(CompilerOptions{.threads = 2, .cache = &m_parts->store});
  }
  ~KernelOpTest() override {
    if (m_kernels) m_kernels->stop();
  }

  void serve(KernelService::CompileFn fn) {
    m_kernels = std::make_unique<KernelService>(m_parts->template_set, m_parts->lookups,
                                                &m_parts->store, std::move(fn));
    m_parts->ctx.kernels = m_kernels.get();
  }
  void serve_with_compiler() {
    serve([this](CompileRequest r, std::function<void(CompileResult)> done) {
      m_compiler->submit(std::move(r), std::move(done));
    });
  }

  // The template's heuristic config for the problem on the device class, as JSON.
  Json heuristic(const std::string& tmpl, const Problem& p, const std::string& arch, int sms) {
    DeviceLimits limits = *DeviceLimits::for_arch(arch);
    limits.sm_count = sms;
    auto h = heuristic_config(*m_templates.find(tmpl), p, limits);
    EXPECT_TRUE(h) << h.error().message;
    Json j = Json::object();
    if (h)
      for (const auto& [n, v] : *h) j[n] = v;
    return j;
  }
  static std::string line(const std::string& device, const Json& problem, const std::string& tmpl,
                          const Json& params, const std::string& extra = "") {
    return R"({"v":2,"id":5,"op":"kernel","device":")" + device + R"(","problem":)" +
           problem.dump() + R"(,"template":")" + tmpl + R"(","params":)" + params.dump() + extra +
           "}";
  }
  Json call(const std::string& l) { return Json::parse(m_parts->dispatcher.handle(l).line); }
  // The first entry of a v2 lookup of k_softmax on the H200.
  Json softmax_entry() {
    const Json looked = call(R"({"v":2,"id":1,"op":"lookup","device":")" + k_h200 +
                             R"(","problem":)" + k_softmax.dump() + "}");
    EXPECT_TRUE(looked["ok"].get<bool>()) << looked.dump();
    return looked["result"]["entries"][0];
  }
  // Op kernel for k_softmax with `entry` sent back as is; each reply line is added to `replies`.
  void kernel_for(const Json& entry, std::vector<Json>& replies) {
    m_parts->dispatcher.handle(R"({"v":1,"id":2,"op":"kernel","device":")" + k_h200 +
                                   R"(","problem":)" + k_softmax.dump() + R"(,"entry":)" +
                                   entry.dump() + "}",
                               "", Peer{}, [&](std::string l, bool) {
                                 replies.push_back(Json::parse(l));
                                 return true;
                               });
  }

  const TemplateRegistry m_templates;
  std::unique_ptr<testing::DaemonParts> m_parts;
  std::unique_ptr<Compiler> m_compiler;
  std::unique_ptr<KernelService> m_kernels;
};

const Json k_gemm_512 = {{"op", "gemm"},
                         {"dtype", "bf16"},
                         {"layout", "rc"},
                         {"dims", {{"M", 512}, {"N", 512}, {"K", 512}}}};
const Problem k_gemm_512_problem{
    "gemm", "bf16", "bf16", "rc", {{"M", 512}, {"N", 512}, {"K", 512}}};
const Problem k_softmax_problem{"softmax", "bf16", "bf16", "", {{"rows", 64}, {"cols", 4096}}};

// ---- the kernel op -------------------------------------------------------------------------

// sm_80, sm_90 and sm_90a cubins: ELF64 for EM_CUDA, the asked SM in the header, the lowered
// entry in .symtab, base64 that decodes to exactly cubin_bytes; a second ask comes from the
// store's cubins family, byte for byte, without compiling again.
TEST_F(KernelOpTest, CubinIsAnElfForTheAskedArchHoldingTheLoweredEntry) {
  serve_with_compiler();
  // The cheapest config of each kind to compile (a gemm_sm90 heuristic for a small problem: one
  // consumer warpgroup, 64x128x64), so the test spends seconds, not a minute, in NVRTC.
  const Json gemm_small = {{"op", "gemm"},
                           {"dtype", "bf16"},
                           {"layout", "rc"},
                           {"dims", {{"M", 128}, {"N", 128}, {"K", 64}}}};
  const Problem gemm_small_problem{
      "gemm", "bf16", "bf16", "rc", {{"M", 128}, {"N", 128}, {"K", 64}}};
  struct Case {
    std::string device, tmpl;
    Json problem, params;
    std::string arch;
    int sm;
  };
  const std::vector<Case> cases = {
      {k_a100, "softmax", k_softmax, heuristic("softmax", k_softmax_problem, "sm_80", 108), "sm_80",
       80},
      {k_h200, "softmax", k_softmax, heuristic("softmax", k_softmax_problem, "sm_90", 132), "sm_90",
       90},
      {k_h200, "gemm_sm90", gemm_small, heuristic("gemm_sm90", gemm_small_problem, "sm_90", 132),
       "sm_90a", 90},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.tmpl + " " + c.arch);
    const Json r = call(line(c.device, c.problem, c.tmpl, c.params));
    ASSERT_TRUE(r["ok"].get<bool>()) << r.dump().substr(0, 2000);
    EXPECT_EQ(r["v"], 2);
    auto image = protocol::kernel_image_from_json(r["result"]);
    ASSERT_TRUE(image) << image.error().message;
    EXPECT_EQ(image->launch.arch, c.arch);
    EXPECT_EQ(image->source, "compiled");
    EXPECT_EQ(image->cubin.size(), r["result"]["cubin_bytes"].get<size_t>());
    EXPECT_GT(image->registers, 0);
    auto elf = read_elf64(image->cubin);
    ASSERT_TRUE(elf) << "not an ELF64 little-endian image";
    EXPECT_EQ(elf->machine, 190) << "EM_CUDA";
    EXPECT_EQ(elf_sm(*elf), c.sm);
    EXPECT_NE(std::find(elf->symbols.begin(), elf->symbols.end(), image->lowered_name),
              elf->symbols.end())
        << image->lowered_name << " not in .symtab";
    EXPECT_TRUE(image->lowered_name.starts_with("_Z")) << "a mangled template instance";

    const Json again = call(line(c.device, c.problem, c.tmpl, c.params));
    auto cached = protocol::kernel_image_from_json(again["result"]);
    ASSERT_TRUE(cached) << again.dump().substr(0, 500);
    EXPECT_EQ(cached->source, "cache");
    EXPECT_EQ(cached->cubin, image->cubin);
    EXPECT_EQ(cached->launch.cubin_id, image->launch.cubin_id);
  }
  EXPECT_EQ(m_compiler->compiles(), cases.size()) << "the repeats came from the cubins family";
  const auto stats = m_kernels->stats();
  EXPECT_EQ(stats.cache, cases.size());
  const std::string metrics = m_parts->dispatcher.metrics_gauges();
  EXPECT_NE(metrics.find("ktune_kernel_requests_total{source=\"cache\"} 3"), std::string::npos)
      << metrics;
}

// Eight requests for one cubin while it compiles — seven for the same shape, one for another
// shape of the same config — start one compile, park no thread (the handler returns at once),
// and are all answered when it ends, each with its own launch description.
TEST_F(KernelOpTest, ConcurrentRequestsForOneCubinShareOneCompile) {
  GatedCompiler gate;
  serve(gate.fn());
  const Json params = heuristic("softmax", k_softmax_problem, "sm_90", 132);
  Json other_shape = k_softmax;
  other_shape["dims"]["rows"] = 4096;
  std::mutex mutex;
  std::vector<Json> replies;
  for (int i = 0; i < 8; ++i)
    m_parts->dispatcher.handle(line(k_h200, i == 7 ? other_shape : k_softmax, "softmax", params),
                               "", Peer{}, [&](std::string l, bool last) {
                                 EXPECT_TRUE(last);
                                 std::lock_guard lock(mutex);
                                 replies.push_back(Json::parse(l));
                                 return true;
                               });
  ASSERT_EQ(gate.size(), 1u) << "one compile for eight requests";
  EXPECT_TRUE(replies.empty()) << "nothing answers before the compile ends";
  EXPECT_EQ(m_kernels->stats().shared, 7u);

  gate.pending[0].done(m_compiler->compile(gate.pending[0].request));
  ASSERT_EQ(replies.size(), 8u);
  std::map<std::string, int> sources;
  std::set<std::vector<std::uint32_t>> grids;
  for (const auto& r : replies) {
    ASSERT_TRUE(r["ok"].get<bool>()) << r.dump().substr(0, 500);
    sources[r["result"]["source"]]++;
    EXPECT_EQ(r["result"]["cubin"], replies[0]["result"]["cubin"]);
    grids.insert(r["result"]["launch"]["grid"].get<std::vector<std::uint32_t>>());
  }
  EXPECT_EQ(sources["compiled"], 1);
  EXPECT_EQ(sources["shared"], 7);
  EXPECT_EQ(grids.size(), 2u) << "each shape gets its own launch geometry";
  EXPECT_EQ(m_compiler->compiles(), 1u);
}

// The same with the daemon's real compiler and six threads asking at once: one NVRTC compile,
// whatever the timing (a late request joins the compile or finds its cubin in the store).
TEST_F(KernelOpTest, ConcurrentRequestsCompileOnceWithTheRealCompiler) {
  serve_with_compiler();
  const std::string l =
      line(k_h200, k_softmax, "softmax", heuristic("softmax", k_softmax_problem, "sm_90", 132));
  std::vector<std::string> cubins(6);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cubins.size(); ++i)
    threads.emplace_back([&, i] { cubins[i] = call(l)["result"].value("cubin", ""); });
  for (auto& t : threads) t.join();
  for (const auto& c : cubins) {
    EXPECT_FALSE(c.empty());
    EXPECT_EQ(c, cubins[0]);
  }
  EXPECT_EQ(m_compiler->compiles(), 1u);
  const auto s = m_kernels->stats();
  EXPECT_EQ(s.requests, 6u);
  EXPECT_EQ(s.compiles + s.shared + s.cache, 6u);
}

// Bad requests are refused before anything compiles, each with its own code and a message that
// names the problem.
TEST_F(KernelOpTest, BadRequestsAreClearErrors) {
  GatedCompiler gate;
  serve(gate.fn());
  Json good = heuristic("gemm", k_gemm_512_problem, "sm_90", 132);
  Json outside = good, broken = good, missing = good, unknown = good;
  outside["BLOCK_M"] = 48;
  broken["BLOCK_M"] = 16;  // in the domain, but with WARPS_M 2 a warp owns 8 rows
  broken["WARPS_M"] = 2;
  missing.erase("STAGES");
  unknown["TILE"] = 1;
  struct Case {
    std::string line, code, says;
  };
  const std::vector<Case> cases = {
      {line(k_h200, k_gemm_512, "nope", good), "not_found", "unknown template 'nope'"},
      {line(k_h200, k_gemm_512, "gemm", outside), "bad_request", "BLOCK_M = 48 is outside"},
      {line(k_h200, k_gemm_512, "gemm", broken), "bad_request", "constraint at"},
      {line(k_h200, k_gemm_512, "gemm", missing), "bad_request", "missing params.STAGES"},
      {line(k_h200, k_gemm_512, "gemm", unknown), "bad_request", "has no param TILE"},
      {line(k_h200, k_gemm_512, "gemm", good, R"(,"arch":"sm_80")"), "bad_request",
       "arch sm_80 does not match device class " + k_h200},
      {line(k_a100, k_gemm_512, "gemm_sm90",
            heuristic("gemm_sm90", k_gemm_512_problem, "sm_90", 132)),
       "invalid_problem", "does not implement"},
      {line(k_h200, k_gemm_512, "gemm", good, R"(,"template_hash":"0123456789abcdef")"),
       "not_found", "stale entry"},
      {line(k_h200, k_gemm_512, "gemm", good, R"(,"entry":{})"), "bad_request", "not both"},
      {line("amd-mi300", k_gemm_512, "gemm", good), "not_found", "amd-mi300"},
      {line(k_h200,
            Json{{"op", "gemm"}, {"dtype", "bf16"}, {"dims", {{"M", 0}, {"N", 8}, {"K", 8}}}},
            "gemm", good),
       "invalid_problem", "M=0"},
      {R"({"v":2,"id":1,"op":"kernel","template":"gemm","params":{}})", "bad_request",
       "missing \"problem\""},
  };
  for (const auto& c : cases) {
    const Json r = call(c.line);
    ASSERT_FALSE(r["ok"].get<bool>()) << c.line;
    EXPECT_EQ(r["error"]["code"], c.code) << c.line << "\n" << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find(c.says), std::string::npos)
        << r["error"]["message"];
  }
  EXPECT_EQ(gate.size(), 0u) << "no refused request compiles";
  EXPECT_EQ(m_kernels->stats().errors, cases.size() - 2)
      << "two are refused while the request is read, before fetch()";
}

// A v2 lookup's entry can be sent back as is: the kernel compiled is the one it describes.
TEST_F(KernelOpTest, ALookupEntryIsAcceptedAsTheRequest) {
  GatedCompiler gate;
  serve(gate.fn());
  const Json entry = softmax_entry();
  std::vector<Json> replies;
  kernel_for(entry, replies);
  ASSERT_EQ(gate.size(), 1u);
  EXPECT_EQ(Compiler::cubin_id(gate.pending[0].request), entry["launch"]["cubin_id"]);
  gate.pending[0].done(m_compiler->compile(gate.pending[0].request));
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0]["v"], 1) << "a v1 request may ask for a kernel; the reply says v1";
  EXPECT_EQ(replies[0]["result"]["launch"], entry["launch"]);
  EXPECT_EQ(replies[0]["result"]["params"], entry["params"]);
}

// An entry from before 2026-12-06 names its template by the hash of every byte, or by a hash the
// manifest lists as the same kernel's: the kernel is served all the same.
TEST_F(KernelOpTest, AnEntryNamingAnEarlierHashOfTheKernelIsServed) {
  GatedCompiler gate;
  serve(gate.fn());
  const Json looked = softmax_entry();
  const KernelTemplate* t = m_templates.find(looked["template"].get<std::string>());
  ASSERT_NE(t, nullptr);
  ASSERT_FALSE(t->manifest.previous_hashes.empty()) << "every built-in lists its v1 hash";
  std::vector<Json> replies;
  for (const std::string& hash : {t->content_hash, t->manifest.previous_hashes.front()}) {
    Json entry = looked;
    entry["template_hash"] = hash;
    kernel_for(entry, replies);
    for (auto& p : gate.pending) p.done(m_compiler->compile(p.request));
    gate.pending.clear();
  }
  ASSERT_EQ(replies.size(), 2u);
  for (const Json& r : replies) {
    EXPECT_TRUE(r["ok"].get<bool>()) << r.dump().substr(0, 300);
    EXPECT_EQ(r["result"]["template_hash"], t->hash) << "the reply names the kernel hash";
  }
}

// A compile failure answers every waiter with internal and NVRTC's log.
TEST_F(KernelOpTest, CompileErrorIsAnsweredWithTheLog) {
  GatedCompiler gate;
  serve(gate.fn());
  const Json params = heuristic("softmax", k_softmax_problem, "sm_90", 132);
  std::vector<Json> replies;
  for (int i = 0; i < 2; ++i)
    m_parts->dispatcher.handle(line(k_h200, k_softmax, "softmax", params), "", Peer{},
                               [&](std::string l, bool) {
                                 replies.push_back(Json::parse(l));
                                 return true;
                               });
  ASSERT_EQ(gate.size(), 1u);
  CompileResult failed;
  failed.status = CompileResult::Status::compile_error;
  failed.log = "softmax.cuh(12): error: boom";
  gate.pending[0].done(failed);
  ASSERT_EQ(replies.size(), 2u);
  for (const auto& r : replies) {
    EXPECT_EQ(r["error"]["code"], "internal");
    EXPECT_NE(r["error"]["message"].get<std::string>().find("error: boom"), std::string::npos);
  }
}

// After stop() (shutdown), a compile that ends answers nobody: the sessions are gone.
TEST_F(KernelOpTest, StoppedServiceAnswersNobody) {
  GatedCompiler gate;
  serve(gate.fn());
  int emitted = 0;
  m_parts->dispatcher.handle(
      line(k_h200, k_softmax, "softmax", heuristic("softmax", k_softmax_problem, "sm_90", 132)), "",
      Peer{}, [&](std::string, bool) { return ++emitted, true; });
  ASSERT_EQ(gate.size(), 1u);
  m_kernels->stop();
  gate.pending[0].done(m_compiler->compile(gate.pending[0].request));
  EXPECT_EQ(emitted, 0);
}

TEST_F(KernelOpTest, WithoutAServiceTheOpIsUnavailable) {
  const Json r = call(line(k_h200, k_softmax, "softmax", Json::object()));
  EXPECT_EQ(r["error"]["code"], "unavailable");
}

// ---- launch descriptions against the manifests ---------------------------------------------

int test_dtype_bytes(const std::string& dtype) {
  return dtype == "bf16" || dtype == "fp16" ? 2 : 4;  // the built-ins use bf16 fp16 fp32 i32
}

// Every argument of the manifest, in order, with its kind, concrete dtype, count, bytes, value
// and zeroing, and the instance's geometry, arch and cubin id.
void expect_matches_manifest(const KernelTemplate& t, const Problem& p, const Instance& inst,
                             const std::string& arch, const protocol::LaunchDescription& d) {
  const Manifest& m = t.manifest;
  EXPECT_EQ(d.name_expression, inst.name_expression);
  EXPECT_EQ(d.arch, arch);
  EXPECT_EQ(d.cubin_id, Compiler::cubin_id({&t, inst.name_expression, arch}));
  EXPECT_EQ(d.grid, inst.launch.grid);
  EXPECT_EQ(d.block, inst.launch.block);
  EXPECT_EQ(d.smem, inst.launch.smem);
  EXPECT_EQ(d.has_cluster, inst.launch.cluster_size() > 1);
  if (d.has_cluster) {
    EXPECT_EQ(d.cluster, inst.launch.cluster);
  }
  ASSERT_EQ(d.args.size(), m.args.size());
  for (size_t i = 0; i < m.args.size(); ++i) {
    const ArgSpec& spec = m.args[i];
    const protocol::LaunchArg& a = d.args[i];
    SCOPED_TRACE(m.name + " arg " + spec.name);
    EXPECT_EQ(a.name, spec.name);
    EXPECT_EQ(a.pass, spec.kind != ArgKind::buffer || spec.pass);
    if (spec.kind == ArgKind::tensor_map) {
      EXPECT_EQ(a.kind, protocol::ArgKind::tensor_map);
      const TensorMapValue& map = inst.args[i].map;
      EXPECT_EQ(a.tensor_map.at("buffer"), map.buffer);
      EXPECT_EQ(a.tensor_map.at("dims"), map.dims);
      EXPECT_EQ(a.tensor_map.at("strides"), map.strides);
      EXPECT_EQ(a.tensor_map.at("box"), map.box);
      EXPECT_EQ(a.tensor_map.at("swizzle"), std::string(to_string(map.swizzle)));
      continue;
    }
    if (spec.kind == ArgKind::scalar) {
      EXPECT_EQ(a.kind, protocol::ArgKind::scalar);
      EXPECT_EQ(a.dtype, to_string(spec.scalar));
      EXPECT_EQ(a.value, inst.args[i].value);
      continue;
    }
    const std::string dtype = spec.dtype == "in"    ? p.dtype
                              : spec.dtype == "out" ? p.out_dtype
                                                    : spec.dtype;
    EXPECT_EQ(a.dtype, dtype);
    EXPECT_EQ(std::string(protocol::to_string(a.kind)), std::string(to_string(spec.role)));
    EXPECT_EQ(a.count, inst.args[i].count);
    EXPECT_EQ(a.bytes, a.count * test_dtype_bytes(dtype));
    const bool kept = spec.role == BufferRole::workspace && spec.zero == WorkspaceZero::kept;
    EXPECT_EQ(a.zero_before_first_use, kept);
    EXPECT_EQ(a.left_zeroed, kept);
  }
  // Round trip through the wire form.
  auto back = protocol::launch_from_json(protocol::to_json(d));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(protocol::to_json(*back), protocol::to_json(d));
}

// Every built-in template, several shapes each, up to six configs of each space (the heuristic's
// first): the description says what the manifest says.
TEST(LaunchDescriptionTest, EveryBuiltinTemplateMatchesItsManifest) {
  const TemplateRegistry templates = TemplateRegistry::load({builtin_template_dir()});
  ASSERT_GE(templates.all().size(), 7u);
  const std::vector<Problem> problems = {
      {"gemm", "bf16", "bf16", "rc", {{"M", 16}, {"N", 4096}, {"K", 4096}}},
      {"gemm", "fp16", "fp32", "rr", {{"M", 1000}, {"N", 1000}, {"K", 1032}}},
      {"gemm", "bf16", "bf16", "rc", {{"M", 4096}, {"N", 14336}, {"K", 4096}}},
      {"softmax", "bf16", "bf16", "", {{"rows", 4096}, {"cols", 4096}}},
      {"softmax", "fp32", "fp32", "", {{"rows", 3}, {"cols", 100003}}},
      {"rmsnorm", "bf16", "bf16", "", {{"rows", 8192}, {"cols", 4096}}},
      {"layernorm", "fp16", "fp16", "", {{"rows", 17}, {"cols", 768}}},
      {"reduce_sum", "fp32", "fp32", "", {{"n", 1 << 24}}},
      {"transpose", "fp32", "fp32", "", {{"rows", 4096}, {"cols", 1000}}},
  };
  DeviceLimits limits = *DeviceLimits::for_arch("sm_90");
  limits.sm_count = 132;
  std::set<std::string> covered;
  for (const auto& p : problems)
    for (const KernelTemplate* t : templates.for_problem(p, 90)) {
      SCOPED_TRACE(t->name() + " " + p.key());
      auto space = SearchSpace::build(*t, p, limits);
      ASSERT_TRUE(space) << space.error().message;
      std::vector<Params> configs = {*heuristic_config(*t, p, limits)};
      const auto& all = space->configs();
      for (size_t i = 0; i < 5 && i < all.size(); ++i) configs.push_back(all[i * all.size() / 5]);
      for (const auto& params : configs) {
        auto inst = instantiate(*t, p, limits, params);
        ASSERT_TRUE(inst) << inst.error().message;
        const std::string arch = target_arch(t->manifest, 90);
        expect_matches_manifest(*t, p, *inst, arch, describe_launch(*t, *inst, arch));
      }
      covered.insert(t->name());
    }
  for (const auto& t : templates.all()) EXPECT_TRUE(covered.count(t->name())) << t->name();
}

// Split-K gemm configs: the partials workspace holds SPLIT_K x M x N fp32 and needs no zeroing;
// the tile tickets are one i32 per output tile, zeroed once and left zeroed; grid.z = SPLIT_K.
TEST(LaunchDescriptionTest, SplitKGemmWorkspacesAreSizedAndZeroedAsTheKernelNeeds) {
  const TemplateRegistry templates = TemplateRegistry::load({builtin_template_dir()});
  const KernelTemplate& gemm = *templates.find("gemm");
  const Problem p{"gemm", "bf16", "bf16", "rc", {{"M", 64}, {"N", 4096}, {"K", 4096}}};
  DeviceLimits limits = *DeviceLimits::for_arch("sm_90");
  limits.sm_count = 132;
  auto space = SearchSpace::build(gemm, p, limits);
  ASSERT_TRUE(space);
  int checked = 0;
  for (const auto& params : space->configs()) {
    const std::int64_t split = params.at("SPLIT_K");
    if (split == 1 || checked >= 20) continue;
    ++checked;
    auto inst = instantiate(gemm, p, limits, params);
    ASSERT_TRUE(inst);
    const auto d = describe_launch(gemm, *inst, "sm_90");
    const std::int64_t tiles = (64 + params.at("BLOCK_M") - 1) / params.at("BLOCK_M") *
                               ((4096 + params.at("BLOCK_N") - 1) / params.at("BLOCK_N"));
    ASSERT_EQ(d.args.size(), 10u);
    EXPECT_EQ(d.args[0].count, 64 * 4096);  // A: M x K
    EXPECT_EQ(d.args[1].count, 4096 * 4096);
    EXPECT_EQ(d.args[2].kind, protocol::ArgKind::out);
    const auto& ws = d.args[3];
    EXPECT_EQ(ws.name, "workspace");
    EXPECT_EQ(ws.kind, protocol::ArgKind::workspace);
    EXPECT_EQ(ws.dtype, "fp32");
    EXPECT_EQ(ws.count, split * 64 * 4096);
    EXPECT_EQ(ws.bytes, 4 * split * 64 * 4096);
    EXPECT_FALSE(ws.zero_before_first_use);
    EXPECT_FALSE(ws.left_zeroed);
    const auto& tickets = d.args[4];
    EXPECT_EQ(tickets.name, "tile_counters");
    EXPECT_EQ(tickets.dtype, "i32");
    EXPECT_EQ(tickets.count, tiles);
    EXPECT_TRUE(tickets.zero_before_first_use);
    EXPECT_TRUE(tickets.left_zeroed);
    EXPECT_EQ(d.grid[2], std::uint32_t(split));
    EXPECT_EQ(d.args[5].value, 64);  // M
    EXPECT_EQ(d.args[8].dtype, "f32");
    EXPECT_EQ(d.args[8].value, 1.0);  // alpha
  }
  EXPECT_GT(checked, 3) << "the space has split-K configs for this decode shape";
}

// The row ops' scalars and per-row buffers as their manifests give them.
TEST(LaunchDescriptionTest, RowOpsCarryTheirScalars) {
  const TemplateRegistry templates = TemplateRegistry::load({builtin_template_dir()});
  DeviceLimits limits = *DeviceLimits::for_arch("sm_90");
  limits.sm_count = 132;
  auto describe = [&](const std::string& name, const Problem& p) {
    const KernelTemplate& t = *templates.find(name);
    auto inst = instantiate(t, p, limits, *heuristic_config(t, p, limits));
    EXPECT_TRUE(inst);
    return describe_launch(t, *inst, "sm_90");
  };
  const Problem rows{"rmsnorm", "bf16", "bf16", "", {{"rows", 8192}, {"cols", 4096}}};
  const auto rms = describe("rmsnorm", rows);
  ASSERT_EQ(rms.args.size(), 6u);
  EXPECT_EQ(rms.args[1].name, "gamma");
  EXPECT_EQ(rms.args[1].count, 4096);
  EXPECT_EQ(rms.args[4].value, 4096);
  EXPECT_FLOAT_EQ(float(rms.args[5].value), 1e-6f);
  Problem ln = rows;
  ln.op = "layernorm";
  const auto lnd = describe("layernorm", ln);
  EXPECT_EQ(lnd.args[2].name, "beta");
  EXPECT_FLOAT_EQ(float(lnd.args[6].value), 1e-5f);
  const auto red = describe("reduce_sum", {"reduce_sum", "fp32", "fp32", "", {{"n", 1 << 20}}});
  EXPECT_EQ(red.args[2].name, "partials");
  EXPECT_TRUE(red.args[2].zero_before_first_use);
  EXPECT_TRUE(red.args[2].left_zeroed);
  EXPECT_EQ(red.args[4].dtype, "i64");
  EXPECT_EQ(red.args[4].value, double(1 << 20));
}

}  // namespace
}  // namespace ktune
