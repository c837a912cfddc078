// What fuzz_frame's framing model asks of client/protocol.h, compiled in a translation unit of its
// own (see frame_protocol_calls.cc for why).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "client/protocol.h"

namespace ktune::fuzz {

// protocol::attachment_size(line, max_bytes, id_out).
protocol::Expected<size_t> attachment_size_of(std::string_view line, size_t max_bytes,
                                              protocol::Json* id_out = nullptr);
// protocol::reply_error(id, kind, message): the line a session sends before it closes.
std::string error_line(protocol::ErrorKind kind, std::string_view message,
                       const protocol::Json& id = nullptr);

}  // namespace ktune::fuzz
