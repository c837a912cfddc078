// RequestHandler: what a Session hands the request lines it has framed to.
//
// The daemon's one is the Dispatcher (daemon/dispatcher.h). The interface exists so that the
// framing can be tested alone: the frame fuzzer (tests/fuzz/fuzz_frame.cc) puts a scripted
// handler behind a real Session, whose every reply is known in advance, and compares what the
// client receives with a model of the framing byte for byte.
//
// Thread-safety: append_fast() and handle() may be called concurrently from every I/O thread;
// `emit` may be called from any thread (the Session posts each reply line back to its own).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/access.h"
#include "daemon/executor.h"
#include "daemon/ops/ops.h"

namespace ktune {

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;

  // Appends the whole reply to `line` (newline included) to `out` when it can be given from
  // memory on the calling I/O thread, and says true; false (`out` untouched): then the session
  // calls handle(). Microseconds. Into the caller's buffer: a session with nothing owed ahead of
  // the reply appends it to what it sends next, with no string of its own.
  virtual bool append_fast(std::string_view line, const Peer& peer, std::string& out) = 0;
  // append_fast() into a string of its own, or nullopt.
  std::optional<std::string> try_fast(std::string_view line, const Peer& peer) {
    std::string out;
    if (!append_fast(line, peer, out)) return std::nullopt;
    return out;
  }
  // Handles one request line (without its newline) and its attachment (empty when the line
  // announced none); every reply line goes to `emit`, the last with `last` set, now or later.
  // `lane`: the connection's, from make_lane(), or null. The caller has tried append_fast()
  // first: handle() does not ask it again.
  virtual void handle(std::string_view line, std::string attachment, const Peer& peer, Emit emit,
                      const Executor::Lane* lane) = 0;
  // A lane (daemon/executor.h) a session makes once and passes with each of its lines, so the
  // handler can keep one client's work in order on its threads; nullopt: none.
  virtual std::optional<Executor::Lane> make_lane() { return std::nullopt; }
  // The largest attachment ("attach": N) a line may announce; a larger one ends the connection.
  virtual size_t max_attachment_bytes() const = 0;
};

}  // namespace ktune
