#include "client/launcher.h"

#include <algorithm>

namespace ktune {
namespace {

std::string problem_text(const protocol::ProblemSpec& p) {
  std::string s = p.op + "|" + p.dtype + "|" + p.out_dtype + "|" + p.layout;
  for (const auto& [n, v] : p.dims) s += "|" + n + "=" + std::to_string(v);
  return s;
}

protocol::ProblemSpec rows_problem(const char* op, std::int64_t rows, std::int64_t cols,
                                   const std::string& dtype) {
  return {op, dtype, "", "", {{"rows", rows}, {"cols", cols}}};
}

}  // namespace

Launcher::Launcher(Client& client, std::string device, std::string pin)
    : m_client(client), m_device(std::move(device)), m_pin(std::move(pin)) {}

size_t Launcher::size() const {
  std::lock_guard lock(m_mutex);
  return m_kernels.size();
}

size_t Launcher::configs() const {
  std::lock_guard lock(m_mutex);
  return m_configs.size();
}

size_t Launcher::max_kernels() const {
  std::lock_guard lock(m_mutex);
  return m_max_kernels;
}

void Launcher::set_max_kernels(size_t n) {
  std::lock_guard lock(m_mutex);
  m_max_kernels = std::max<size_t>(n, 1);
  trim();
}

void Launcher::trim() {
  while (m_kernels.size() > m_max_kernels) {  // the oldest shapes go; their configs stay
    m_kernels.erase(m_order.front());
    m_order.pop_front();
  }
}

std::shared_ptr<Kernel> Launcher::config(const std::string& cubin_id) const {
  std::lock_guard lock(m_mutex);
  auto it = m_configs.find(cubin_id);
  return it == m_configs.end() ? nullptr : it->second;
}

protocol::Expected<std::shared_ptr<Kernel>> Launcher::kernel(const protocol::ProblemSpec& problem) {
  const std::string key = problem_text(problem);
  {
    std::lock_guard lock(m_mutex);
    if (auto it = m_kernels.find(key); it != m_kernels.end()) return it->second;
  }
  auto k = fetch(problem);  // outside the lock: may wait for a compile
  if (!k) return k;
  std::lock_guard lock(m_mutex);
  const std::string& id = (*k)->description().cubin_id;
  if (!id.empty()) m_configs.try_emplace(id, *k);
  auto [it, added] = m_kernels.try_emplace(key, std::move(*k));
  std::shared_ptr<Kernel> kept = it->second;
  if (added) {
    m_order.push_back(key);
    trim();
  }
  return kept;
}

protocol::Expected<std::shared_ptr<Kernel>> Launcher::fetch(const protocol::ProblemSpec& problem) {
  auto reply = m_client.lookup({problem, m_device, 4, m_pin});
  if (!reply) return std::unexpected(reply.error());
  std::optional<protocol::Error> first_error;
  for (const auto& e : reply->entries) {
    if (e.launch.is_null()) continue;  // the daemon does not have this template installed
    if (auto launch = protocol::launch_from_json(e.launch); launch && !launch->cubin_id.empty())
      if (auto held = config(launch->cubin_id)) {  // another shape of a config fetched before
        auto k = Kernel::create_like(*held, std::move(*launch), reply->problem_key);
        if (k) return k;
        if (!first_error) first_error = k.error();
        continue;
      }
    auto image = m_client.kernel(protocol::kernel_request_for(problem, reply->device, e));
    if (image) {
      auto k = Kernel::create(std::move(*image));
      if (k) return k;
      image = std::unexpected(k.error());
    }
    if (!first_error) first_error = image.error();
  }
  if (first_error) return std::unexpected(*first_error);
  return protocol::error(protocol::ErrorKind::not_found,
                         "ktuned answered " + reply->problem_key + " with no launchable kernel");
}

protocol::Expected<void> gemm(Launcher& launcher, const GemmShape& s, std::uint64_t a,
                              std::uint64_t b, std::uint64_t c, void* stream, float alpha,
                              float beta) {
  auto k = launcher.kernel(
      {"gemm", s.dtype, s.out_dtype, s.layout, {{"M", s.M}, {"N", s.N}, {"K", s.K}}});
  if (!k) return std::unexpected(k.error());
  const ScalarArg scalars[] = {{"alpha", alpha}, {"beta", beta}};
  const std::uint64_t buffers[] = {a, b, c};
  return (*k)->launch(buffers, stream, scalars);
}

protocol::Expected<void> softmax(Launcher& launcher, std::int64_t rows, std::int64_t cols,
                                 const std::string& dtype, std::uint64_t x, std::uint64_t y,
                                 void* stream) {
  auto k = launcher.kernel(rows_problem("softmax", rows, cols, dtype));
  if (!k) return std::unexpected(k.error());
  return (*k)->launch({x, y}, stream);
}

protocol::Expected<void> rmsnorm(Launcher& launcher, std::int64_t rows, std::int64_t cols,
                                 const std::string& dtype, std::uint64_t x, std::uint64_t gamma,
                                 std::uint64_t y, float eps, void* stream) {
  auto k = launcher.kernel(rows_problem("rmsnorm", rows, cols, dtype));
  if (!k) return std::unexpected(k.error());
  const ScalarArg scalars[] = {{"eps", eps}};
  const std::uint64_t buffers[] = {x, gamma, y};
  return (*k)->launch(buffers, stream, scalars);
}

protocol::Expected<void> layernorm(Launcher& launcher, std::int64_t rows, std::int64_t cols,
                                   const std::string& dtype, std::uint64_t x, std::uint64_t gamma,
                                   std::uint64_t beta, std::uint64_t y, float eps, void* stream) {
  auto k = launcher.kernel(rows_problem("layernorm", rows, cols, dtype));
  if (!k) return std::unexpected(k.error());
  const ScalarArg scalars[] = {{"eps", eps}};
  const std::uint64_t buffers[] = {x, gamma, beta, y};
  return (*k)->launch(buffers, stream, scalars);
}

}  // namespace ktune
