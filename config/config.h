// DaemonConfig: everything an operator can set for ktuned, and how it is loaded.
//
// Plain struct, every field documented with its default. Values come, highest precedence first,
// from command-line flags (`--set key=value` and the named flags), `KTUNE_*` environment
// variables, a YAML file, and the embedded defaults, so `ktuned` runs with no file at all.
// Every key lives in one table (config_keys()) that drives YAML, environment and flag parsing,
// the documentation and a consistency test. Loading is pure (no I/O beyond reading the file) and
// thread-compatible: build a DaemonConfig once at start and share it read-only.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.h"
#include "config/log.h"

namespace ktune {

struct DaemonConfig {
  // ---- server ----
  // Unix socket clients connect to. Default: $XDG_RUNTIME_DIR/ktune/ktuned.sock, or
  // /tmp/ktune-<uid>/ktuned.sock when XDG_RUNTIME_DIR is unset. Created with mode 0660.
  std::string socket_path;
  // Optional TCP listener "host:port". Default "" (off). Needs tcp_token (TCP peers have no
  // credentials to check), on loopback too: any local user and any browser page can reach it.
  std::string tcp_address;
  // Shared secret a TCP client must send as "token" in each request; grants read ops (lookup,
  // status, export, ...). Required when tcp_address is set. Default "" (none).
  std::string tcp_token;
  // A second token that grants admin ops too (import, tune, plan, cancel) over TCP; must differ
  // from tcp_token. Default "": admin ops only over the Unix socket.
  std::string tcp_admin_token;
  // Group (name or numeric gid) whose members may run admin ops over the Unix socket. The
  // daemon's own user and root always may; other members of the daemon's group run read ops
  // only. Default "" (no group).
  std::string admin_group;
  // Most simultaneous client connections; further ones are refused with an error. Default 1024.
  int max_connections = 1024;
  // A request line must arrive within this many ms of the previous reply. Default 30000.
  int read_timeout_ms = 30000;
  // Threads serving client sessions, each with its own io_context (the listeners have one more).
  // One answers ~350k lookups/s on a 2-core VM; raise it on nodes with many busy clients and
  // cores to spare. Default 1.
  int io_threads = 1;
  // Prometheus metrics and /livez /readyz over HTTP, "host:port". Default "127.0.0.1:9464";
  // "" turns it off. Port 0 picks a free port (logged at start).
  std::string metrics_address = "127.0.0.1:9464";
  // Serve /report on the metrics listener. Off by default: the page shows this node's winners,
  // jobs and store to whoever reaches that port, with none of the socket's access rules.
  bool report_page = false;
  // Largest attachment a request may carry (bytes sent after its line, e.g. an imported table;
  // docs/protocol.md). Default 268435456 (256 MiB).
  int max_attachment_bytes = 256 << 20;
  // Threads for work that must never run on an I/O thread: imports, exports, cold lookups, job
  // control. Cached lookups never queue behind them. Default 2.
  int executor_threads = 2;
  // A lookup of a shape not asked before is answered on its I/O thread, without the round trip
  // through the executor, when the recent builds of its cost class (op, types, layout, each dim's
  // power of two) averaged at most this many microseconds of CPU and it asks for at most 8
  // entries; anything else (and every class until one build of it was measured) goes to the
  // executor. 0 = always the executor. Default 30.
  int inline_build_us = 30;
  // Unsent reply bytes per connection past which the daemon stops reading that connection's
  // requests until the client reads. Default 4194304 (4 MiB).
  int max_output_bytes = 4 << 20;
  // A connection whose client accepts no reply byte for this long while replies wait is closed
  // (a client that pipelines requests and never reads). Default 30000.
  int write_stall_timeout_ms = 30000;
  // On stop (SIGTERM), the time a connection has to receive the replies of requests already
  // running (an import, a compile, a watch's last line) before it is closed. Keep it under the
  // unit's TimeoutStopSec (30 s). Default 10000.
  int drain_timeout_ms = 10000;
  // Memory for cached lookup answers, in bytes: 1/2 for the answers by (device, problem, limit),
  // 1/2 for the request lines holding them (lines over 4 KiB are never cached). Each entry is
  // charged its key, its content (a line: its answer, in full) and its bookkeeping; LRU evicts.
  // 0 caches nothing. Default 67108864 (64 MiB).
  int answer_cache_bytes = 64 << 20;

