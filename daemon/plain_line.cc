#include "daemon/plain_line.h"

#include <cctype>
#include <cstdint>

namespace ktune {
namespace {

// A cursor over the plain subset of JSON: no whitespace, strings of printable ASCII without
// escapes, integers as bare digits.
class Reader {
 public:
  explicit Reader(std::string_view text) : m_text(text) {}

  bool eat(char c) {
    if (m_at == m_text.size() || m_text[m_at] != c) return false;
    ++m_at;
    return true;
  }
  bool eat(std::string_view token) {
    if (!m_text.substr(m_at).starts_with(token)) return false;
    m_at += token.size();
    return true;
  }
  // A quoted string's contents: bytes 0x20..0x7e but '"' and '\' (what JSON decodes to itself).
  std::optional<std::string_view> string() {
    if (!eat('"')) return std::nullopt;
    const size_t begin = m_at;
    for (; m_at < m_text.size() && m_text[m_at] != '"'; ++m_at) {
      const auto c = static_cast<unsigned char>(m_text[m_at]);
      if (c < 0x20 || c > 0x7e || c == '\\') return std::nullopt;
    }
    if (m_at == m_text.size()) return std::nullopt;
    return m_text.substr(begin, m_at++ - begin);
  }
  // "name": (the colon eaten too).
  std::optional<std::string_view> member_name() {
    auto name = string();
    if (!name || !eat(':')) return std::nullopt;
    return name;
  }
  // A run of digits without a leading zero (0 itself), as written.
  std::optional<std::string_view> digits() {
    const size_t begin = m_at;
    while (m_at < m_text.size() && std::isdigit(static_cast<unsigned char>(m_text[m_at]))) ++m_at;
    const std::string_view run = m_text.substr(begin, m_at - begin);
    if (run.empty() || (run.size() > 1 && run.front() == '0')) return std::nullopt;
    return run;
  }
  // digits() of at most max_digits, not followed by a fraction or an exponent (a float is not
  // plain): a value a 64-bit integer holds for max_digits <= 19.
  std::optional<std::uint64_t> natural(int max_digits) {
    const auto run = digits();
    if (!run || run->size() > size_t(max_digits)) return std::nullopt;
    if (m_at < m_text.size() && (m_text[m_at] == '.' || m_text[m_at] == 'e' || m_text[m_at] == 'E'))
      return std::nullopt;
    std::uint64_t v = 0;
    for (char c : *run) v = v * 10 + std::uint64_t(c - '0');
    return v;
  }
  bool done() const { return m_at == m_text.size(); }
  size_t at() const { return m_at; }

