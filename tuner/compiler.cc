#include "tuner/compiler.h"

#include <nvrtc.h>

#include <chrono>
#include <regex>

namespace ktune {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string nvrtc_error(nvrtcResult r, const char* what) {
  return std::string(what) + ": " + nvrtcGetErrorString(r);
}

std::vector<std::string> all_options(const CompileRequest& req) {
  auto opts = Compiler::base_options(req.arch);
  for (const auto& o : req.tmpl->manifest.nvrtc_options) opts.push_back(o);
  return opts;
}

}  // namespace

void parse_ptxas_report(const std::string& log, CubinEntry& e) {
  static const std::regex regs(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  static const std::regex frame(
      R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  std::smatch m;
  if (std::regex_search(log, m, regs)) e.registers = std::stoi(m[1]);
  if (std::regex_search(log, m, smem)) e.smem_bytes = std::stoi(m[1]);
  if (std::regex_search(log, m, frame)) {
    e.stack_bytes = std::stoi(m[1]);
    e.spill_stores = std::stoi(m[2]);
    e.spill_loads = std::stoi(m[3]);
  }
}

Compiler::Compiler(CompilerOptions options) : m_options(options), m_pool(options.threads) {}

std::string Compiler::nvrtc_version() {
  static const std::string version = [] {
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    return std::to_string(major) + "." + std::to_string(minor);
  }();
  return version;
}

std::string Compiler::cache_key(const CompileRequest& req) {
  return req.tmpl->name() + "/" + req.arch + "/" + cubin_id(req);
}

std::string Compiler::cubin_id(const CompileRequest& req) {
  std::string material = req.tmpl->hash + "\n" + req.name_expression + "\n" + req.arch + "\n" +
                         Compiler::nvrtc_version();
  for (const auto& o : all_options(req)) material += "\n" + o;
  return xxh3_hex(material);
}

std::vector<std::string> Compiler::base_options(const std::string& arch) {
  // -no-cache: NVRTC 13 has its own driver-backed cache; ktune keeps its own (keyed as above), and
  // compile-time measurements must not depend on a cache outside ktune's control.
  return {"--gpu-architecture=" + arch, "-std=c++17", "--ptxas-options=-v", "-no-cache"};
}

CompileResult Compiler::compile(const CompileRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  CompileResult result;
  const auto opts = all_options(req);
  result.cache_key = cache_key(req);

  if (m_options.cache && m_options.use_cache) {
    auto cached = get_cubin(*m_options.cache, result.cache_key);
    if (cached && *cached) {
      result.kernel = std::move(**cached);
      result.cache_hit = true;
      result.wall_ms = ms_since(t0);
      return result;
    }
  }

  std::vector<const char*> header_texts, header_names;
  for (const auto& [name, text] : req.tmpl->headers) {
    header_names.push_back(name.c_str());
    header_texts.push_back(text.c_str());
  }
  m_compiles.fetch_add(1);
  nvrtcProgram prog = nullptr;
  nvrtcResult r =
      nvrtcCreateProgram(&prog, req.tmpl->source.c_str(), (req.tmpl->name() + ".cuh").c_str(),
                         int(header_texts.size()), header_texts.data(), header_names.data());
  if (r != NVRTC_SUCCESS) {
    result.status = CompileResult::Status::compile_error;
    result.log = nvrtc_error(r, "nvrtcCreateProgram");
    result.wall_ms = ms_since(t0);
    return result;
  }
  struct Destroy {
    nvrtcProgram* p;
    ~Destroy() { nvrtcDestroyProgram(p); }
  } destroy{&prog};

  r = nvrtcAddNameExpression(prog, req.name_expression.c_str());
  std::vector<const char*> copts;
  for (const auto& o : opts) copts.push_back(o.c_str());
  const auto c0 = std::chrono::steady_clock::now();
  if (r == NVRTC_SUCCESS) r = nvrtcCompileProgram(prog, int(copts.size()), copts.data());
  result.kernel.compile_ms = ms_since(c0);

  size_t log_size = 0;
  if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    result.log.resize(log_size);
    nvrtcGetProgramLog(prog, result.log.data());
    result.log.resize(log_size - 1);
  }
  if (r != NVRTC_SUCCESS) {
    result.status = CompileResult::Status::compile_error;
    if (result.log.empty()) result.log = nvrtc_error(r, "nvrtcCompileProgram");
    result.wall_ms = ms_since(t0);
    return result;
  }

  const char* lowered = nullptr;
  size_t cubin_size = 0;
  r = nvrtcGetLoweredName(prog, req.name_expression.c_str(), &lowered);
  if (r == NVRTC_SUCCESS) r = nvrtcGetCUBINSize(prog, &cubin_size);
  if (r != NVRTC_SUCCESS || cubin_size == 0) {
    result.status = CompileResult::Status::compile_error;
    result.log += "\n" + nvrtc_error(r, "no cubin (is the arch a real sm_XX?)");
    result.wall_ms = ms_since(t0);
    return result;
  }
  result.kernel.lowered_name = lowered;
  result.kernel.cubin.resize(cubin_size);
  nvrtcGetCUBIN(prog, result.kernel.cubin.data());
  parse_ptxas_report(result.log, result.kernel);

  if (m_options.cache) put_cubin(*m_options.cache, result.cache_key, result.kernel);
  result.wall_ms = ms_since(t0);
  return result;
}

std::future<CompileResult> Compiler::submit(CompileRequest request) {
  return m_pool.submit([this, request = std::move(request)] { return compile(request); });
}

void Compiler::submit(CompileRequest request, std::function<void(CompileResult)> done) {
  // The pool's future is dropped: `done` is how the result leaves.
  (void)m_pool.submit(
      [this, request = std::move(request), done = std::move(done)] { done(compile(request)); });
}

std::vector<CompileResult> Compiler::compile_all(const std::vector<CompileRequest>& requests) {
  std::vector<std::future<CompileResult>> futures;
  futures.reserve(requests.size());
  for (const auto& r : requests) futures.push_back(submit(r));
  std::vector<CompileResult> out;
  out.reserve(requests.size());
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

}  // namespace ktune
