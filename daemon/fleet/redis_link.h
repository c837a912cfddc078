// RedisLink: one synchronous connection to the fleet's Redis (hiredis 0.14, RESP2), opened on
// first use and re-opened after a failure.
//
// Every call has a deadline (connect and each command). A connection that fails is closed and
// the link stays down for a retry interval: calls made meanwhile fail at once with
// ErrorCode::unavailable instead of each waiting for a timeout, so a node whose Redis is gone
// keeps serving and tuning at full speed. AUTH is sent after every connect when a password is
// set. TLS is not supported (hiredis 0.14 has none).
//
// Thread-safe: commands are serialized on an internal mutex (one in flight per link). Callers
// that block for long (XREAD BLOCK) use a link of their own.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.h"

struct redisContext;

namespace ktune {

// Where Redis listens: a Unix socket path, or a TCP host and port.
struct RedisEndpoint {
  std::string unix_path;  // non-empty: a Unix socket
  std::string host;
  int port = 0;

  std::string describe() const;
};
// "/path", "unix:/path" or "host:port" (config key fleet.redis).
Result<RedisEndpoint> parse_redis_endpoint(std::string_view text);

// A reply, copied out of hiredis's reply object.
struct RedisReply {
  enum class Type { nil, string, integer, array, status };
  Type type = Type::nil;
  std::string str;  // string and status replies
  long long integer = 0;
  std::vector<RedisReply> elements;  // array replies

  bool is_nil() const { return type == Type::nil; }
  // The element at `i`, or a nil reply when there is none.
  const RedisReply& at(size_t i) const;
};

class RedisLink {
 public:
  struct Options {
    RedisEndpoint endpoint;
    std::string password;
    std::chrono::milliseconds timeout{1000};  // connect, and each command
    std::chrono::milliseconds retry{500};     // how long a failed link stays down
  };
  explicit RedisLink(Options options);
  ~RedisLink();
  RedisLink(const RedisLink&) = delete;
  RedisLink& operator=(const RedisLink&) = delete;

  // Runs one command. ErrorCode::unavailable when Redis cannot be reached or stops answering
  // (the link is then down for `retry`), ErrorCode::internal for an error reply (the link stays
  // up). `timeout` overrides the deadline for this command (for blocking reads).
  Result<RedisReply> command(const std::vector<std::string>& argv,
                             std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

  // Whether the last attempt reached Redis.
  bool up() const;
  // What went wrong last ("" while up).
  std::string last_error() const;
  // Closes the connection now (the next command reconnects, without waiting for the retry).
  void close();

 private:
  Result<void> connect_locked();
  void drop_locked(const std::string& why);

  const Options m_options;
  mutable std::mutex m_mutex;
  redisContext* m_ctx = nullptr;
  std::chrono::milliseconds m_applied_timeout{0};
  std::chrono::steady_clock::time_point m_down_until{};
  bool m_up = false;
  std::string m_error;
};

}  // namespace ktune
