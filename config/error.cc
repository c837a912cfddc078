#include "config/error.h"

namespace ktune {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument:
      return "invalid_argument";
    case ErrorCode::not_found:
      return "not_found";
    case ErrorCode::already_exists:
      return "already_exists";
    case ErrorCode::io_error:
      return "io_error";
    case ErrorCode::corruption:
      return "corruption";
    case ErrorCode::format_mismatch:
      return "format_mismatch";
    case ErrorCode::unavailable:
      return "unavailable";
    case ErrorCode::timeout:
      return "timeout";
    case ErrorCode::internal:
      return "internal";
    case ErrorCode::cancelled:
      return "cancelled";
  }
  return "unknown";
}

std::string Error::to_string() const {
  std::string out(ktune::to_string(code));
  out += ": ";
  out += message;
  return out;
}

}  // namespace ktune