  // ---- store ----
  // RocksDB database and other state. Default: $XDG_STATE_HOME/ktune, else ~/.local/state/ktune.
  std::string data_dir;
  // Tuning tables (export format) merged into the store at every start, so a node without a GPU
  // serves answers measured elsewhere. Default: the shipped tables/ directory's *.json files.
  std::vector<std::string> seed_tables;

  // ---- templates ----
  // Directories scanned for <name>/<name>.yaml template manifests. Default: the built-in
  // templates directory.
  std::vector<std::string> template_dirs;
  // NVRTC compile threads. Default 0: one per CPU core.
  int compile_threads = 0;

  // ---- devices and tuning ----
  // GPU ordinals this node tunes on. Default empty: every GPU the driver shows.
  std::vector<int> devices;
  // Search strategy: exhaustive | random | anneal | model. Default "model".
  std::string strategy = "model";
  // Most configs measured per tuning job. Default 256.
  int budget_trials = 256;
  // Most wall-clock seconds per tuning job. Default 600.
  double budget_seconds = 600;
  // Fastest configs of a job's search re-timed interleaved before its winner is declared. The
  // search times each config in short bursts, at clocks a GPU under its power cap does not keep;
  // the finalists are timed together in steady state, so more finalists let a config that ranked
  // lower in bursts win where it is faster in steady state (bench/NOTES.md, "gemm_tma step 4").
  // Default 5.
  int finalists = 5;
  // Rounds of the finalists' re-timing: each round times every finalist once, in a rotated order,
  // for a 1/rounds share of the time one of them gets; the winner is ranked by the median over
  // rounds. A GPU at its power cap drifts in clock over the re-timing, so more, shorter rounds
  // sample every finalist across the same drift (bench/NOTES.md, "Finalist re-time rounds").
  // 0: three per finalist, at least 5. Default 0.
  int retime_rounds = 0;
  // What L2 holds when a timed launch starts: "flushed" (a write over twice the L2 size right
  // before each timed launch, as triton.testing.do_bench does: how users time kernels, and where
  // a config that leans on L2 left warm by the previous launch stops winning) or "rotated"
  // (launches back to back, inputs rotated over sets that span 3x L2). bench/NOTES.md, "Timing
  // with the L2 flushed". Default "flushed".
  std::string timing_l2 = "flushed";
  // When tuning lanes may use their GPU: "idle" (only while no foreign process uses it and its
  // utilization is at or under idle_threshold_percent for idle_settle_seconds), "always", or
  // "never" (jobs queue but do not run). Default "idle".
  std::string gpu_policy = "idle";
  // Background tuning runs only while the GPU's utilization (NVML) is at or under this percent.
  // Default 5.
  double idle_threshold_percent = 5;
  // How long a GPU must stay idle before a paused lane resumes, in seconds. Default 5.
  double idle_settle_seconds = 5;
  // How often each lane samples its GPU (NVML) for foreign work, in ms. Default 200.
  int idle_poll_ms = 200;
  // Lookups answered nearest/heuristic/stale become tuning jobs once the key's expected GPU time
  // saved passes miss_threshold_us. Default true.
  bool tune_on_miss = true;
  // Expected GPU microseconds saved (misses x expected runtime x expected gain) at which a missed
  // key becomes a job. Clients cache answers, so one lookup may stand for every launch of a run:
  // the default lets a single miss of any kernel over ~3 us qualify. Default 1.
  double miss_threshold_us = 1;
  // Most jobs waiting in the queue; further misses wait (tune requests are refused). Default 256.
  int max_queued_jobs = 256;
  // Memory for the missed keys background tuning works through, in bytes. Each key is charged
  // its key text, problem, device, reason and index nodes; past the bound the key worth least is
  // forgotten. Default 33554432 (32 MiB: on the order of 60,000 keys).
  int miss_tracker_bytes = 32 << 20;
  // After a missed key's job failed, seconds before misses may make it a job again; doubled with
  // each failure in a row (at most 64x). Default 60.
  double miss_retry_seconds = 60;
  // The GPU worker executable. Default "": ktune-worker beside ktuned (or $KTUNE_WORKER).
  std::string worker_binary;
  // Deadline for one candidate on the worker (load, verify, time); past it the worker is killed
  // and the config blocklisted. Default 20000.
  int trial_timeout_ms = 20000;

  // ---- lookup ----
  // Largest distance (sum over dims of |log2 a - log2 b|) at which a tuned shape answers a lookup
  // for another shape as "nearest". Default 2.0.
  double nearest_radius = 2.0;

