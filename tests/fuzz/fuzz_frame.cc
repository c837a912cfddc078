// Fuzz target: the session's frame handling — line splitting, blank and \r\n lines, the 64 KiB
// frame limit, attachment headers ("attach": N, protocol::attachment_size) and their bytes, the
// HTTP refusal, pipelining and the bounds that pause the reader — on a real Session over a
// socketpair. Input: the bytes a client sends before closing its side.
//
// Two handlers stand behind the session (docs/reliability.md, "Fuzzing"):
// - scripted (most inputs): a RequestHandler whose replies are known in advance, keyed by each
//   line's first byte: answered from try_fast, at once, streamed in several lines, or later from
//   posted handlers (as the executor would, so slots complete out of order). A model of the
//   framing (expected_output) then says the exact bytes the client must receive: every line
//   handed over once, in order, with its exact text and attachment, each request's reply lines
//   together and in request order, then the closing error or HTTP refusal, nothing after it.
//   Small bounds (attachments up to k_scripted_max_attach bytes, 64 bytes of unsent output)
//   put both sides of every limit within libFuzzer's -max_len, and half the inputs run with a
//   turn budget of 0 (the session yields before every line). No JSON is parsed per line but
//   the session's own ("attach"), so an input costs about what the session costs.
// - real (one input in k_real_every, by a hash of the input; every input in the corpus replay):
//   the daemon's Dispatcher over fuzz_support.h's parts, checked as before this split: every
//   reply line is a well-formed protocol object, the HTTP refusal is exact and last, no more
//   replies than lines. It keeps the end-to-end path, with real replies and real timing, in
//   the run. What the dispatcher answers to a line is fuzz_request's target; the session
//   never reads a reply, and only its handler's timing and reply sizes reach the framing.
// Both: the session ends (io_context::run returns: reads to EOF, answers, closes) and is freed.
#include <signal.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "daemon/access.h"
#include "daemon/session.h"
#include "tests/fuzz/frame_protocol_calls.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ktune;
namespace asio = boost::asio;
using Socket = UnixSessionSocket;

namespace {

// One input in this many goes through the real dispatcher while fuzzing.
constexpr std::uint64_t k_real_every = 32;
// Inputs up to this size are written into the socket before the session runs (a socketpair's
// buffer holds far more; the fuzzer's inputs are at most -max_len, 1 KiB or less).
constexpr size_t k_prewrite_bytes = 16 * 1024;
// The scripted handler's bound on "attach": N (the daemon's is max_attachment_bytes, 256 MiB).
constexpr size_t k_scripted_max_attach = 300;

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// What the scripted handler does with a line, from its first byte.
enum class Kind { fast, now, stream, later };
Kind kind_of(std::string_view line) {
  return Kind(static_cast<unsigned char>(line.front()) % 4);
}
// How many reply lines a request gets (stream and later: 2..4) and, for later, how many event
// loop turns pass before each.
size_t parts_of(std::string_view line, Kind kind) {
  return kind == Kind::stream || kind == Kind::later ? 2 + line.size() % 3 : 1;
}
int turns_of(std::string_view line) {
  return 1 + int(line.size() % 2);
}

// Reply line `part` of the `seq`th request handed over: names everything the session passed.
std::string reply_text(size_t seq, char how, size_t part, size_t parts, std::string_view line,
                       std::string_view attachment) {
  return std::to_string(seq) + ' ' + how + ' ' + std::to_string(part) + '/' +
         std::to_string(parts) + ' ' + std::to_string(line.size()) + ':' +
         std::to_string(fnv1a(line)) + ' ' + std::to_string(attachment.size()) + ':' +
         std::to_string(fnv1a(attachment)) + '\n';
}

// Runs `fn` after `turns` handlers posted one after another (an executor's reply arrives later).
void after_turns(asio::io_context& io, int turns, std::function<void()> fn) {
  if (turns == 0) return fn();
  asio::post(io, [&io, turns, fn = std::move(fn)]() mutable {
    after_turns(io, turns - 1, std::move(fn));
  });
}

class ScriptedHandler final : public RequestHandler {
 public:
  explicit ScriptedHandler(asio::io_context& io) : m_io(io) {}

