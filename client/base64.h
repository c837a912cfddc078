// Base64 (RFC 4648, standard alphabet, padded): how the `kernel` op carries a cubin inside its
// JSON reply (docs/protocol.md § kernel says why base64 rather than a binary frame).
// Header-only, shared by the daemon (encode) and the clients (decode). Thread-safety: pure
// functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ktune::protocol {

inline std::string base64_encode(std::string_view bytes) {
  static constexpr char k_alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v = std::uint32_t(std::uint8_t(bytes[i])) << 16 |
                            std::uint32_t(std::uint8_t(bytes[i + 1])) << 8 |
                            std::uint32_t(std::uint8_t(bytes[i + 2]));
    out += k_alphabet[v >> 18 & 63];
    out += k_alphabet[v >> 12 & 63];
    out += k_alphabet[v >> 6 & 63];
    out += k_alphabet[v & 63];
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    std::uint32_t v = std::uint32_t(std::uint8_t(bytes[i])) << 16;
    if (rest == 2) v |= std::uint32_t(std::uint8_t(bytes[i + 1])) << 8;
    out += k_alphabet[v >> 18 & 63];
    out += k_alphabet[v >> 12 & 63];
    out += rest == 2 ? k_alphabet[v >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

// nullopt when `text` is not padded base64 of the standard alphabet.
inline std::optional<std::string> base64_decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = !last || text[i + 3] != '=' ? 0 : text[i + 2] == '=' ? 2 : 1;
    std::uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const int d = k >= 4 - size_t(pad) ? 0 : value(text[i + k]);
      if (d < 0) return std::nullopt;
      v = v << 6 | std::uint32_t(d);
    }
    out += char(v >> 16 & 0xff);
    if (pad < 2) out += char(v >> 8 & 0xff);
    if (pad < 1) out += char(v & 0xff);
  }
  return out;
}

}  // namespace ktune::protocol