  // ---- log ----
  // debug | info | warn | error | off. Default info.
  LogLevel log_level = LogLevel::info;
  // text | json (JSON lines on stderr). Default text.
  LogFormat log_format = LogFormat::text;
  // File the log goes to instead of stderr (the daemon's stderr is pointed at it, so worker
  // processes log there too); reopened on SIGHUP, so logrotate can move it away. Default "".
  std::string log_file;

  // ---- fleet (docs/fleet.md; nothing below changes anything while fleet_redis is "") ----
  // The fleet's Redis: a Unix socket path ("/run/redis/redis.sock", or "unix:/path") or
  // "host:port". Nodes publish their winners there, merge the others', and claim keys before
  // tuning them so each key is tuned once fleet-wide. Lookups never wait on it. Default "" (off).
  std::string fleet_redis;
  // Password sent with AUTH after connecting. Default "" (no AUTH). TLS is not supported.
  std::string fleet_password;
  // Prefix of every Redis key ktune uses, so fleets (or tests) can share one Redis. Letters,
  // digits, '_', '-' and '.'. Default "ktune".
  std::string fleet_namespace = "ktune";
  // This node's name in the fleet and in the winners it measures. Default "": the host name.
  std::string fleet_node_name;
  // How long a claim on a key (a lease) lasts unless renewed; the tuning node renews it every
  // third of this. A node that dies mid-job holds the key at most this long. Default 30000.
  int fleet_lease_ms = 30'000;
  // Deadline for connecting to Redis and for each command; past it the node counts Redis as
  // unreachable (it keeps serving and tuning alone) and retries every 500 ms. Default 1000.
  int fleet_timeout_ms = 1000;
};

// Where a configuration value came from; kept for `ktune status` and error messages.
enum class ConfigSource { default_value, file, env, flag };

// One row of the key table.
struct ConfigKey {
  std::string_view name;  // dotted YAML path, e.g. "server.socket"
  std::string_view env;   // environment variable, e.g. "KTUNE_SOCKET"
  std::string_view help;  // one line for --help and docs
  // The values a key naming one of a fixed set accepts (a strategy, a GPU policy, an L2 timing),
  // as the component that reads it names them; empty for every other key. Listed here because
  // config sits below those components; a test holds each list equal to its owner's.
  std::span<const std::string_view> choices = {};
};

// Every key ktuned understands, in documentation order.
std::span<const ConfigKey> config_keys();

// The embedded defaults, with paths resolved from the environment (XDG dirs, HOME, uid).
DaemonConfig default_config();

// Applies a YAML file over `config`. Unknown keys, wrong types and out-of-range values fail with
// "path:line: key: what is wrong"; on failure `config` is left unchanged.
Result<void> apply_config_file(DaemonConfig& config, const std::string& path);

// Applies YAML text (used by apply_config_file and tests); `origin` names it in errors.
Result<void> apply_config_yaml(DaemonConfig& config, std::string_view yaml,
                               std::string_view origin);

// Applies KTUNE_* variables from `env` (name -> value). Lists are ':'- or ','-separated.
Result<void> apply_config_env(DaemonConfig& config, const std::map<std::string, std::string>& env);

// Reads the process environment into the map apply_config_env takes (KTUNE_* only).
std::map<std::string, std::string> ktune_environment();
// The KTUNE_* names in `env` that no ktune program reads (neither a key's override nor
// KTUNE_HOME, KTUNE_WORKER or a test hook), each followed by the closest override
// when one is near ("KTUNE_NEAREST_RADUIS (did you mean KTUNE_NEAREST_RADIUS?)"): a misspelt
// override is otherwise ignored without a word. The daemon logs them at start.
std::vector<std::string> unknown_environment(const std::map<std::string, std::string>& env);
// The KTUNE_* names read outside the key table, which unknown_environment() lets pass.
std::span<const std::string_view> other_environment();

// Applies one "key=value" assignment as a command-line flag would.
Result<void> apply_config_assignment(DaemonConfig& config, std::string_view assignment);

// Checks cross-field rules (e.g. a TCP listener needs a token).
Result<void> validate_config(const DaemonConfig& config);

// The configuration as YAML, every key present; what `ktuned --print-config` shows.
std::string config_to_yaml(const DaemonConfig& config);

// Paths ----------------------------------------------------------------------------------------

// The built-in template and shipped table directories: $KTUNE_HOME/{templates,tables} when set,
// next to the executable when installed (../share/ktune/...), else the source tree the binary was
// built from.
std::string builtin_template_dir();
std::string builtin_table_dir();

// Expands a leading "~/" with $HOME.
std::string expand_home(std::string_view path);

}  // namespace ktune
