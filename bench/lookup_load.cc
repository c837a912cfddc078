// ktune-lookup-load: N concurrent clients sending requests to ktuned over its Unix socket, the way
// redis-benchmark drives redis-server: one thread, an epoll loop over N connections, each keeping
// P requests in flight (pipelining). Clients are split into traffic classes, each with its own
// latency record, so one run shows what cached lookups cost while another client floods cold ones:
//
//   repeat   one exact lookup, the same line again and again (served by the answer cache)
//   zipf     GEMM shapes drawn from a Zipf law over --zipf-keys shapes (an LLM server's mix)
//   novel    a shape no client asked before, every request (M from 1..8192, as in LLM serving)
//   ops      mixed daemon traffic: 15 requests in 16 lookups (zipf, 1 in 64 novel), the 16th a
//            rotation of status, templates, misses, jobs
//
//   ktune-lookup-load --socket S --mix repeat:63,novel:1x16 --seconds 5 [--pipeline 1] [--json]
//       (63 clients repeating a cached lookup, one client with 16 never-seen lookups in flight)
//   ktune-lookup-load --socket S --mix ops:64 --requests 100000   (fixed work per client)
//   ktune-lookup-load --socket REDIS_SOCK --redis --mix zipf:64   (GET over the same key law)
//   ktune-lookup-load --socket S --mix zipf:64 --pin run1   (the same lookups, answered by a pin)
//   ktune-lookup-load --socket S --mix novel:1 --poll   (latency without the client's wake-up)
//
// Latency is measured per batch (send of P requests to receipt of the P-th reply) and counted
// once per request, as redis-benchmark does. A reply is an error unless it says "ok":true (ktune)
// or is a bulk string (redis). The daemon's RSS (VmRSS, VmHWM, via SO_PEERCRED's pid) is sampled
// every 100 ms.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

enum class Traffic { repeat, zipf, novel, ops };
constexpr std::array<const char*, 4> k_traffic_names = {"repeat", "zipf", "novel", "ops"};

// (N, K) pairs of common LLM linear layers; a zipf key picks one and an M (batch x tokens).
constexpr std::array<std::pair<int, int>, 20> k_nk = {{{4096, 4096},   {14336, 4096}, {4096, 14336},
                                                       {6144, 4096},   {4096, 11008}, {11008, 4096},
                                                       {8192, 8192},   {28672, 8192}, {8192, 28672},
                                                       {10240, 8192},  {5120, 5120},  {13824, 5120},
                                                       {5120, 13824},  {2048, 2048},  {5632, 2048},
                                                       {2048, 5632},   {3072, 3072},  {8192, 3072},
                                                       {3072, 8192},   {128256, 4096}}};

struct Options {
  std::string socket_path, request, device = "nvidia-h200", mix = "repeat:1", pin;
  int pipeline = 1, zipf_keys = 10'000;
  double seconds = 5, warmup = 0.5, zipf_s = 1.0;
  std::uint64_t requests = 0, seed = 1, novel_offset = 0;
  bool json = false, redis = false, poll = false;
};

std::string gemm_lookup(const Options& o, long m, long n, long k) {
  char buf[448];
  std::snprintf(buf, sizeof buf,
                R"({"v":1,"id":1,"op":"lookup","device":"%s","problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":%ld,"N":%ld,"K":%ld}}%s%s%s})",
                o.device.c_str(), m, n, k, o.pin.empty() ? "" : R"(,"pin":")", o.pin.c_str(),
                o.pin.empty() ? "" : "\"");
  return buf;
}

std::string redis_get(const std::string& key) {
  return "*2\r\n$3\r\nGET\r\n$" + std::to_string(key.size()) + "\r\n" + key + "\r\n";
}

// Makes each class's request lines. Deterministic for a seed; novel keys are unique per (client,
// sequence number, --novel-offset), so repeated runs against one daemon stay never-seen.
class Generator {
 public:
  Generator(const Options& o, int clients) : m_o(o), m_clients(clients), m_rng(o.seed) {
    std::vector<double> cdf(size_t(o.zipf_keys));
    double sum = 0;
    for (size_t r = 0; r < cdf.size(); ++r) cdf[r] = sum += 1.0 / std::pow(double(r + 1), o.zipf_s);
    for (auto& c : cdf) c /= sum;
    m_zipf_cdf = std::move(cdf);
    m_zipf_key.resize(size_t(o.zipf_keys));  // rank -> key: popular keys spread over all shapes
    for (size_t i = 0; i < m_zipf_key.size(); ++i) m_zipf_key[i] = int(i);
    std::shuffle(m_zipf_key.begin(), m_zipf_key.end(), m_rng);
  }

