#include "config/problem.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace ktune {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(sep, start);
    out.push_back(
        s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

Result<std::int64_t> parse_int64(std::string_view s, std::string_view what) {
  s = trim(s);
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range && p == s.data() + s.size())
    return fail(ErrorCode::invalid_argument,
                std::string(what) + ": " + std::string(s) + " is out of range (below 2^63)");
  if (s.empty() || ec != std::errc() || p != s.data() + s.size())
    return fail(ErrorCode::invalid_argument,
                std::string(what) + ": expected an integer, got '" + std::string(s) + "'");
  return v;
}

// Parses "a=1,b=2" pairs; shared by dims and params.
Result<std::vector<std::pair<std::string, std::int64_t>>> parse_assignments(std::string_view text,
                                                                            std::string_view what) {
  std::vector<std::pair<std::string, std::int64_t>> out;
  if (trim(text).empty()) return out;
  for (auto part : split(text, ',')) {
    part = trim(part);
    const auto eq = part.find('=');
    if (eq == std::string_view::npos)
      return fail(ErrorCode::invalid_argument,
                  std::string(what) + ": expected name=value, got '" + std::string(part) + "'");
    const auto name = trim(part.substr(0, eq));
    if (!is_identifier(name))
      return fail(ErrorCode::invalid_argument,
                  std::string(what) + ": bad name '" + std::string(name) + "'");
    auto v = parse_int64(part.substr(eq + 1), std::string(what) + " " + std::string(name));
    if (!v) return std::unexpected(v.error());
    for (const auto& [n, _] : out)
      if (n == name)
        return fail(ErrorCode::invalid_argument,
                    std::string(what) + ": '" + std::string(name) + "' given twice");
    out.emplace_back(std::string(name), *v);
  }
  return out;
}

}  // namespace

bool is_known_dtype(std::string_view d) {
  return dtype_bytes(d) != 0;
}

int dtype_bytes(std::string_view d) {
  if (d == "bf16" || d == "fp16") return 2;
  if (d == "fp32") return 4;
  return 0;
}

std::string Problem::key() const {
  // Appended into one buffer sized up front: a cold lookup makes several keys.
  size_t size = op.size() + dtype.size() + out_dtype.size() + layout.size() + 4;
  for (const auto& [name, _] : dims) size += name.size() + 22;
  std::string k;
  k.reserve(size);
  for (const std::string* part : {&op, &dtype, &out_dtype, &layout}) {
    k += *part;
    k += '|';
  }
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) k += ',';
    k += dims[i].first;
    k += '=';
    char digits[24];
    const auto [end, _] = std::to_chars(digits, digits + sizeof digits, dims[i].second);
    k.append(digits, end);
  }
  return k;
}

std::string Problem::describe() const {
  std::string s = op + " " + dtype;
  if (out_dtype != dtype) s += "->" + out_dtype;
  if (!layout.empty()) s += " " + layout;
  for (const auto& [n, v] : dims) s += " " + n + "=" + std::to_string(v);
  return s;
}

std::int64_t Problem::dim(std::string_view name) const {
  for (const auto& [n, v] : dims)
    if (n == name) return v;
  return -1;
}

Result<Problem> parse_problem_key(std::string_view key) {
  const auto parts = split(key, '|');
  if (parts.size() != 5)
    return fail(ErrorCode::invalid_argument,
                "problem key '" + std::string(key) + "': expected op|dtype|out_dtype|layout|dims");
  Problem p{std::string(parts[0]),
            std::string(parts[1]),
            std::string(parts[2]),
            std::string(parts[3]),
            {}};
  auto dims = parse_dims(parts[4]);
  if (!dims) return std::unexpected(dims.error());
  p.dims = std::move(*dims);
  if (auto ok = validate_problem(p); !ok) return std::unexpected(ok.error());
  if (p.key() != key)
    return fail(ErrorCode::invalid_argument,
                "problem key '" + std::string(key) + "' is not canonical");
  return p;
}

