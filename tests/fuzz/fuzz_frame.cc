// Fuzz target: the session's frame handling — line splitting, blank and \r\n lines, the 64 KiB
// frame limit, attachment headers ("attach": N, protocol::attachment_size) and their bytes —
// on a real Session over a socketpair, with the dispatcher of fuzz_support.h behind it. Input:
// the bytes a client sends before closing its side.
//
// Checks: every reply line is a well-formed protocol object (fuzz_support.h), there are no more
// replies than lines sent, and the session ends (reads to EOF, answers, closes).
#include <signal.h>

#include <boost/asio.hpp>
#include <cstddef>
#include <cstdint>

#include "daemon/access.h"
#include "daemon/session.h"
#include "tests/fuzz/fuzz_support.h"

using namespace ktune;
namespace asio = boost::asio;
using Socket = asio::local::stream_protocol::socket;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool sigpipe_ignored = [] { return ::signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();
  (void)sigpipe_ignored;
  const std::string input(reinterpret_cast<const char*>(data), size);
  auto parts = fuzz::make_parts();
  asio::io_context io(1);
  Socket daemon_side(io), client(io);
  asio::local::connect_pair(daemon_side, client);
  auto session = std::make_shared<Session<Socket>>(std::move(daemon_side), parts->dispatcher,
                                                   parts->metrics, Peer{},
                                                   SessionLimits{std::chrono::milliseconds(10'000)});
  session->start();
  // The client writes everything, closes its sending side, and reads until the daemon closes.
  asio::async_write(client, asio::buffer(input), [&](boost::system::error_code, size_t) {
    boost::system::error_code ignored;
    client.shutdown(Socket::shutdown_send, ignored);
  });
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
  return 0;
}