  std::string next(Traffic t, int client, std::uint64_t seq) {
    switch (t) {
      case Traffic::repeat:
        return m_o.redis ? redis_get("key:0")
                         : (m_o.request.empty() ? gemm_lookup(m_o, 4096, 4096, 4096) : m_o.request);
      case Traffic::zipf: return zipf();
      case Traffic::novel: return novel(client, seq);
      case Traffic::ops: {
        static constexpr std::array<const char*, 4> k_other = {
            R"({"v":1,"id":1,"op":"status"})", R"({"v":1,"id":1,"op":"templates"})",
            R"({"v":1,"id":1,"op":"misses","limit":20})", R"({"v":1,"id":1,"op":"jobs","limit":20})"};
        // Mostly lookups, as an application node's traffic is: one request in 16 is an
        // introspection op (each builds its whole reply: ~100-250 us of executor time).
        if (seq % 16 != 15) return seq % 64 == 7 ? novel(client, seq) : zipf();
        return k_other[(seq / 16) % k_other.size()];
      }
    }
    return {};
  }

  // Shape of zipf key z: M in 16..8192 (step 16), (N, K) from k_nk.
  static std::array<long, 3> zipf_shape(int z) {
    const auto& nk = k_nk[size_t(z / 512) % k_nk.size()];
    return {16L * (1 + z % 512), nk.first, nk.second};
  }

 private:
  std::string novel(int client, std::uint64_t seq) {
    const std::uint64_t i = m_o.novel_offset + seq * std::uint64_t(m_clients) + std::uint64_t(client);
    const long m = long(1 + i % 8192), n = long(64 * (1 + (i / 8192) % 1024)),
               k = long(64 * (1 + (i / 8192 / 1024) % 1024));
    return m_o.redis ? redis_get("novel:" + std::to_string(i)) : gemm_lookup(m_o, m, n, k);
  }
  std::string zipf() {
    const double u = std::uniform_real_distribution<double>(0, 1)(m_rng);
    const size_t rank =
        std::min(m_zipf_cdf.size() - 1,
                 size_t(std::lower_bound(m_zipf_cdf.begin(), m_zipf_cdf.end(), u) - m_zipf_cdf.begin()));
    const int z = m_zipf_key[rank];
    if (m_o.redis) return redis_get("zipf:" + std::to_string(z));
    const auto s = zipf_shape(z);
    return gemm_lookup(m_o, s[0], s[1], s[2]);
  }

  const Options& m_o;
  int m_clients;
  std::mt19937_64 m_rng;
  std::vector<double> m_zipf_cdf;
  std::vector<int> m_zipf_key;
};

struct Conn {
  int fd = -1;
  bool want_out = false;     // registered for EPOLLOUT: a send would have blocked
  Traffic traffic = Traffic::repeat;
  int pipeline = 1;
  std::uint64_t seq = 0;     // requests generated
  std::uint64_t issued = 0;  // requests counted toward --requests
  std::string out;           // unsent bytes of the current batch
  std::uint64_t batch_bytes = 0;  // reply bytes of the current batch so far
  size_t replies_due = 0;
  int newlines = 0;  // seen of the current reply
  size_t scan_from = 0;
  std::string in;
  Clock::time_point batch_start;
  bool finished = false;
};

// Bytes per reply (a pipelined batch counts each of its replies).
double mean_bytes(std::uint64_t bytes, std::uint64_t replies) {
  return replies ? double(bytes) / double(replies) : 0.0;
}

struct ClassStats {
  int clients = 0;
  std::uint64_t completed = 0, errors = 0;
  std::uint64_t reply_bytes = 0;  // of the completed replies (Redis: the whole RESP reply)
  std::vector<double> latencies_us;
};

int connect_unix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
    std::perror("connect");
    std::exit(1);
  }
  return fd;
}