Result<void> validate_problem(const Problem& p) {
  if (!is_identifier(p.op))
    return fail(ErrorCode::invalid_argument, "op: '" + p.op + "' is not a name");
  if (!is_known_dtype(p.dtype))
    return fail(ErrorCode::invalid_argument, "dtype: unknown '" + p.dtype + "' (bf16, fp16, fp32)");
  if (!is_known_dtype(p.out_dtype))
    return fail(ErrorCode::invalid_argument,
                "out_dtype: unknown '" + p.out_dtype + "' (bf16, fp16, fp32)");
  if (!std::all_of(p.layout.begin(), p.layout.end(),
                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }))
    return fail(ErrorCode::invalid_argument, "layout: '" + p.layout + "' has odd characters");
  if (p.dims.empty()) return fail(ErrorCode::invalid_argument, "dims: none given");
  constexpr std::int64_t k_max_dim = std::int64_t(1) << 31;
  constexpr double k_max_elems = double(std::int64_t(1) << 48);
  double product = 1;
  for (const auto& [n, v] : p.dims) {
    if (!is_identifier(n)) return fail(ErrorCode::invalid_argument, "dims: bad name '" + n + "'");
    if (v < 1 || v >= k_max_dim)
      return fail(ErrorCode::invalid_argument,
                  "dims: " + n + "=" + std::to_string(v) + " out of range [1, 2^31)");
    product *= double(v);
  }
  if (product >= k_max_elems)
    return fail(ErrorCode::invalid_argument, "dims: product of the dims exceeds 2^48");
  return {};
}

Result<std::vector<std::pair<std::string, std::int64_t>>> parse_dims(std::string_view text) {
  if (trim(text).empty())
    return fail(ErrorCode::invalid_argument, "dims: none given (e.g. M=4096,N=4096,K=4096)");
  return parse_assignments(text, "dims");
}

std::string params_to_string(const Params& params) {
  std::string s;
  for (const auto& [n, v] : params) {
    if (!s.empty()) s += ",";
    s += n + "=" + std::to_string(v);
  }
  return s;
}

Result<Params> parse_params(std::string_view text) {
  auto pairs = parse_assignments(text, "params");
  if (!pairs) return std::unexpected(pairs.error());
  return Params(pairs->begin(), pairs->end());
}

std::string DeviceClass::id() const {
  std::string n;
  for (char c : name) n += c == ' ' ? '-' : char(std::tolower(static_cast<unsigned char>(c)));
  return n + ".sm" + std::to_string(cc) + "." + std::to_string(sm_count) + "sm." +
         std::to_string(memory_gib) + "gib";
}

Result<DeviceClass> parse_device_class_id(std::string_view id) {
  // The name may itself contain dots, so parse the three fixed fields from the right.
  auto bad = [&] {
    return fail(ErrorCode::invalid_argument,
                "device class '" + std::string(id) + "': expected name.smNN.NNsm.NNgib");
  };
  const auto parts = split(id, '.');
  if (parts.size() < 4) return bad();
  const auto mem = parts[parts.size() - 1], sms = parts[parts.size() - 2],
             cc = parts[parts.size() - 3];
  if (!mem.ends_with("gib") || !sms.ends_with("sm") || !cc.starts_with("sm")) return bad();
  DeviceClass d;
  auto m = parse_int64(mem.substr(0, mem.size() - 3), "memory");
  auto s = parse_int64(sms.substr(0, sms.size() - 2), "sm count");
  auto c = parse_int64(cc.substr(2), "compute capability");
  if (!m || !s || !c) return bad();
  d.memory_gib = int(*m);
  d.sm_count = int(*s);
  d.cc = int(*c);
  const size_t name_len = id.size() - mem.size() - sms.size() - cc.size() - 3;
  d.name = std::string(id.substr(0, name_len));
  if (d.name.empty() || d.id() != id) return bad();
  return d;
}

Result<DeviceLimits> DeviceLimits::for_arch(std::string_view arch) {
  DeviceLimits l;
  if (arch == "sm_90" || arch == "sm_90a") return l;
  if (arch == "sm_80") {
    l.cc = 80;
    l.sm_count = 108;
    l.max_smem_per_block = 166912;  // 163 KiB opt-in on A100
    l.l2_bytes = 40 * 1024 * 1024;
    return l;
  }
  if (arch == "sm_89" || arch == "sm_86") {
    l.cc = arch == "sm_89" ? 89 : 86;
    l.sm_count = 84;
    l.max_smem_per_block = 101376;  // 99 KiB
    l.l2_bytes = 6 * 1024 * 1024;
    return l;
  }
  return fail(ErrorCode::invalid_argument,
              "arch '" + std::string(arch) + "': expected sm_80, sm_86, sm_89, sm_90 or sm_90a");
}

}  // namespace ktune
