#include "client/cubin.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace ktune {
namespace {

constexpr std::uint16_t k_em_cuda = 190;
constexpr std::uint32_t k_sht_symtab = 2;

template <typename T>
bool read(std::string_view bytes, std::uint64_t offset, T& out) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(&out, bytes.data() + offset, sizeof(T));  // ELF64 little-endian, like the host
  return true;
}

protocol::Expected<CubinInfo> bad(const std::string& why) {
  return protocol::error(protocol::ErrorKind::bad_request, "not a CUDA cubin: " + why);
}

}  // namespace

bool CubinInfo::has_symbol(std::string_view name) const {
  return std::find(symbols.begin(), symbols.end(), name) != symbols.end();
}

int arch_sm(std::string_view arch) {
  if (!arch.starts_with("sm_") || arch.size() < 5) return 0;
  int sm = 0;
  size_t i = 3;
  for (; i < arch.size() && arch[i] >= '0' && arch[i] <= '9'; ++i) sm = sm * 10 + (arch[i] - '0');
  if (i == 3 || (i < arch.size() && arch.substr(i) != "a" && arch.substr(i) != "f")) return 0;
  return sm;
}

protocol::Expected<CubinInfo> inspect_cubin(std::string_view b) {
  if (b.size() < 64 || std::memcmp(b.data(),
                                   "\x7f"
                                   "ELF",
                                   4) != 0)
    return bad("no ELF magic");
  if (b[4] != 2) return bad("not ELF64");
  if (b[5] != 1) return bad("not little-endian");
  std::uint16_t machine = 0, shentsize = 0, shnum = 0;
  std::uint32_t flags = 0;
  std::uint64_t shoff = 0;
  read(b, 18, machine);
  read(b, 40, shoff);
  read(b, 48, flags);
  read(b, 58, shentsize);
  read(b, 60, shnum);
  if (machine != k_em_cuda)
    return bad("e_machine is " + std::to_string(machine) + ", not EM_CUDA (190)");
  CubinInfo info;
  // ELF ABI version 8 and later (CUDA 12.8+) keep the SM in bits 8..15 of e_flags; older in 0..7.
  info.sm = std::uint8_t(b[8]) >= 8 ? int(flags >> 8 & 0xff) : int(flags & 0xff);
  if (shentsize < 64) return bad("section headers of " + std::to_string(shentsize) + " bytes");
  auto section = [&](std::uint32_t i, std::uint32_t& type, std::uint64_t& off, std::uint64_t& size,
                     std::uint32_t& link, std::uint64_t& entsize) {
    const std::uint64_t h = shoff + std::uint64_t(i) * shentsize;
    return read(b, h + 4, type) && read(b, h + 24, off) && read(b, h + 32, size) &&
           read(b, h + 40, link) && read(b, h + 56, entsize);
  };
  for (std::uint32_t i = 0; i < shnum; ++i) {
    std::uint32_t type = 0, link = 0;
    std::uint64_t off = 0, size = 0, entsize = 0;
    if (!section(i, type, off, size, link, entsize)) return bad("section header out of bounds");
    if (type != k_sht_symtab) continue;
    std::uint32_t stype = 0, slink = 0;
    std::uint64_t str_off = 0, str_size = 0, sent = 0;
    if (!section(link, stype, str_off, str_size, slink, sent) || str_off > b.size() ||
        b.size() - str_off < str_size || off > b.size() || b.size() - off < size || entsize < 24)
      return bad(".symtab or its string table out of bounds");
    for (std::uint64_t s = off; s + entsize <= off + size; s += entsize) {
      std::uint32_t name = 0;
      read(b, s, name);
      if (name == 0 || name >= str_size) continue;
      const char* p = b.data() + str_off + name;
      info.symbols.emplace_back(p, strnlen(p, str_size - name));
    }
  }
  if (info.symbols.empty()) return bad("no .symtab");
  return info;
}

}  // namespace ktune