 private:
  std::string_view m_text;
  size_t m_at = 0;
};

// Members seen once each; a second one is not plain (the general parser keeps the last).
enum Seen : unsigned {
  k_device = 1,
  k_limit = 2,
  k_pin = 4,
  k_problem = 8,
  k_op = 16,
  k_dtype = 32,
  k_out_dtype = 64,
  k_layout = 128,
  k_dims = 256
};
bool first_time(unsigned& seen, Seen member) {
  if (seen & member) return false;
  seen |= member;
  return true;
}

// {"name":N,...}: non-empty, names distinct.
bool read_dims(Reader& r, std::vector<std::pair<std::string, std::int64_t>>& dims) {
  if (!r.eat('{')) return false;
  do {
    const auto name = r.member_name();
    const auto value = name ? r.natural(18) : std::nullopt;
    if (!value) return false;
    for (const auto& [seen, _] : dims)
      if (seen == *name) return false;
    dims.emplace_back(std::string(*name), std::int64_t(*value));
  } while (r.eat(','));
  return r.eat('}');
}

bool read_problem(Reader& r, protocol::ProblemSpec& p) {
  if (!r.eat('{')) return false;
  unsigned seen = 0;
  do {
    const auto name = r.member_name();
    if (!name) return false;
    if (*name == "dims") {
      if (!first_time(seen, k_dims) || !read_dims(r, p.dims)) return false;
      continue;
    }
    std::string* field = nullptr;
    Seen member{};
    if (*name == "op") {
      field = &p.op, member = k_op;
    } else if (*name == "dtype") {
      field = &p.dtype, member = k_dtype;
    } else if (*name == "out_dtype") {
      field = &p.out_dtype, member = k_out_dtype;
    } else if (*name == "layout") {
      field = &p.layout, member = k_layout;
    } else {
      return false;
    }
    const auto value = r.string();
    if (!value || !first_time(seen, member)) return false;
    field->assign(*value);
  } while (r.eat(','));
  // What problem_from_json requires: anything missing is its error to say.
  return r.eat('}') && (seen & k_op) && (seen & k_dtype) && (seen & k_dims);
}

}  // namespace

std::optional<SplitLine> split_lookup_line(std::string_view line) {
  constexpr std::string_view head = R"({"v":1,"id":)";  // or {"v":2,"id":
  if (line.size() <= head.size() || !line.starts_with(head.substr(0, 5)) ||
      (line[5] != '1' && line[5] != '2') || line.substr(6, head.size() - 6) != head.substr(6))
    return std::nullopt;
  // The id: a plain string (echoed with its quotes) or digits, of any length.
  Reader id(line.substr(head.size()));
  if (!(line[head.size()] == '"' ? bool(id.string()) : bool(id.digits()))) return std::nullopt;
  const size_t i = head.size() + id.at();
  const std::string_view rest = line.substr(i);
  if (!rest.starts_with(R"(,"op":"lookup",)")) return std::nullopt;
  // Left to the general parser: a NUL (which would end its text early) and a second "v" or "id"
  // (which it takes last where this reads first: the same text must get one answer). No field
  // of a lookup holds a key of those names ("op" is also the problem's key: not looked for).
  const std::string_view after = rest.substr(std::string_view(R"(,"op":"lookup",)").size());
  if (line.find('\0') != std::string_view::npos ||
      after.find(R"("v":)") != std::string_view::npos ||
      after.find(R"("id":)") != std::string_view::npos)
    return std::nullopt;
  return SplitLine{line[5], line.substr(head.size(), i - head.size()), rest};
}

std::optional<PlainLookup> parse_plain_lookup(std::string_view line) {
  const auto split = split_lookup_line(line);
  if (!split) return std::nullopt;
  PlainLookup out;
  out.version = split->version - '0';
  if (split->id.front() == '"') {
    out.id = std::string(split->id.substr(1, split->id.size() - 2));
  } else {
    Reader id(split->id);
    const auto n = id.natural(19);  // 10^19 - 1 < 2^64: the general parser's unsigned integer
    if (!n || !id.done()) return std::nullopt;
    out.id = *n;
  }
  Reader r(split->rest);
  r.eat(R"(,"op":"lookup")");  // split_lookup_line checked it
  unsigned seen = 0;
  protocol::LookupRequest& req = out.request;
  while (r.eat(',')) {
    const auto name = r.member_name();
    if (!name) return std::nullopt;
    if (*name == "problem") {
      if (!first_time(seen, k_problem) || !read_problem(r, req.problem)) return std::nullopt;
    } else if (*name == "limit") {
      const auto limit = r.natural(2);
      if (!limit || *limit < 1 || *limit > 64 || !first_time(seen, k_limit)) return std::nullopt;
      req.limit = int(*limit);
    } else if (*name == "device" || *name == "pin") {
      const auto value = r.string();
      if (!value || !first_time(seen, *name == "pin" ? k_pin : k_device)) return std::nullopt;
      (*name == "pin" ? req.pin : req.device).assign(*value);
    } else {
      return std::nullopt;  // unknown members are ignored by the general path: take it
    }
  }
  if (!r.eat('}') || !r.done() || !(seen & k_problem)) return std::nullopt;
  return out;
}

}  // namespace ktune
