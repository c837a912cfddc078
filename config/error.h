// Error values shared by every ktune library.
//
// Anything that can fail returns `Result<T>` (std::expected<T, Error>); exceptions are kept for
// whole-process failure only. A tuning outcome (a config that fails to compile, a wrong result) is
// data, not an Error. Error is a small value type and safe to copy between threads.
#pragma once

#include <expected>
#include <string>
#include <string_view>

namespace ktune {

// Broad classes of failure. Callers branch on the code; the message is for humans.
enum class ErrorCode {
  invalid_argument,  // the caller's input is malformed or out of range
  not_found,         // the named thing does not exist
  already_exists,    // creating something that is already there
  io_error,          // the operating system refused a read, write or open
  corruption,        // persisted data is unreadable or fails its checks
  format_mismatch,   // persisted data has a format version this build does not read
  unavailable,       // a dependency (daemon, driver, GPU) is not there right now
  timeout,           // a deadline passed
  internal,          // a bug: an invariant did not hold
  cancelled,         // the caller asked the work to stop before it finished
};

std::string_view to_string(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::internal;
  std::string message;

  // "invalid_argument: <message>"
  std::string to_string() const;
};

template <typename T>
using Result = std::expected<T, Error>;

// Shorthand for returning an error: `return fail(ErrorCode::not_found, "no such key");`
inline std::unexpected<Error> fail(ErrorCode code, std::string message) {
  return std::unexpected<Error>(Error{code, std::move(message)});
}

}  // namespace ktune
