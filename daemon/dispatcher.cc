#include "daemon/dispatcher.h"

#include <chrono>
#include <future>

#include "config/log.h"
#include "daemon/plain_line.h"
#include "daemon/process.h"

namespace ktune {
namespace {

using protocol::ErrorKind;
using Json = protocol::Json;

template <OpReply (*F)(OpContext&, const protocol::Request&)>
std::string as_line(OpContext& ctx, const protocol::Request& req) {
  return reply_line(ctx, req, F(ctx, req));
}

// In protocol::k_ops order.
constexpr OpHandler k_handlers[] = {
    {"lookup", &op_lookup, nullptr, &op_lookup_cached},
    {"status", &as_line<&op_status>},
    {"templates", &as_line<&op_templates>},
    {"export", &as_line<&op_export>},
    {"import", &as_line<&op_import>},
    {"tune", &as_line<&op_tune>},
    {"plan", &as_line<&op_plan>},
    {"jobs", &as_line<&op_jobs>},
    {"job", &as_line<&op_job>},
    {"cancel", &as_line<&op_cancel>},
    {"watch", nullptr, &op_watch},
    {"misses", &as_line<&op_misses>},
    {"kernel", nullptr, &op_kernel},
    {"fleet", &as_line<&op_fleet>},
    {"pin", &as_line<&op_pin>},
    {"unpin", &as_line<&op_unpin>},
    {"pins", &as_line<&op_pins>},
};
static_assert(std::size(k_handlers) == std::size(protocol::k_ops));

const OpHandler* find_handler(std::string_view name) {
  for (const auto& h : k_handlers)
    if (h.name == name) return &h;
  return nullptr;
}

// At log.level debug, every request is logged when its last reply line is emitted (before the
// client can read it): op, id, peer, time, and the error of a refused one. The request and reply
// are parsed again for this only when debug is on: the hot path pays one relaxed load.
Emit logged(std::string_view line, const Peer& peer, Emit emit) {
  const Json request = Json::parse(line, nullptr, false);
  std::string op = "?", id = "null";
  if (request.is_object()) {
    if (auto it = request.find("op"); it != request.end() && it->is_string())
      op = it->get<std::string>();
    if (auto it = request.find("id"); it != request.end()) id = it->dump();
  }
  const auto start = std::chrono::steady_clock::now();
  return [emit = std::move(emit), op, id, start, tcp = peer.tcp](std::string reply, bool last) {
    if (last) {
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count();
      const Json parsed = Json::parse(reply, nullptr, false);
      const Json* error = nullptr;
      if (parsed.is_object())
        if (auto it = parsed.find("error"); it != parsed.end() && it->is_object()) error = &*it;
      if (error)
        log(LogLevel::debug, "request",
            {{"op", op},
             {"id", id},
             {"peer", tcp ? "tcp" : "unix"},
             {"us", us},
             {"error", error->value("code", std::string("?"))},
             {"message", error->value("message", std::string())}});
      else
        log(LogLevel::debug, "request",
            {{"op", op}, {"id", id}, {"peer", tcp ? "tcp" : "unix"}, {"us", us}, {"ok", "true"}});
    }
    return emit(std::move(reply), last);
  };
}

// A request from a plain lookup line, or nullptr.
std::shared_ptr<protocol::Request> plain_request(std::string_view line) {
  auto plain = parse_plain_lookup(line);
  if (!plain) return nullptr;
  auto req = std::make_shared<protocol::Request>();
  req->v = plain->version;
  req->id = std::move(plain->id);
  req->op = "lookup";
  req->lookup = std::make_shared<const protocol::LookupRequest>(std::move(plain->request));
  return req;
}

}  // namespace

std::span<const OpHandler> op_handlers() {
  return k_handlers;
}

std::string reply_line(OpContext& ctx, const Json& id, OpReply reply, int v) {
  if (reply) return protocol::reply_ok(id, std::move(*reply), v);
  ctx.metrics.count_error(reply.error().kind);
  return protocol::reply_error(id, reply.error().kind, reply.error().message, v);
}

std::string reply_line(OpContext& ctx, const protocol::Request& req, OpReply reply) {
  return reply_line(ctx, req.id, std::move(reply), req.v);
}

std::unexpected<protocol::Error> as_protocol(const Error& e) {
  switch (e.code) {
    case ErrorCode::invalid_argument:
      return protocol::error(ErrorKind::bad_request, e.message);
    case ErrorCode::not_found:
      return protocol::error(ErrorKind::not_found, e.message);
    case ErrorCode::already_exists:
      return protocol::error(ErrorKind::already_exists, e.message);
    case ErrorCode::unavailable:
      return protocol::error(ErrorKind::unavailable, e.message);
    default:
      return protocol::error(ErrorKind::internal, e.message);
  }
}

Dispatcher::Dispatcher(OpContext& ctx, Executor* executor) : m_ctx(ctx), m_executor(executor) {}

bool Dispatcher::append_fast(std::string_view line, const Peer& peer, std::string& out) {
  // TCP requests carry a token to check: no text cache. Every Unix peer that got a session may
  // run read ops, and the text cache holds lookups only.
  if (peer.tcp) return false;
  return m_ctx.lookups.fast_reply(line, out);
}

std::optional<Executor::Lane> Dispatcher::make_lane() {
  if (!m_executor) return std::nullopt;
  return m_executor->make_lane();
}

void Dispatcher::handle(std::string_view line, std::string attachment, const Peer& peer, Emit emit,
                        const Executor::Lane* lane) {
  // Nothing a client sends may throw out of here (the session would lose the connection and the
  // replies owed on it); a throw is a bug, answered `internal` for this line alone.
  Json id;
  int v = protocol::k_min_version;  // the request's, once read: every reply echoes it
  if (log_enabled(LogLevel::debug)) emit = logged(line, peer, std::move(emit));
  try {
    policy(line, std::move(attachment), peer, emit, id, v, lane);
  } catch (const std::exception& e) {
    log(LogLevel::error, "request_failed", {{"what", e.what()}});
    emit(reply_line(m_ctx, id, protocol::error(ErrorKind::internal, e.what()), v), true);
  }
}

void Dispatcher::policy(std::string_view line, std::string attachment, const Peer& peer, Emit& emit,
                        Json& id, int& v, const Executor::Lane* lane) {
  // --- policy: parse, version ---
  // A plain lookup line (daemon/plain_line.h) is read without the JSON parser. Not from TCP: the
  // general parser reads its token.
  std::shared_ptr<protocol::Request> req;
  if (attachment.empty() && !peer.tcp) req = plain_request(line);
  if (req) {
    id = req->id;
    v = req->v;
  } else {
    auto parsed = protocol::parse_request(line, &id, &v);
    if (!parsed) {
      m_ctx.metrics.count_request("other");
      m_ctx.metrics.count_error(parsed.error().kind);
      return void(
          emit(protocol::reply_error(id, parsed.error().kind, parsed.error().message, v), true));
    }
    req = std::make_shared<protocol::Request>(std::move(*parsed));
    req->attachment = std::move(attachment);
  }
  // --- policy: authentication, before any handler or cache ---
  const Rights rights = peer.tcp ? tcp_rights(m_ctx.config, req->body) : peer.rights;
  if (rights == Rights::none) {
    m_ctx.metrics.count_request(req->op);
    return void(emit(
        reply_line(m_ctx, *req,
                   protocol::error(ErrorKind::unauthorized,
                                   peer.tcp ? "TCP requests must carry the configured \"token\""
                                            : "this peer may not use the daemon")),
        true));
  }
  // --- policy: the op table ---
  const protocol::OpInfo* info = protocol::find_op(req->op);
  const OpHandler* handler = find_handler(req->op);
  if (!info || !handler) {
    m_ctx.metrics.count_request("other");
    return void(emit(
        reply_line(m_ctx, *req,
                   protocol::error(ErrorKind::unknown_op,
                                   "unknown op '" + req->op + "' (" + protocol::op_names() + ")")),
        true));
  }
  m_ctx.metrics.count_request(req->op);
  // --- policy: rights (admin ops), before any handler or cache ---
  if (auto allowed = authorize(*info, rights, peer, m_ctx.config); !allowed)
    return void(emit(reply_line(m_ctx, *req, std::unexpected(allowed.error())), true));
  // --- fast ops from memory on this thread ---
  if (handler->fast) {
    if (!peer.tcp) req->raw = std::string(line);  // text caches serve trusted peers only
    if (auto reply = handler->fast(m_ctx, *req)) return void(emit(std::move(*reply), true));
  }
  // --- everything else on the executor ---
  // The request moves into the job: nothing below uses it, and the job is its last owner.
  auto run = [this, req = std::move(req), handler, emit]() mutable {
    try {
      if (handler->stream)
        handler->stream(m_ctx, *req, emit);
      else
        emit(handler->call(m_ctx, *req), true);
    } catch (const std::exception& e) {
      log(LogLevel::error, "handler_failed", {{"op", req->op}, {"what", e.what()}});
      emit(reply_line(m_ctx, *req, protocol::error(ErrorKind::internal, e.what())), true);
    }
    // A large table imported freed far more than the daemon will allocate again: handed back
    // once the request itself is gone. Only after imports (admin): other ops ignore attachments,
    // and a client sending big ones must not make the executor walk the heap at will.
    if (req->op == "import" && req->attachment.size() >= k_trim_after_attachment_bytes) {
      req.reset();
      trim_heap("import");
    }
  };
  if (!m_executor)
    run();
  else if (lane && handler->fast)  // a cold lookup: on the client's lane
    Executor::post(*lane, std::move(run));
  else
    m_executor->post(std::move(run));
}

Response Dispatcher::handle(std::string_view line, const Peer& peer, std::string attachment) {
  if (attachment.empty())  // as a session does before handle()
    if (auto fast = try_fast(line, peer)) return Response{std::move(*fast)};
  auto done = std::make_shared<std::promise<void>>();
  auto out = std::make_shared<std::string>();
  auto mutex = std::make_shared<std::mutex>();
  auto finished = done->get_future();
  handle(line, std::move(attachment), peer, [done, out, mutex](std::string l, bool last) {
    std::lock_guard lock(*mutex);
    *out += l;
    if (last) done->set_value();
    return true;
  });
  finished.wait();
  std::lock_guard lock(*mutex);
  return Response{*out};
}

}  // namespace ktune
