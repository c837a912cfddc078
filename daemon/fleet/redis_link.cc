#include "daemon/fleet/redis_link.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <charconv>

namespace ktune {
namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = ms.count() / 1000;
  tv.tv_usec = (ms.count() % 1000) * 1000;
  return tv;
}

RedisReply copy_reply(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::string;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::array;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(copy_reply(r->element[i]));
      break;
    default:
      out.type = RedisReply::Type::nil;
  }
  return out;
}

}  // namespace

std::string RedisEndpoint::describe() const {
  return unix_path.empty() ? host + ":" + std::to_string(port) : "unix:" + unix_path;
}

Result<RedisEndpoint> parse_redis_endpoint(std::string_view text) {
  RedisEndpoint e;
  if (text.starts_with("unix:")) text.remove_prefix(5);
  if (text.starts_with("/")) {
    e.unix_path = std::string(text);
    return e;
  }
  const auto colon = text.rfind(':');
  int port = 0;
  if (colon == std::string_view::npos || colon == 0 ||
      std::from_chars(text.data() + colon + 1, text.data() + text.size(), port).ec != std::errc() ||
      port <= 0 || port > 65535)
    return fail(
        ErrorCode::invalid_argument,
        "fleet.redis: expected a Unix socket path or host:port, got '" + std::string(text) + "'");
  e.host = std::string(text.substr(0, colon));
  e.port = port;
  return e;
}

const RedisReply& RedisReply::at(size_t i) const {
  static const RedisReply k_nil;
  return i < elements.size() ? elements[i] : k_nil;
}

RedisLink::RedisLink(Options options) : m_options(std::move(options)) {}

RedisLink::~RedisLink() {
  close();
}

void RedisLink::close() {
  std::lock_guard lock(m_mutex);
  if (m_ctx) redisFree(m_ctx);
  m_ctx = nullptr;
  m_down_until = {};
}

bool RedisLink::up() const {
  std::lock_guard lock(m_mutex);
  return m_up;
}

std::string RedisLink::last_error() const {
  std::lock_guard lock(m_mutex);
  return m_error;
}

void RedisLink::drop_locked(const std::string& why) {
  if (m_ctx) redisFree(m_ctx);
  m_ctx = nullptr;
  m_up = false;
  m_error = why;
  m_down_until = std::chrono::steady_clock::now() + m_options.retry;
}

Result<void> RedisLink::connect_locked() {
  if (m_ctx) return {};
  if (std::chrono::steady_clock::now() < m_down_until)
    return fail(ErrorCode::unavailable,
                "Redis at " + m_options.endpoint.describe() + " unreachable: " + m_error);
  const timeval tv = to_timeval(m_options.timeout);
  const RedisEndpoint& e = m_options.endpoint;
  m_ctx = e.unix_path.empty() ? redisConnectWithTimeout(e.host.c_str(), e.port, tv)
                              : redisConnectUnixWithTimeout(e.unix_path.c_str(), tv);
  if (!m_ctx || m_ctx->err) {
    const std::string why = m_ctx ? m_ctx->errstr : "out of memory";
    drop_locked(why);
    return fail(ErrorCode::unavailable, "Redis at " + e.describe() + " unreachable: " + why);
  }
  redisSetTimeout(m_ctx, tv);
  m_applied_timeout = m_options.timeout;
  if (e.unix_path.empty()) redisEnableKeepAlive(m_ctx);
  if (!m_options.password.empty()) {
    const char* argv[] = {"AUTH", m_options.password.c_str()};
    const size_t lens[] = {4, m_options.password.size()};
    auto* r = static_cast<redisReply*>(redisCommandArgv(m_ctx, 2, argv, lens));
    const bool ok = r && r->type != REDIS_REPLY_ERROR;
    const std::string why = r ? (r->str ? std::string(r->str, r->len) : "") : m_ctx->errstr;
    if (r) freeReplyObject(r);
    if (!ok) {
      drop_locked("AUTH failed: " + why);
      return fail(ErrorCode::unavailable, "Redis at " + e.describe() + ": AUTH failed: " + why);
    }
  }
  m_up = true;
  m_error.clear();
  return {};
}

Result<RedisReply> RedisLink::command(const std::vector<std::string>& argv,
                                      std::chrono::milliseconds timeout) {
  std::lock_guard lock(m_mutex);
  if (auto ok = connect_locked(); !ok) return std::unexpected(ok.error());
  const auto want = timeout.count() > 0 ? timeout : m_options.timeout;
  if (want != m_applied_timeout) {
    redisSetTimeout(m_ctx, to_timeval(want));
    m_applied_timeout = want;
  }
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const auto& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r =
      static_cast<redisReply*>(redisCommandArgv(m_ctx, int(args.size()), args.data(), lens.data()));
  if (!r) {
    const std::string why = m_ctx->errstr[0] ? m_ctx->errstr : "connection lost";
    drop_locked(why);
    return fail(ErrorCode::unavailable, "Redis at " + m_options.endpoint.describe() + ": " + why);
  }
  if (r->type == REDIS_REPLY_ERROR) {
    std::string why(r->str, r->len);
    freeReplyObject(r);
    return fail(ErrorCode::internal, "Redis " + argv.front() + ": " + why);
  }
  RedisReply out = copy_reply(r);
  freeReplyObject(r);
  return out;
}

}  // namespace ktune