  bool append_fast(std::string_view line, const Peer&, std::string& out) override {
    if (kind_of(line) != Kind::fast) return false;
    out += reply_text(m_seq++, 'f', 1, 1, line, {});
    return true;
  }
  void handle(std::string_view line, std::string attachment, const Peer&, Emit emit,
              const Executor::Lane*) override {
    const size_t seq = m_seq++;
    const Kind kind = kind_of(line);
    const size_t parts = parts_of(line, kind);
    if (kind != Kind::later) {
      for (size_t p = 1; p <= parts; ++p)
        emit(reply_text(seq, 'h', p, parts, line, attachment), p == parts);
      return;
    }
    // Each part a few turns after the one before, from handlers the session does not own.
    auto shared = std::make_shared<Emit>(std::move(emit));
    const int turns = turns_of(line);
    for (size_t p = 1; p <= parts; ++p)
      after_turns(m_io, turns * int(p),
                  [shared, text = reply_text(seq, 'h', p, parts, line, attachment),
                   last = p == parts] { (*shared)(text, last); });
  }
  size_t max_attachment_bytes() const override { return k_scripted_max_attach; }

 private:
  asio::io_context& m_io;
  size_t m_seq = 0;  // requests handed over so far
};

// What a client sending `input` and then closing its side must receive from a session over the
// scripted handler, and how many errors the session counts.
struct Expected {
  std::string output;
  std::uint64_t errors = 0;
};

Expected expected_output(std::string_view input) {
  Expected e;
  size_t seq = 0;
  for (size_t pos = 0;;) {
    const size_t nl = input.find('\n', pos);
    const size_t line_end = nl == std::string_view::npos ? input.size() : nl;
    if (line_end - pos >= protocol::k_max_frame) {  // the 64 KiB buffer filled, no newline
      e.output += fuzz::error_line(protocol::ErrorKind::frame_too_large,
                                   "request line exceeds " + std::to_string(protocol::k_max_frame) +
                                       " bytes; closing the connection");
      ++e.errors;
      return e;
    }
    if (nl == std::string_view::npos) return e;  // EOF, perhaps mid-line: nothing answers that
    std::string_view line = input.substr(pos, nl - pos);
    pos = nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (looks_like_http(line)) {
      e.output += http_refusal();
      return e;
    }
    protocol::Json id;
    auto attach = fuzz::attachment_size_of(line, k_scripted_max_attach, &id);
    if (!attach) {
      e.output += fuzz::error_line(attach.error().kind, attach.error().message, id);
      ++e.errors;
      return e;
    }
    if (input.size() - pos < *attach) return e;  // EOF mid-attachment: the request is dropped
    const std::string_view attachment = input.substr(pos, *attach);
    pos += *attach;
    const Kind kind = kind_of(line);
    if (kind == Kind::fast && attachment.empty()) {
      e.output += reply_text(seq++, 'f', 1, 1, line, {});
      continue;
    }
    const size_t parts = parts_of(line, kind);
    for (size_t p = 1; p <= parts; ++p)
      e.output += reply_text(seq, 'h', p, parts, line, attachment);
    ++seq;
  }
}

// Runs one session over a socketpair: the client writes `input`, closes its sending side and
// reads until the daemon closes. Returns what the client read. The session must end and be freed.
std::string drive(asio::io_context& io, RequestHandler& handler, Metrics& metrics,
                  SessionLimits limits, std::string_view input) {
  Socket daemon_side(io), client(io);
  asio::local::connect_pair(daemon_side, client);
  auto session =
      std::make_shared<Session<Socket>>(std::move(daemon_side), handler, metrics, Peer{}, limits);
  const std::weak_ptr<Session<Socket>> alive = session;
  session->start();
  session.reset();
  // What fits in the socket's buffer is written before the loop runs (one send, no handler);
  // a larger input (the committed 64 KiB frame-limit ones) as the session reads it.
  auto close_sending = [&client] {
    boost::system::error_code ignored;
    client.shutdown(Socket::shutdown_send, ignored);
  };
  if (input.size() <= k_prewrite_bytes) {
    asio::write(client, asio::buffer(input));
    close_sending();
  } else {
    asio::async_write(client, asio::buffer(input),
                      [&](boost::system::error_code, size_t) { close_sending(); });
  }
  std::string output;
  char buf[65536];
  std::function<void()> read_more = [&] {
    client.async_read_some(asio::buffer(buf), [&](boost::system::error_code ec, size_t n) {
      output.append(buf, n);
      if (!ec) read_more();
    });
  };
  read_more();
  io.run();
  if (!alive.expired()) fuzz::violated("the session outlived its connection", output);
  if (metrics.connections() != 0) fuzz::violated("a connection still counted as open", output);
  return output;
}

// One io_context for every input: run() returns only once nothing is left in it (the session,
// its sockets and timers are gone), so an input finds it as the last one left it; building one
// per input cost an epoll, an eventfd and a timerfd each time.
asio::io_context& shared_io() {
  static asio::io_context io(1);
  io.restart();
  return io;
}

void run_scripted(std::string_view input) {
  asio::io_context& io = shared_io();
  ScriptedHandler handler(io);
  Metrics metrics;
  SessionLimits limits{std::chrono::milliseconds(10'000)};
  limits.max_output_bytes = 64;  // a reply or two: the reader pauses for the writer
  // Half the inputs (by the hash's next bit) yield to the loop before every line, as a session
  // whose lines each outlast the budget does; the others never do (their lines are fast).
  if ((fnv1a(input) / k_real_every) % 2 == 1) limits.turn_budget = std::chrono::microseconds(0);
  const std::string output = drive(io, handler, metrics, limits, input);
  const Expected want = expected_output(input);
  if (output != want.output)
    fuzz::violated("output differs from the framing model",
                   "got:\n" + output + "\nwanted:\n" + want.output);
  if (metrics.errors() != want.errors)
    fuzz::violated("errors counted", std::to_string(metrics.errors()) + " counted, " +
                                         std::to_string(want.errors) + " expected");
}

void run_real(std::string_view input) {
  auto parts = fuzz::make_parts();
  asio::io_context& io = shared_io();
  const std::string output = drive(io, parts->dispatcher, parts->metrics,
                                   SessionLimits{std::chrono::milliseconds(10'000)}, input);
  // A line that looks like HTTP is answered with the HTTP refusal and the connection closes
  // (issue 9 item 4): that refusal is the last thing sent, after the JSON replies owed before it.
  // Only at the start of a line: a JSON reply may quote "HTTP/1.1 " from the request inside an
  // error message (a parse error's "last read: ..."), which is not the refusal.
  std::string_view json_part = output;
  size_t at = output.starts_with("HTTP/1.1 ") ? 0 : output.find("\nHTTP/1.1 ");
  if (at != std::string::npos) {
    if (at > 0) ++at;  // past the newline (JSON replies escape theirs, so this one ends a reply)
    if (std::string_view(output).substr(at) != http_refusal())
      fuzz::violated("output after the HTTP refusal, or a malformed refusal", output);
    json_part = std::string_view(output).substr(0, at);
  }
  const size_t replies = fuzz::check_replies(json_part);
  const size_t lines = size_t(std::count(input.begin(), input.end(), '\n')) + 1;
  if (replies > lines) fuzz::violated("more replies than request lines", output);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool sigpipe_ignored = [] { return ::signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();
  (void)sigpipe_ignored;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
#ifdef KTUNE_FUZZ_REPLAY  // the committed corpus in CI: every input both ways
  run_scripted(input);
  run_real(input);
#else
  if (fnv1a(input) % k_real_every == 0)
    run_real(input);
  else
    run_scripted(input);
#endif
  return 0;
}
