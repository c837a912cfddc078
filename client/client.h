// ktune::Client — the C++ client library applications link to ask ktuned for kernels.
//
//   ktune::Client client;                       // $KTUNE_SOCKET or the default socket path
//   auto reply = client.lookup({{"gemm", "bf16", "", "rc", {{"M", 4096}, {"N", 4096}, {"K",
//   4096}}}}); if (reply) use(reply->entries.front());      // best first, with provenance
//
// Synchronous, with a per-call timeout and a small in-process cache of lookup answers (a hot
// loop asking the same shape does not cross the socket each time; entries expire so upgrades
// reach the application). One persistent connection, re-opened once if the daemon restarted.
// Thread-safe: calls are serialized on an internal mutex; use one Client per thread for
// parallelism. A call's timeout counts from the call, its wait for the connection included (a
// stalled daemon fails every waiting thread within one timeout, not one after another). Depends
// only on the protocol header (no daemon, no CUDA).
#pragma once

#include <chrono>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "launch.h"
#include "protocol.h"

namespace ktune {

// Where a node-wide ktuned (the systemd unit, config/ktuned-node.yaml) listens for every user.
inline constexpr const char* k_system_socket_path = "/run/ktune/ktuned.sock";

struct ClientOptions {
  // Unix socket of the daemon. Default: $KTUNE_SOCKET, else $XDG_RUNTIME_DIR/ktune/ktuned.sock,
  // else /tmp/ktune-<uid>/ktuned.sock (the daemon's defaults), then system_socket_path.
  std::string socket_path;
  // Tried when socket_path and $KTUNE_SOCKET are unset and no daemon listens at the per-user
  // default: the node-wide daemon's socket. "" never tries one. Default /run/ktune/ktuned.sock.
  std::string system_socket_path = k_system_socket_path;
  // "host:port" to use TCP instead of the Unix socket. Default "" (Unix socket).
  std::string tcp_address;
  // Token sent with every TCP request. Default "".
  std::string token;
  // Deadline for one request (connect + send + reply). 0: none (wait while the connection is
  // open; for exports and imports of big tables). Default 2 s.
  std::chrono::milliseconds timeout{2000};
  // Deadline for a kernel request, which may wait for an NVRTC compile (0.3-6 s, more when the
  // daemon's compile pool is busy tuning). Default 60 s.
  std::chrono::milliseconds kernel_timeout{60'000};
  // Lookup answers kept in process, and for how long. Defaults 1024 and 60 s; 0 disables.
  size_t cache_capacity = 1024;
  std::chrono::milliseconds cache_ttl{60'000};
};

class Client {
 public:
  explicit Client(ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Protocol v2: each entry carries its launch description ("launch", client/launch.h).
  protocol::Expected<protocol::LookupReply> lookup(const protocol::LookupRequest& request);
  // The compiled cubin of a config, with its launch description (compiled by the daemon on
  // first request; see ktune::Kernel to launch it). Not cached here: keep the Kernel.
  protocol::Expected<protocol::KernelImage> kernel(const protocol::KernelRequest& request);
  protocol::Expected<protocol::Json> status();
  protocol::Expected<protocol::Json> templates();
  // Returns the rendered table ("json", "yaml", "csv"), optionally one device class only.
  protocol::Expected<protocol::Json> export_table(const std::string& format,
                                                  const std::string& device = "");
  // Imports a table (JSON, YAML or CSV, as export writes them) given as text (the daemon never
  // opens a path a client names). `origin` names the text in the daemon's log and in errors
  // ("origin:line:column"); default "request".
  protocol::Expected<protocol::Json> import_table(const std::string& table,
                                                  const std::string& origin = "");
  // Reads a table file here and imports its content; errors name the file as given (not_found
  // only for a file that does not exist; bad_request for one that cannot be read).
  protocol::Expected<protocol::Json> import_file(const std::string& path);

  // Background tuning (docs/protocol.md: tune, plan, jobs, job, cancel, watch, misses).
  struct TuneOptions {
    std::string device;         // "" = the daemon's first GPU
    std::string strategy;       // "" = the daemon's tuning.strategy
    int budget_trials = 0;      // 0 = the daemon's default
    double budget_seconds = 0;  // 0 = the daemon's default
    std::vector<std::string> templates;  // tune only these (empty: every template for the op)
    // Configs measured right after the heuristics', each a whole config of a template ({NAME:
    // value}).
    std::vector<std::map<std::string, std::int64_t>> seeds;
  };
  // Queues (or finds the queued) job; the reply's "job" has its id.
  protocol::Expected<protocol::Json> tune(const protocol::ProblemSpec& problem,
                                          const TuneOptions& options);
  // Queues jobs for every problem of a plan (YAML or JSON text), all or none.
  protocol::Expected<protocol::Json> plan(const std::string& plan_text,
                                          const std::string& device = "");
  protocol::Expected<protocol::Json> jobs(int limit = 50, const std::string& state = "");
  protocol::Expected<protocol::Json> job(const std::string& id);
  protocol::Expected<protocol::Json> cancel(const std::string& id);
  protocol::Expected<protocol::Json> misses(int limit = 20);
  // Streams a job's progress: `on_event` gets the job after each change; returns the job as it
  // ended. Fails with timeout when nothing arrives for `quiet_timeout`. Like every call, it
  // reconnects once when the connection went away or the daemon closed it while idle (before the
  // first event only, so no event comes twice).
  protocol::Expected<protocol::Json> watch(
      const std::string& id, const std::function<void(const protocol::Json&)>& on_event,
      std::chrono::milliseconds quiet_timeout = std::chrono::minutes(30));
  // Any op: sends {"v", "id", "op", ...body} and returns the "result" object.
  protocol::Expected<protocol::Json> call(const std::string& op,
                                          protocol::Json body = protocol::Json::object());
  // The same with an attachment: `body` must carry "attach": attachment.size().
  protocol::Expected<protocol::Json> call(const std::string& op, protocol::Json body,
                                          const std::string& attachment);

  // Drops the cached lookup answers.
  void clear_cache();
  const ClientOptions& options() const { return m_options; }
  static std::string default_socket_path();
  // The socket the client connects to (the per-user default, or the node-wide one it fell back
  // to); the TCP address when it uses TCP.
  const std::string& endpoint() const {
    return m_options.tcp_address.empty() ? m_options.socket_path : m_options.tcp_address;
  }

 private:
  // Connects (TCP or Unix) unless connected, by the deadline (time_point::max(): no limit).
  protocol::Expected<void> connect_locked(std::chrono::steady_clock::time_point deadline);
  using Clock = std::chrono::steady_clock;
  // The request line with this `id`; bad_request when a string of the body is not valid UTF-8
  // (JSON cannot carry it).
  protocol::Expected<std::string> request_line_locked(const std::string& op,
                                                      const protocol::Json& body, std::uint64_t id);
  protocol::Expected<void> send_locked(const std::string& line, Clock::time_point deadline);
  protocol::Expected<std::string> read_line_locked(Clock::time_point deadline,
                                                   std::chrono::milliseconds timeout);
  protocol::Expected<std::string> roundtrip_locked(const std::string& line,
                                                   Clock::time_point deadline,
                                                   std::chrono::milliseconds timeout);
  protocol::Expected<protocol::Json> call_with_timeout(const std::string& op, protocol::Json body,
                                                       const std::string& attachment,
                                                       std::chrono::milliseconds timeout);
  void disconnect_locked();
  // A reply line to request `id`: its result or error (the connection dropped where the reply
  // leaves it unusable), or nullopt for the daemon's idle-close notice when `may_retry` (the
  // caller connects and sends again).
  std::optional<protocol::Expected<protocol::Json>> take_reply_locked(const std::string& line,
                                                                      std::uint64_t id,
                                                                      bool may_retry);

  // Connects to the Unix socket (or its fallback); sets m_fd.
  protocol::Expected<void> connect_unix_locked(std::chrono::steady_clock::time_point deadline);

  ClientOptions m_options;
  std::string m_fallback_socket;  // system_socket_path when the default path was chosen
  std::timed_mutex m_mutex;
  int m_fd = -1;
  std::string m_pending;  // bytes read past the last reply
  std::uint64_t m_next_id = 1;

  struct Cached {
    protocol::LookupReply reply;
    std::chrono::steady_clock::time_point expires;
    std::list<std::string>::iterator lru;
  };
  std::mutex m_cache_mutex;  // guards the two below (never held across a request)
  std::unordered_map<std::string, Cached> m_cache;
  std::list<std::string> m_lru;  // most recent first
};

}  // namespace ktune
