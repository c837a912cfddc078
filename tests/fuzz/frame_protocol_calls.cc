// The client/protocol.h calls of fuzz_frame's framing model, kept out of fuzz_frame.cc. They are
// inline: every translation unit that calls one emits a copy and the linker keeps just one. The
// copies here and in daemon/session.cc are instrumented for coverage (frame_coverage.txt names
// both files); one in fuzz_frame.cc would not be, and if the linker kept that one, the session's
// own calls would give the fuzzer no feedback (measured: 37 edges of attachment_size and
// mentions_attach_key went missing that way).
#include "tests/fuzz/frame_protocol_calls.h"

namespace ktune::fuzz {

protocol::Expected<size_t> attachment_size_of(std::string_view line, size_t max_bytes,
                                              protocol::Json* id_out) {
  return protocol::attachment_size(line, max_bytes, id_out);
}

std::string error_line(protocol::ErrorKind kind, std::string_view message,
                       const protocol::Json& id) {
  return protocol::reply_error(id, kind, message);
}

}  // namespace ktune::fuzz