// (VmRSS, VmHWM) in KiB of process `pid`, zeros when unreadable.
std::pair<long, long> rss_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  long rss = 0, hwm = 0;
  for (std::string line; std::getline(f, line);) {
    if (line.starts_with("VmRSS:")) rss = std::atol(line.c_str() + 6);
    if (line.starts_with("VmHWM:")) hwm = std::atol(line.c_str() + 6);
  }
  return {rss, hwm};
}

struct ClientSpec {
  Traffic traffic;
  int pipeline;
};

// "repeat:63,novel:1x16" -> one spec per client, in that order; xP overrides --pipeline.
std::vector<ClientSpec> parse_mix(const std::string& mix, int default_pipeline) {
  std::vector<ClientSpec> out;
  size_t pos = 0;
  while (pos < mix.size()) {
    const size_t comma = std::min(mix.find(',', pos), mix.size());
    const std::string part = mix.substr(pos, comma - pos);
    const size_t colon = part.find(':'), x = part.find('x', colon == std::string::npos ? 0 : colon);
    const std::string name = part.substr(0, colon);
    const int n = colon == std::string::npos ? 1 : std::atoi(part.c_str() + colon + 1);
    const int p = x == std::string::npos ? default_pipeline : std::atoi(part.c_str() + x + 1);
    auto it = std::find(k_traffic_names.begin(), k_traffic_names.end(), name);
    if (it == k_traffic_names.end() || n <= 0 || p <= 0) {
      std::fprintf(stderr,
                   "bad --mix part '%s' (NAME:CLIENTS[xPIPELINE], NAME one of repeat zipf novel ops)\n",
                   part.c_str());
      std::exit(2);
    }
    out.insert(out.end(), size_t(n), ClientSpec{Traffic(it - k_traffic_names.begin()), p});
    pos = comma + 1;
  }
  return out;
}

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  return sorted[std::min(sorted.size() - 1, size_t(p / 100.0 * double(sorted.size())))];
}

// Sends what c.out holds, without waiting; asks epoll for EPOLLOUT only while bytes are left
// (a connection registered for EPOLLOUT level-triggered while its socket is writable makes
// epoll_wait return at once: the generator would spin on a CPU the server under test needs).
void flush(int ep, Conn& c, size_t index) {
  while (!c.out.empty()) {
    const ssize_t w = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (w <= 0) break;  // EAGAIN (wait for EPOLLOUT) or an error (EPOLLHUP/EPOLLERR report it)
    c.out.erase(0, size_t(w));
  }
  const bool want_out = !c.out.empty();
  if (want_out == c.want_out) return;
  epoll_event ev{};
  ev.events = EPOLLIN | (want_out ? EPOLLOUT : 0u);
  ev.data.u64 = index;
  ::epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
  c.want_out = want_out;
}

// The reply at the front of c.in is complete: is it a success?
bool reply_ok(const Conn& c, bool redis) {
  if (redis) return c.in[0] == '$';
  const size_t nl = c.in.find('\n');
  const std::string_view head(c.in.data(), std::min<size_t>(nl, 64));
  return head.find("\"ok\":true") != std::string_view::npos;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"ktune-lookup-load: concurrent traffic against ktuned"};
  app.add_option("--socket", o.socket_path, "ktuned's (or redis-server's) Unix socket")->required();
  int clients_opt = 0;
  app.add_option("--clients", clients_opt, "shorthand for --mix repeat:N");
  app.add_option("--mix", o.mix, "clients per traffic class: repeat:N,zipf:N,novel:N,ops:N")
      ->capture_default_str();
  app.add_option("--pipeline", o.pipeline, "requests in flight per connection (default of --mix)")->capture_default_str();
  app.add_option("--seconds", o.seconds, "measured duration (ignored with --requests)")
      ->capture_default_str();
  app.add_option("--requests", o.requests, "measured requests per client, then stop (0: timed run)");
  app.add_option("--warmup", o.warmup, "unmeasured seconds first (timed runs)")->capture_default_str();
  app.add_option("--request", o.request, "the repeat class's line (default: an exact gemm lookup)");
  app.add_option("--pin", o.pin, "every generated lookup names this pin (ktune pin create)");
  app.add_option("--device", o.device, "device class the lookups name")->capture_default_str();
  app.add_option("--zipf-keys", o.zipf_keys, "distinct shapes of the zipf class")->capture_default_str();
  app.add_option("--zipf-s", o.zipf_s, "Zipf exponent")->capture_default_str();
  app.add_option("--seed", o.seed, "random seed")->capture_default_str();
  app.add_option("--novel-offset", o.novel_offset, "first novel key (start past earlier runs)")
      ->capture_default_str();
  app.add_flag("--json", o.json, "print one JSON object");
  app.add_flag("--redis", o.redis, "speak RESP (GET); keys must be set beforehand");
  app.add_flag("--poll", o.poll,
               "busy-poll for replies instead of sleeping in epoll_wait: the latency then leaves "
               "out the generator's own wake-up (takes a whole CPU from the server under test)");
  CLI11_PARSE(app, argc, argv);
  if (o.zipf_keys <= 0 || o.pipeline <= 0) {
    std::fprintf(stderr, "--zipf-keys and --pipeline must be positive\n");
    return 2;
  }

  if (clients_opt > 0) o.mix = "repeat:" + std::to_string(clients_opt);
  const std::vector<ClientSpec> traffic = parse_mix(o.mix, o.pipeline);
  const int clients = int(traffic.size());
  Generator gen(o, clients);
  // A reply is one line for ktune; a RESP bulk string ("$3\r\nxyz\r\n") is two, nil ("$-1") one.
  const int ep = ::epoll_create1(0);
  std::vector<Conn> conns(traffic.size());
  std::array<ClassStats, 4> stats;
  for (size_t i = 0; i < conns.size(); ++i) {
    conns[i].fd = connect_unix(o.socket_path);
    conns[i].traffic = traffic[i].traffic;
    conns[i].pipeline = traffic[i].pipeline;
    ++stats[size_t(traffic[i].traffic)].clients;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev);
  }
  pid_t server_pid = 0;
  {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(conns[0].fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) server_pid = cred.pid;
  }
  const auto rss_start = rss_kib(server_pid);
  long rss_max = rss_start.first;

  const auto t0 = Clock::now();
  const bool timed = o.requests == 0;
  const auto measure_from = t0 + std::chrono::duration<double>(timed ? o.warmup : 0.0);
  const auto stop_at = measure_from + std::chrono::duration<double>(o.seconds);
  bool measuring = !timed;
  auto start_batch = [&](Conn& c) {
    c.out.clear();
    for (int i = 0; i < c.pipeline; ++i) {
      c.out += gen.next(c.traffic, int(&c - conns.data()), c.seq++);
      c.out += o.redis ? "" : "\n";
    }
    c.replies_due = size_t(c.pipeline);
    c.batch_start = Clock::now();
  };
  for (auto& c : conns) {
    start_batch(c);
    flush(ep, c, size_t(&c - conns.data()));
  }

  for (auto& s : stats) s.latencies_us.reserve(timed ? 1 << 20 : o.requests * size_t(s.clients));
  size_t running = conns.size();
  std::vector<epoll_event> events(conns.size());
  char buf[1 << 16];
  auto last_sample = Clock::now();
  while (running > 0) {
    const auto now = Clock::now();
    if (timed && now >= stop_at) break;
    if (!measuring && now >= measure_from) measuring = true;
    if (now - last_sample >= std::chrono::milliseconds(100)) {
      rss_max = std::max(rss_max, rss_kib(server_pid).first);
      last_sample = now;
    }
    const int n = ::epoll_wait(ep, events.data(), int(events.size()), o.poll ? 0 : 100);
    for (int e = 0; e < n; ++e) {
      Conn& c = conns[events[e].data.u64];
      if (c.finished) continue;
      if (events[e].events & EPOLLOUT) flush(ep, c, events[e].data.u64);
      if (!(events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
      ssize_t r;
      while ((r = ::recv(c.fd, buf, sizeof buf, 0)) > 0) c.in.append(buf, size_t(r));
      if (r == 0 || (r < 0 && errno != EAGAIN)) {  // the daemon closed us: count what was owed
        std::fprintf(stderr, "connection %zu closed by the server\n", size_t(&c - conns.data()));
        stats[size_t(c.traffic)].errors += c.replies_due;
        c.finished = true;
        --running;
        continue;
      }
      ClassStats& s = stats[size_t(c.traffic)];
      size_t nl;
      while (c.replies_due > 0 && (nl = c.in.find('\n', c.scan_from)) != std::string::npos) {
        const bool two_lines = o.redis && c.in.compare(0, 3, "$-1") != 0;
        if (two_lines && ++c.newlines < 2) {
          c.scan_from = nl + 1;
          continue;
        }
        c.batch_bytes += nl + 1;
        if (!reply_ok(c, o.redis)) {
          if (s.errors < 3) std::fprintf(stderr, "error reply: %.200s\n", c.in.c_str());
          ++s.errors;
        }
        c.in.erase(0, nl + 1);
        c.scan_from = 0;
        c.newlines = 0;
        --c.replies_due;
      }
      c.scan_from = c.in.size();
      if (c.replies_due > 0) continue;
      if (measuring) {
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - c.batch_start).count();
        s.latencies_us.insert(s.latencies_us.end(), size_t(c.pipeline), us);
        s.completed += std::uint64_t(c.pipeline);
        s.reply_bytes += c.batch_bytes;
      }
      c.batch_bytes = 0;
      c.issued += std::uint64_t(c.pipeline);
      if (!timed && c.issued >= o.requests) {
        c.finished = true;
        --running;
        continue;
      }
      start_batch(c);
      flush(ep, c, events[e].data.u64);
    }
  }
  const double elapsed =
      timed ? o.seconds : std::chrono::duration<double>(Clock::now() - t0).count();
  const auto rss_end = rss_kib(server_pid);
  rss_max = std::max(rss_max, rss_end.first);

  std::uint64_t total_errors = 0, total_completed = 0, total_reply_bytes = 0;
  std::string classes_json, text;
  for (size_t t = 0; t < stats.size(); ++t) {
    ClassStats& s = stats[t];
    if (s.clients == 0) continue;
    std::sort(s.latencies_us.begin(), s.latencies_us.end());
    total_errors += s.errors;
    total_completed += s.completed;
    total_reply_bytes += s.reply_bytes;
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s\"%s\":{\"clients\":%d,\"requests\":%lu,\"errors\":%lu,\"rps\":%.0f,"
                  "\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f,"
                  "\"reply_bytes_mean\":%.1f}",
                  classes_json.empty() ? "" : ",", k_traffic_names[t], s.clients,
                  (unsigned long)s.completed, (unsigned long)s.errors, double(s.completed) / elapsed,
                  percentile(s.latencies_us, 50), percentile(s.latencies_us, 99),
                  percentile(s.latencies_us, 99.9), s.latencies_us.empty() ? 0.0 : s.latencies_us.back(),
                  mean_bytes(s.reply_bytes, s.completed));
    classes_json += line;
    std::snprintf(line, sizeof line,
                  "%-7s %3d clients: %9.0f req/s  p50 %8.1f us  p99 %8.1f us  p999 %8.1f us  errors %lu\n",
                  k_traffic_names[t], s.clients, double(s.completed) / elapsed,
                  percentile(s.latencies_us, 50), percentile(s.latencies_us, 99),
                  percentile(s.latencies_us, 99.9), (unsigned long)s.errors);
    text += line;
  }
  if (o.json) {
    std::printf(
        "{\"mix\":\"%s\",\"clients\":%d,\"pipeline\":%d,\"seconds\":%.2f,\"requests\":%lu,"
        "\"errors\":%lu,\"rps\":%.0f,\"reply_bytes_mean\":%.1f,\"classes\":{%s},"
        "\"server_rss_kib\":{\"start\":%ld,\"max\":%ld,\"end\":%ld,\"hwm\":%ld}}\n",
        o.mix.c_str(), clients, o.pipeline, elapsed, (unsigned long)total_completed,
        (unsigned long)total_errors, double(total_completed) / elapsed,
        mean_bytes(total_reply_bytes, total_completed), classes_json.c_str(),
        rss_start.first, rss_max, rss_end.first, rss_end.second);
  } else {
    std::printf("%s%d clients, pipeline %d, %.1f s: %.0f req/s; server RSS %ld -> %ld KiB (max %ld)\n",
                text.c_str(), clients, o.pipeline, elapsed, double(total_completed) / elapsed,
                rss_start.first, rss_end.first, rss_max);
  }
  return total_errors ? 1 : 0;
}
