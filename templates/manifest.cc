#include "templates/manifest.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "config/text.h"

namespace ktune {
namespace {

namespace fs = std::filesystem;

// Thrown inside this file only; load_manifest turns it into an Error.
struct ManifestError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Parser {
 public:
  explicit Parser(std::string path) : m_path(std::move(path)) {}

  [[noreturn]] void fail_at(const YAML::Node& node, const std::string& where,
                            const std::string& what) const {
    std::string msg = m_path;
    if (node.IsDefined() && node.Mark().line >= 0)
      msg += ":" + std::to_string(node.Mark().line + 1);
    throw ManifestError(msg + ": " + where + ": " + what);
  }

  int line(const YAML::Node& n) const {
    note(n);
    return n.Mark().line + 1;
  }

  // "path:line" of the last node read: where an unexpected exception is reported.
  std::string last_place() const {
    return m_last_line > 0 ? m_path + ":" + std::to_string(m_last_line) : m_path;
  }

  std::string scalar(const YAML::Node& n, const std::string& where) const {
    note(n);
    if (!n.IsDefined() || n.IsNull()) fail_at(n, where, "missing");
    if (!n.IsScalar()) fail_at(n, where, "expected a single value");
    return n.Scalar();
  }

  std::int64_t integer(const YAML::Node& n, const std::string& where) const {
    const std::string s = scalar(n, where);
    try {
      size_t used = 0;
      const long long v = std::stoll(s, &used);
      if (used == s.size()) return v;
    } catch (const std::exception&) {
    }
    fail_at(n, where, "expected an integer, got '" + s + "'");
  }

  double number(const YAML::Node& n, const std::string& where) const {
    const std::string s = scalar(n, where);
    try {
      size_t used = 0;
      const double v = std::stod(s, &used);
      if (used == s.size()) return v;
    } catch (const std::exception&) {
    }
    fail_at(n, where, "expected a number, got '" + s + "'");
  }

  std::vector<std::string> strings(const YAML::Node& n, const std::string& where) const {
    if (!n.IsDefined() || n.IsNull()) return {};
    if (!n.IsSequence()) fail_at(n, where, "expected a list");
    std::vector<std::string> out;
    for (size_t i = 0; i < n.size(); ++i)
      out.push_back(scalar(n[i], where + "[" + std::to_string(i) + "]"));
    return out;
  }

  // A mapping, each key once: YAML parsers keep a repeated key, and n[key] would read only its
  // first value, silently dropping the second.
  void unique_keys(const YAML::Node& n, const std::string& where) const {
    if (!n.IsMap()) fail_at(n, where, "expected a mapping");
    std::map<std::string, int> seen;  // key -> line
    for (const auto& kv : n) {
      const std::string k = kv.first.IsNull() ? "" : kv.first.Scalar();
      const auto [it, first] = seen.emplace(k, line(kv.first));
      if (!first)
        fail_at(kv.first, where.empty() ? k : where + "." + k,
                "repeated key (first at line " + std::to_string(it->second) + ")");
    }
  }

  void only_keys(const YAML::Node& n, const std::string& where,
                 std::initializer_list<const char*> keys) const {
    unique_keys(n, where);
    for (const auto& kv : n) {
      const std::string k = kv.first.Scalar();
      if (std::none_of(keys.begin(), keys.end(), [&](const char* a) { return k == a; })) {
        const std::string known = joined(keys);
        fail_at(kv.first, where.empty() ? k : where + "." + k,
                "unknown key (known: " + known + ")");
      }
    }
  }

  // The slot of max_active_clusters: only launch.grid may read it (set once it is in scope).
  void set_grid_only_slot(int slot) { m_grid_only_slot = slot; }

  Expression compiled(std::string_view text, const YAML::Node& n, const std::string& where,
                      const SymbolTable& symbols, bool grid = false) const {
    auto e = compile_expression(text, symbols);
    if (!e) fail_at(n, where, e.error().message);
    if (!grid && m_grid_only_slot >= 0 &&
        std::binary_search(e->used_slots.begin(), e->used_slots.end(), m_grid_only_slot))
      fail_at(n, where,
              std::string(k_max_active_clusters) + " may only be used in launch.grid");
    return *e;
  }

  Expression expr(const YAML::Node& n, const std::string& where, const SymbolTable& symbols) const {
    return compiled(scalar(n, where), n, where, symbols);
  }

  // A list of expressions ([K, M], ["K * in_bytes"], [ceil_div(M, BM), 1]).
  std::vector<Expression> exprs(const YAML::Node& n, const std::string& where,
                                const SymbolTable& symbols) const {
    if (!n.IsSequence()) fail_at(n, where, "expected a list of expressions");
    std::vector<Expression> out;
    const auto items = rejoin_split_calls(n, where);
    for (size_t i = 0; i < items.size(); ++i)
      out.push_back(compiled(items[i], n, where + "[" + std::to_string(i) + "]", symbols));
    return out;
  }

  // `grid_occupancy`: whether launch.grid may read max_active_clusters (the template's own
  // launch, not a reference kernel's).
  LaunchSpec launch(const YAML::Node& n, const std::string& where, const SymbolTable& symbols,
                    bool grid_occupancy) const {
    if (!n.IsDefined()) fail_at(n, where, "missing");
    only_keys(n, where, {"grid", "block", "smem", "cluster"});
    LaunchSpec l;
    l.line = line(n);
    for (const char* key : {"grid", "block", "cluster"}) {
      const YAML::Node v = n[key];
      const std::string w = where + "." + key;
      auto& dims = std::string(key) == "grid" ? l.grid : std::string(key) == "block" ? l.block : l.cluster;
      if (!v.IsDefined() && std::string(key) == "cluster") {
        for (auto& d : dims) d = *compile_expression("1", symbols);
        continue;
      }
      if (!v.IsSequence()) fail_at(v.IsDefined() ? v : n, w, "expected [x, y, z]");
      const auto items = rejoin_split_calls(v, w);
      if (items.size() != 3)
        fail_at(v, w, "expected [x, y, z], got " + std::to_string(items.size()) + " items");
      for (size_t i = 0; i < 3; ++i)
        dims[i] = compiled(items[i], v, w + "[" + std::to_string(i) + "]", symbols,
                           grid_occupancy && std::string(key) == "grid");
    }
    l.smem = n["smem"].IsDefined() ? expr(n["smem"], where + ".smem", symbols)
                                   : *compile_expression("0", symbols);
    return l;
  }

  const std::string& path() const { return m_path; }

  // YAML splits "[ceil_div(M, BM), 1, 1]" at every comma, including the one inside the call.
  // Joins adjacent items back while their parentheses are unbalanced, so launch geometry can be
  // written naturally.
  std::vector<std::string> rejoin_split_calls(const YAML::Node& seq,
                                              const std::string& where) const {
    std::vector<std::string> out;
    int depth = 0;
    for (size_t i = 0; i < seq.size(); ++i) {
      const std::string item = scalar(seq[i], where + "[" + std::to_string(i) + "]");
      if (depth > 0)
        out.back() += ", " + item;
      else
        out.push_back(item);
      for (char c : item) depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    }
    return out;
  }

 private:
  void note(const YAML::Node& n) const {
    if (n.IsDefined() && n.Mark().line >= 0) m_last_line = n.Mark().line + 1;
  }

  std::string m_path;
  int m_grid_only_slot = -1;
  mutable int m_last_line = 0;  // of the last node read (see last_place)
};

// Parses "name(a, b)" into its two numbers.
std::optional<std::pair<double, double>> two_arg_call(std::string text, std::string_view name) {
  text.erase(std::remove_if(text.begin(), text.end(), ::isspace), text.end());
  if (!text.starts_with(std::string(name) + "(") || !text.ends_with(")")) return std::nullopt;
  const std::string inner = text.substr(name.size() + 1, text.size() - name.size() - 2);
  const auto comma = inner.find(',');
  if (comma == std::string::npos) return std::nullopt;
  try {
    size_t u1 = 0, u2 = 0;
    const double a = std::stod(inner.substr(0, comma), &u1);
    const double b = std::stod(inner.substr(comma + 1), &u2);
    if (u1 != comma || u2 != inner.size() - comma - 1) return std::nullopt;
    return std::make_pair(a, b);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The most values a param's {range: [lo, hi], step} may give (docs/templates.md).
constexpr std::uint64_t k_max_range_values = 4096;

// Names the loader defines: the type symbols of template_args and the variables every expression
// sees. A manifest's own names (params, dims, layout constants, derived values) may not take them.
bool is_builtin_name(std::string_view name) {
  for (const char* b : {"T_IN", "T_OUT", "in_bytes", "out_bytes", k_max_active_clusters})
    if (name == b) return true;
  return std::any_of(std::begin(k_device_symbols), std::end(k_device_symbols),
                     [&](const char* d) { return name == d; });
}

bool is_dtype_or_index(const std::string& d) {
  return is_known_dtype(d) || d == "i32";
}

void parse_params(const Parser& P, const YAML::Node& n, Manifest& m) {
  if (!n.IsMap() || n.size() == 0) P.fail_at(n, "params", "expected a mapping of name: domain");
  P.unique_keys(n, "params");
  for (const auto& kv : n) {
    ParamDomain d;
    d.name = kv.first.Scalar();
    d.line = P.line(kv.first);
    const std::string where = "params." + d.name;
    if (is_builtin_name(d.name))
      P.fail_at(kv.first, where, "'" + d.name + "' is a built-in name (docs/templates.md)");
    const YAML::Node& v = kv.second;
    if (v.IsSequence()) {
      for (size_t i = 0; i < v.size(); ++i)
        d.values.push_back(P.integer(v[i], where + "[" + std::to_string(i) + "]"));
    } else if (v.IsMap() && v["range"].IsDefined()) {
      P.only_keys(v, where, {"range", "step"});
      const YAML::Node r = v["range"];
      if (!r.IsSequence() || r.size() != 2) P.fail_at(r, where + ".range", "expected [lo, hi]");
      const auto lo = P.integer(r[0], where + ".range"), hi = P.integer(r[1], where + ".range");
      const auto step = v["step"].IsDefined() ? P.integer(v["step"], where + ".step") : 1;
      // In unsigned arithmetic: hi - lo and lo + i * step can overflow std::int64_t.
      const auto span = std::uint64_t(hi) - std::uint64_t(lo);
      if (step < 1 || hi < lo || span / std::uint64_t(step) >= k_max_range_values)
        P.fail_at(r, where + ".range",
                  "expected lo <= hi, step >= 1, at most " + std::to_string(k_max_range_values) +
                      " values");
      for (std::uint64_t i = 0; i <= span / std::uint64_t(step); ++i)
        d.values.push_back(std::int64_t(std::uint64_t(lo) + i * std::uint64_t(step)));
    } else if (v.IsMap() && v["values"].IsDefined()) {
      P.only_keys(v, where, {"values", "names"});
      const YAML::Node vals = v["values"];
      if (!vals.IsSequence()) P.fail_at(vals, where + ".values", "expected a list of integers");
      for (size_t i = 0; i < vals.size(); ++i)
        d.values.push_back(P.integer(vals[i], where + ".values"));
      d.value_names = P.strings(v["names"], where + ".names");
      if (!d.value_names.empty() && d.value_names.size() != d.values.size())
        P.fail_at(v["names"], where + ".names", "needs one name per value");
    } else {
      P.fail_at(v, where, "expected a list of integers, {range: [lo, hi]} or {values: [...]}");
    }
    if (d.values.empty()) P.fail_at(v, where, "empty domain");
    std::set<std::int64_t> uniq(d.values.begin(), d.values.end());
    if (uniq.size() != d.values.size()) P.fail_at(v, where, "repeated value");
    if (m.param(d.name)) P.fail_at(kv.first, where, "defined twice");
    m.params.push_back(std::move(d));
  }
}

void parse_buffer(const Parser& P, const YAML::Node& n, const std::string& where,
                  const SymbolTable& symbols, ArgSpec& a) {
  P.only_keys(n, where, {"name", "buffer", "dtype", "count", "init", "pass", "zero"});
  const std::string role = P.scalar(n["buffer"], where + ".buffer");
  if (role == "in")
    a.role = BufferRole::in;
  else if (role == "out")
    a.role = BufferRole::out;
  else if (role == "inout")
    a.role = BufferRole::inout;
  else if (role == "workspace")
    a.role = BufferRole::workspace;
  else
    P.fail_at(n["buffer"], where + ".buffer", "expected in, out, inout or workspace");
  a.dtype = P.scalar(n["dtype"], where + ".dtype");
  if (a.dtype != "in" && a.dtype != "out" && !is_dtype_or_index(a.dtype))
    P.fail_at(n["dtype"], where + ".dtype", "expected in, out, bf16, fp16, fp32 or i32");
  a.count = P.expr(n["count"], where + ".count", symbols);
  if (n["init"].IsDefined()) {
    const std::string init = P.scalar(n["init"], where + ".init");
    const auto uni = two_arg_call(init, "uniform");
    const auto nor = two_arg_call(init, "normal");
    if (uni && uni->first < uni->second)
      a.init = {InitSpec::Kind::uniform, uni->first, uni->second};
    else if (nor && nor->second > 0)
      a.init = {InitSpec::Kind::normal, nor->first, nor->second};
    else
      P.fail_at(n["init"], where + ".init",
                "expected uniform(lo, hi) with lo < hi or normal(mean, std)");
  }
  if (n["pass"].IsDefined()) {
    const std::string pass = P.scalar(n["pass"], where + ".pass");
    if (pass != "true" && pass != "false")
      P.fail_at(n["pass"], where + ".pass", "expected true or false");
    a.pass = pass == "true";
  }
  if (n["zero"].IsDefined()) {
    const std::string zero = P.scalar(n["zero"], where + ".zero");
    if (a.role != BufferRole::workspace)
      P.fail_at(n["zero"], where + ".zero", "only a workspace says how it is zeroed");
    else if (zero == "none")
      a.zero = WorkspaceZero::none;
    else if (zero != "kept")
      P.fail_at(n["zero"], where + ".zero", "expected kept or none");
  }
}

void parse_tensor_map(const Parser& P, const YAML::Node& n, const std::string& where,
                      const SymbolTable& symbols, ArgSpec& a) {
  P.only_keys(n, where,
              {"name", "tensor_map", "dims", "strides", "box", "element_strides", "swizzle",
               "l2_promotion", "oob_fill"});
  a.kind = ArgKind::tensor_map;
  TensorMapSpec& t = a.map;
  t.buffer = P.scalar(n["tensor_map"], where + ".tensor_map");
  if (!n["dims"].IsDefined()) P.fail_at(n, where + ".dims", "missing");
  t.dims = P.exprs(n["dims"], where + ".dims", symbols);
  const size_t rank = t.dims.size();
  if (rank < 1 || rank > 5)
    P.fail_at(n["dims"], where + ".dims", "expected 1 to 5 dimensions, innermost first");
  t.strides = n["strides"].IsDefined() ? P.exprs(n["strides"], where + ".strides", symbols)
                                       : std::vector<Expression>{};
  if (t.strides.size() != rank - 1)
    P.fail_at(n["strides"].IsDefined() ? n["strides"] : n, where + ".strides",
              "expected " + std::to_string(rank - 1) +
                  " byte strides (one per dimension after the first)");
  if (!n["box"].IsDefined()) P.fail_at(n, where + ".box", "missing");
  t.box = P.exprs(n["box"], where + ".box", symbols);
  if (t.box.size() != rank)
    P.fail_at(n["box"], where + ".box", "expected " + std::to_string(rank) + " box sizes");
  if (n["element_strides"].IsDefined()) {
    t.element_strides = P.exprs(n["element_strides"], where + ".element_strides", symbols);
    if (t.element_strides.size() != rank)
      P.fail_at(n["element_strides"], where + ".element_strides",
                "expected " + std::to_string(rank) + " element strides");
  } else {
    t.element_strides.assign(rank, *compile_expression("1", symbols));
  }
  auto choice = [&](const char* key, auto parse, auto& out, const char* known) {
    if (!n[key].IsDefined()) return;
    const auto v = parse(P.scalar(n[key], where + "." + key));
    if (!v) P.fail_at(n[key], where + "." + key, std::string("expected ") + known);
    out = *v;
  };
  choice("swizzle", parse_swizzle, t.swizzle, "none, 32B, 64B or 128B");
  choice("l2_promotion", parse_l2_promotion, t.l2_promotion, "none, 64B, 128B or 256B");
  choice("oob_fill", parse_oob_fill, t.oob_fill, "zeros or nan");
}

ArgSpec parse_arg(const Parser& P, const YAML::Node& n, const std::string& where,
                  const SymbolTable& symbols) {
  ArgSpec a;
  a.line = P.line(n);
  a.name = P.scalar(n["name"], where + ".name");
  if (n["buffer"].IsDefined()) {
    parse_buffer(P, n, where, symbols, a);
  } else if (n["scalar"].IsDefined()) {
    P.only_keys(n, where, {"name", "scalar", "value"});
    a.kind = ArgKind::scalar;
    const std::string t = P.scalar(n["scalar"], where + ".scalar");
    if (t == "i32")
      a.scalar = ScalarType::i32;
    else if (t == "i64")
      a.scalar = ScalarType::i64;
    else if (t == "f32")
      a.scalar = ScalarType::f32;
    else
      P.fail_at(n["scalar"], where + ".scalar", "expected i32, i64 or f32");
    a.value = P.expr(n["value"], where + ".value", symbols);
  } else if (n["tensor_map"].IsDefined()) {
    parse_tensor_map(P, n, where, symbols, a);
  } else {
    P.fail_at(n, where,
              "expected a buffer (buffer: in|out|inout|workspace), a scalar (scalar: "
              "i32|i64|f32) or a tensor map (tensor_map: <buffer arg>)");
  }
  return a;
}

// The expression text of one element's size in bytes for a buffer dtype ("in", "out", concrete).
// A buffer may hold i32, which is no problem dtype (dtype_bytes gives it 0); the worker
// allocates it with 4 bytes an element.
std::string element_bytes_text(const std::string& dtype) {
  if (dtype == "in") return "in_bytes";
  if (dtype == "out") return "out_bytes";
  if (dtype == "i32") return "4";
  return std::to_string(dtype_bytes(dtype));
}

// Checks each tensor_map against its buffer and adds the constraints cuTensorMapEncodeTiled
// imposes, so configs it would refuse are pruned before anything compiles.
void check_tensor_maps(const Parser& P, const YAML::Node& an, Manifest& m) {
  for (size_t i = 0; i < m.args.size(); ++i) {
    const ArgSpec& a = m.args[i];
    const std::string where = "args[" + std::to_string(i) + "]";
    if (a.is_buffer() && !a.pass &&
        std::none_of(m.args.begin(), m.args.end(), [&](const ArgSpec& t) {
          return t.kind == ArgKind::tensor_map && t.map.buffer == a.name;
        }))
      P.fail_at(an[i], where + ".pass",
                "buffer '" + a.name + "' is not passed and no tensor_map maps it");
    if (a.kind != ArgKind::tensor_map) continue;
    const auto buf = std::find_if(m.args.begin(), m.args.end(), [&](const ArgSpec& b) {
      return b.is_buffer() && b.name == a.map.buffer;
    });
    if (buf == m.args.end())
      P.fail_at(an[i]["tensor_map"], where + ".tensor_map",
                "'" + a.map.buffer + "' is not a buffer argument");
    const std::string elem = element_bytes_text(buf->dtype);
    auto add = [&](const std::string& text, const std::string& why) {
      auto e = compile_expression(text, m.symbols);
      if (!e) P.fail_at(an[i], where, "generated constraint: " + e.error().message);
      m.constraints.push_back({*e, a.name + ": " + why, a.line});
    };
    const TensorMapSpec& t = a.map;
    for (size_t d = 0; d < t.dims.size(); ++d)
      add("(" + t.dims[d].text + ") >= 1 && (" + t.dims[d].text + ") <= 4294967296",
          "tensor map dims[" + std::to_string(d) + "] (" + t.dims[d].text +
              ") must be 1..2^32 elements");
    for (size_t d = 0; d < t.strides.size(); ++d) {
      const std::string& s = t.strides[d].text;
      add("(" + s + ") % 16 == 0 && (" + s + ") > 0 && (" + s + ") < 1099511627776",
          "tensor map strides[" + std::to_string(d) + "] (" + s +
              " bytes) must be a multiple of 16 under 2^40 (TMA)");
    }
    if (!t.strides.empty())
      add("(" + t.strides[0].text + ") >= (" + t.dims[0].text + ") * " + elem,
          "tensor map strides[0] (" + t.strides[0].text + ") must span dims[0] (" +
              t.dims[0].text + ") elements");
    for (size_t d = 0; d < t.box.size(); ++d)
      add("(" + t.box[d].text + ") >= 1 && (" + t.box[d].text + ") <= 256",
          "tensor map box[" + std::to_string(d) + "] (" + t.box[d].text +
              ") must be 1..256 elements (TMA)");
    add("((" + t.box[0].text + ") * " + elem + ") % 16 == 0",
        "tensor map inner box (" + t.box[0].text + " elements) must be a multiple of 16 bytes");
    if (t.swizzle != TensorMapSwizzle::none)
      add("(" + t.box[0].text + ") * " + elem + " <= " + std::to_string(swizzle_bytes(t.swizzle)),
          "tensor map inner box (" + t.box[0].text + " elements) must fit the " +
              std::string(to_string(t.swizzle)) + " swizzle span");
    for (size_t d = 0; d < t.element_strides.size(); ++d)
      if (t.element_strides[d].text != "1")
        add("(" + t.element_strides[d].text + ") >= 1 && (" + t.element_strides[d].text +
                ") <= 8",
            "tensor map element_strides[" + std::to_string(d) + "] must be 1..8");
  }
}

void check_template_args(const Parser& P, const YAML::Node& n, const std::string& where,
                         const std::vector<std::string>& args, const Manifest& m, bool reference) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "T_IN" || a == "T_OUT") continue;
    const bool is_param = m.param(a) != nullptr;
    const bool is_derived = std::any_of(m.derived.begin(), m.derived.end(),
                                        [&](const NamedExpr& d) { return d.name == a; });
    const bool is_dim = std::find(m.dims.begin(), m.dims.end(), a) != m.dims.end();
    bool is_layout = false;
    for (const auto& [_, consts] : m.layouts) is_layout |= consts.count(a) > 0;
    if (reference && (is_param || is_derived))
      P.fail_at(n[i], where + "[" + std::to_string(i) + "]",
                "a reference kernel cannot depend on the params ('" + a + "')");
    if (!is_param && !is_derived && !is_dim && !is_layout)
      P.fail_at(
          n[i], where + "[" + std::to_string(i) + "]",
          "'" + a + "' is not T_IN, T_OUT, a param, a derived value, a dim or a layout constant");
  }
}

namespace {
// ManifestSlots::rules (see RulePlan).
void plan_rules(const Manifest& m, ManifestSlots& s) {
  // Slots trying a rule writes: its params and every derived value.
  std::vector<bool> written(m.symbols.size(), false);
  for (int slot : s.params)
    if (slot >= 0) written[size_t(slot)] = true;
  for (int slot : s.derived)
    if (slot >= 0) written[size_t(slot)] = true;
  for (size_t r = 0; r < m.heuristic.size(); ++r) {
    const HeuristicRule& rule = m.heuristic[r];
    RulePlan plan;
    const auto& used = rule.when.used_slots;
    plan.when_repeats = r > 0 && !rule.when.text.empty() &&
                        rule.when.text == m.heuristic[r - 1].when.text &&
                        std::none_of(used.begin(), used.end(), [&](int u) {
                          return u < 0 || size_t(u) >= written.size() || written[size_t(u)];
                        });
    // What the rule's params decide: every slot they or a decided derived value fill.
    std::vector<std::optional<double>> known(m.symbols.size());
    for (size_t i = 0; i < m.params.size(); ++i) {
      const auto it = rule.params.find(m.params[i].name);
      plan.params.push_back(it == rule.params.end() ? 0.0 : double(it->second));
      if (s.params[i] >= 0) known[size_t(s.params[i])] = plan.params.back();
    }
    plan.derived.assign(m.derived.size(), 0.0);
    plan.derived_known.assign(m.derived.size(), false);
    for (size_t i = 0; i < m.derived.size(); ++i) {
      const auto v = s.derived[i] >= 0 ? fold(m.derived[i].expr, known) : std::nullopt;
      if (!v) continue;
      plan.derived[i] = *v;
      plan.derived_known[i] = true;
      known[size_t(s.derived[i])] = *v;
    }
    // Slots the open checks read, directly or through open derived values (which read only
    // names defined before them: walking backwards closes the set).
    std::vector<bool> read(m.symbols.size(), false);
    auto mark = [&](const Expression& e) {
      for (int u : e.used_slots)
        if (u >= 0 && size_t(u) < read.size()) read[size_t(u)] = true;
    };
    for (size_t i = 0; i < m.constraints.size() && plan.fixed_constraints_hold; ++i) {
      const auto v = fold(m.constraints[i].expr, known);
      if (!v) {
        plan.checks.push_back(int(i));
        mark(m.constraints[i].expr);
      } else if (std::isnan(*v) || *v == 0) {
        plan.fixed_constraints_hold = false;
      }
    }
    std::vector<bool> for_checks(m.derived.size(), false);
    for (size_t i = m.derived.size(); i-- > 0;)
      if (!plan.derived_known[i] && s.derived[i] >= 0 && read[size_t(s.derived[i])]) {
        for_checks[i] = true;
        mark(m.derived[i].expr);
      }
    for (size_t i = 0; i < m.derived.size(); ++i)
      if (!plan.derived_known[i])
        (for_checks[i] ? plan.check_derived : plan.rest_derived).push_back(int(i));
    s.rules.push_back(std::move(plan));
  }
}
}  // namespace

ManifestSlots resolve_slots(const Manifest& m) {
  ManifestSlots s;
  for (const auto& p : m.params) s.params.push_back(m.symbols.find(p.name));
  for (const auto& d : m.dims) s.dims.push_back(m.symbols.find(d));
  for (const auto& d : m.derived) s.derived.push_back(m.symbols.find(d.name));
  for (const auto& v : m.heuristic_values) s.heuristic_values.push_back(m.symbols.find(v.name));
  s.in_bytes = m.symbols.find("in_bytes");
  s.out_bytes = m.symbols.find("out_bytes");
  for (const char* d : k_device_symbols) s.device.push_back(m.symbols.find(d));
  s.max_active_clusters = m.symbols.find(k_max_active_clusters);
  for (const auto& [layout, consts] : m.layouts)
    for (const auto& [c, v] : consts) {
      s.layout_constants.push_back(m.symbols.find(c));
      s.layouts[layout].emplace_back(m.symbols.find(c), v);
    }
  auto arg_slots = [&](const std::vector<std::string>& args) {
    std::vector<int> out;
    for (const auto& a : args) out.push_back(a == "T_IN" || a == "T_OUT" ? -1 : m.symbols.find(a));
    return out;
  };
  s.template_args = arg_slots(m.template_args);
  s.reference_template_args = arg_slots(m.reference.template_args);
  plan_rules(m, s);
  return s;
}

// Whether symbol `slot` is a param or a derived value: what a config binds, so what an expression
// bound with the problem alone (a heuristic `when`, a heuristic value) may not read.
bool reads_config(const Manifest& m, int slot) {
  const std::string& name = m.symbols.name(slot);
  return m.param(name) != nullptr ||
         std::any_of(m.derived.begin(), m.derived.end(),
                     [&](const NamedExpr& d) { return d.name == name; });
}

// An optional mapping of name: expression (`derived`, `heuristic_values`), in order: each name
// new, each expression vetted by check(expr, its node) and then added to the symbol table, so the
// ones after it (and every section parsed later) may read it.
template <class Check>
void parse_named_exprs(Parser& P, const YAML::Node& root, const std::string& key, Manifest& m,
                       std::vector<NamedExpr>& out, const Check& check) {
  const YAML::Node n = root[key];
  if (!n.IsDefined()) return;
  if (!n.IsMap()) P.fail_at(n, key, "expected a mapping of name: expression");
  P.unique_keys(n, key);
  for (const auto& kv : n) {
    const std::string name = kv.first.Scalar();
    if (m.symbols.find(name) >= 0 || is_builtin_name(name))
      P.fail_at(kv.first, key + "." + name, "name already in use");
    NamedExpr e{name, P.expr(kv.second, key + "." + name, m.symbols), P.line(kv.first)};
    check(e, kv.second);
    m.symbols.add(name);
    out.push_back(std::move(e));
  }
}

// `P` is not const: max_active_clusters is restricted once it is in scope.
Manifest parse(const YAML::Node& root, const std::string& path, Parser& P) {
  Manifest m;
  m.path = path;
  m.dir = fs::path(path).parent_path().string();
  if (!root.IsMap()) P.fail_at(root, "manifest", "expected a mapping");
  // clang-format off
  P.only_keys(root, "",
              {"name",           "op",        "version",        "description",   "source",
               "headers",        "entry",     "dims",           "dtypes",        "out_dtypes",
               "layouts",        "min_cc",    "max_cc",         "arch_suffix",   "nvrtc_options",
               "params",         "derived",   "constraints",    "template_args", "launch",
               "args",           "reference", "tolerance",      "metric",        "heuristic",
               "heuristic_rank", "k_slices",  "previous_hashes", "heuristic_values"});
  // clang-format on

  m.name = P.scalar(root["name"], "name");
  const std::string stem = fs::path(path).stem().string();
  if (m.name != stem) P.fail_at(root["name"], "name", "must match the file name '" + stem + "'");
  m.op = P.scalar(root["op"], "op");
  m.version = int(root["version"].IsDefined() ? P.integer(root["version"], "version") : 1);
  m.description =
      root["description"].IsDefined() ? P.scalar(root["description"], "description") : "";
  m.source = (fs::path(m.dir) / P.scalar(root["source"], "source")).lexically_normal().string();
  for (const auto& h : P.strings(root["headers"], "headers"))
    m.headers.push_back((fs::path(m.dir) / h).lexically_normal().string());
  m.entry = P.scalar(root["entry"], "entry");
  m.dims = P.strings(root["dims"], "dims");
  if (m.dims.empty()) P.fail_at(root["dims"], "dims", "at least one dim");
  m.dtypes = P.strings(root["dtypes"], "dtypes");
  if (m.dtypes.empty()) P.fail_at(root["dtypes"], "dtypes", "at least one dtype");
  for (size_t i = 0; i < m.dtypes.size(); ++i)
    if (!is_known_dtype(m.dtypes[i]))
      P.fail_at(root["dtypes"][i], "dtypes", "unknown dtype '" + m.dtypes[i] + "'");
  if (root["out_dtypes"].IsDefined() &&
      !(root["out_dtypes"].IsScalar() && root["out_dtypes"].Scalar() == "same")) {
    m.out_dtypes = P.strings(root["out_dtypes"], "out_dtypes");
    for (size_t i = 0; i < m.out_dtypes.size(); ++i)
      if (!is_known_dtype(m.out_dtypes[i]))
        P.fail_at(root["out_dtypes"][i], "out_dtypes", "unknown dtype '" + m.out_dtypes[i] + "'");
  }
  if (root["layouts"].IsDefined()) {
    const YAML::Node l = root["layouts"];
    if (!l.IsMap()) P.fail_at(l, "layouts", "expected a mapping of layout name to constants");
    P.unique_keys(l, "layouts");
    for (const auto& kv : l) {
      std::map<std::string, std::int64_t> consts;
      const std::string lname = kv.first.IsNull() ? "" : kv.first.Scalar();
      if (!kv.second.IsNull()) {
        if (!kv.second.IsMap())
          P.fail_at(kv.second, "layouts." + lname, "expected {CONST: value, ...}");
        P.unique_keys(kv.second, "layouts." + lname);
        for (const auto& c : kv.second)
          consts[c.first.Scalar()] =
              P.integer(c.second, "layouts." + lname + "." + c.first.Scalar());
      }
      m.layouts[lname] = consts;
      if (m.default_layout.empty() && m.layouts.size() == 1) m.default_layout = lname;
    }
    if (m.layouts.empty()) P.fail_at(l, "layouts", "at least one layout");
  } else {
    m.layouts[""] = {};
  }
  m.min_cc = int(root["min_cc"].IsDefined() ? P.integer(root["min_cc"], "min_cc") : 0);
  m.max_cc = int(root["max_cc"].IsDefined() ? P.integer(root["max_cc"], "max_cc") : 0);
  m.arch_suffix =
      root["arch_suffix"].IsDefined() ? P.scalar(root["arch_suffix"], "arch_suffix") : "";
  if (!m.arch_suffix.empty() && m.arch_suffix != "a")
    P.fail_at(root["arch_suffix"], "arch_suffix", "expected \"\" or \"a\"");
  m.previous_hashes = P.strings(root["previous_hashes"], "previous_hashes");
  for (size_t i = 0; i < m.previous_hashes.size(); ++i)
    if (!is_template_hash(m.previous_hashes[i]))
      P.fail_at(
          root["previous_hashes"][i], "previous_hashes[" + std::to_string(i) + "]",
          "'" + m.previous_hashes[i] + "': expected 16 lowercase hex digits (a template hash)");
  m.nvrtc_options = P.strings(root["nvrtc_options"], "nvrtc_options");
  // Include paths would let NVRTC read headers the template's hash does not cover (registry.cc).
  for (size_t i = 0; i < m.nvrtc_options.size(); ++i)
    for (const char* o : {"-I", "--include-path", "-include", "--pre-include"})
      if (m.nvrtc_options[i].starts_with(o))
        P.fail_at(root["nvrtc_options"][i], "nvrtc_options[" + std::to_string(i) + "]",
                  "'" + m.nvrtc_options[i] +
                      "': no include paths or forced includes; list headers under headers");
  parse_params(P, root["params"], m);

  // Symbols: params, dims, dtype sizes, layout constants, device limits, then derived in order,
  // then heuristic values in order (parsed last, before the rules that read them).
  // Each name means one thing: SymbolTable::add returns the slot a name already has, so a dim
  // named like a device limit would silently read the limit.
  for (const auto& p : m.params) m.symbols.add(p.name);
  for (size_t i = 0; i < m.dims.size(); ++i) {
    const std::string& d = m.dims[i];
    const std::string where = "dims[" + std::to_string(i) + "]";
    if (is_builtin_name(d))
      P.fail_at(root["dims"][i], where, "'" + d + "' is a built-in name (docs/templates.md)");
    if (m.param(d)) P.fail_at(root["dims"][i], where, "'" + d + "' is also a param");
    if (m.symbols.find(d) >= 0) P.fail_at(root["dims"][i], where, "'" + d + "' given twice");
    m.symbols.add(d);
  }
  m.symbols.add("in_bytes");
  m.symbols.add("out_bytes");
  const int first_layout_slot = int(m.symbols.size());
  for (const auto& kv : root["layouts"]) {  // none when the manifest has no layouts
    if (kv.second.IsNull()) continue;
    const std::string lname = kv.first.IsNull() ? "" : kv.first.Scalar();
    for (const auto& c : kv.second) {
      const std::string name = c.first.Scalar();
      const std::string where = "layouts." + lname + "." + name;
      const int slot = m.symbols.find(name);
      if (is_builtin_name(name))
        P.fail_at(c.first, where, "'" + name + "' is a built-in name (docs/templates.md)");
      if (slot >= 0 && slot < first_layout_slot)  // the same constant in another layout is fine
        P.fail_at(c.first, where, "'" + name + "' is also a " + (m.param(name) ? "param" : "dim"));
      m.symbols.add(name);
    }
  }
  // Parsed before the device limits and derived values exist, so naming one is an unknown
  // symbol; params come first in the table and are refused by slot.
  if (root["heuristic_rank"].IsDefined()) {
    m.heuristic_rank = P.expr(root["heuristic_rank"], "heuristic_rank", m.symbols);
    const auto& used = m.heuristic_rank.used_slots;
    if (!used.empty() && used.front() < int(m.params.size()))
      P.fail_at(root["heuristic_rank"], "heuristic_rank",
                "may name the problem's dims, in_bytes, out_bytes and layout constants, not "
                "params (it orders templates before any config is chosen)");
  }
  for (const char* s : k_device_symbols) m.symbols.add(s);
  P.set_grid_only_slot(m.symbols.add(k_max_active_clusters));

  // Derived values: each may read params, dims, device limits and the derived values before it.
  parse_named_exprs(P, root, "derived", m, m.derived, [](const NamedExpr&, const YAML::Node&) {});

  const YAML::Node cn = root["constraints"];
  if (cn.IsDefined() && !cn.IsSequence()) P.fail_at(cn, "constraints", "expected a list");
  for (size_t i = 0; cn.IsDefined() && i < cn.size(); ++i) {
    const std::string where = "constraints[" + std::to_string(i) + "]";
    Constraint c;
    c.line = P.line(cn[i]);
    if (cn[i].IsMap()) {
      P.only_keys(cn[i], where, {"expr", "why"});
      c.expr = P.expr(cn[i]["expr"], where, m.symbols);
      c.why = cn[i]["why"].IsDefined() ? P.scalar(cn[i]["why"], where + ".why") : c.expr.text;
    } else {
      c.expr = P.expr(cn[i], where, m.symbols);
      c.why = c.expr.text;
    }
    m.constraints.push_back(std::move(c));
  }

  m.template_args = P.strings(root["template_args"], "template_args");
  check_template_args(P, root["template_args"], "template_args", m.template_args, m, false);
  m.launch = P.launch(root["launch"], "launch", m.symbols, true);

  const YAML::Node an = root["args"];
  if (!an.IsSequence() || an.size() == 0) P.fail_at(an, "args", "expected a non-empty list");
  std::set<std::string> arg_names;
  for (size_t i = 0; i < an.size(); ++i) {
    ArgSpec a = parse_arg(P, an[i], "args[" + std::to_string(i) + "]", m.symbols);
    if (!arg_names.insert(a.name).second)
      P.fail_at(an[i], "args[" + std::to_string(i) + "]", "duplicate name '" + a.name + "'");
    m.args.push_back(std::move(a));
  }
  if (std::none_of(m.args.begin(), m.args.end(), [](const ArgSpec& a) {
        return a.is_buffer() && (a.role == BufferRole::out || a.role == BufferRole::inout);
      }))
    P.fail_at(an, "args", "no output buffer: nothing to verify");
  check_tensor_maps(P, an, m);

  const YAML::Node rn = root["reference"];
  if (!rn.IsDefined()) P.fail_at(root, "reference", "missing (how is correctness judged?)");
  if (rn["builtin"].IsDefined()) {
    P.only_keys(rn, "reference", {"builtin"});
    m.reference.builtin = P.scalar(rn["builtin"], "reference.builtin");
    if (m.reference.builtin != "cublas_gemm")
      P.fail_at(rn["builtin"], "reference.builtin", "unknown builtin (cublas_gemm)");
  } else {
    P.only_keys(rn, "reference", {"entry", "template_args", "launch"});
    m.reference.entry = P.scalar(rn["entry"], "reference.entry");
    m.reference.template_args = P.strings(rn["template_args"], "reference.template_args");
    check_template_args(P, rn["template_args"], "reference.template_args",
                        m.reference.template_args, m, true);
    m.reference.launch = P.launch(rn["launch"], "reference.launch", m.symbols, false);
    const std::set<int> forbidden = [&] {
      std::set<int> s;
      for (const auto& p : m.params) s.insert(m.symbols.find(p.name));
      for (const auto& d : m.derived) s.insert(m.symbols.find(d.name));
      return s;
    }();
    auto check_free = [&](const Expression& e, const char* what) {
      for (int slot : e.used_slots)
        if (forbidden.count(slot))
          P.fail_at(
              rn["launch"], std::string("reference.launch.") + what,
              "a reference kernel cannot depend on the params ('" + m.symbols.name(slot) + "')");
    };
    for (int i = 0; i < 3; ++i) {
      check_free(m.reference.launch.grid[size_t(i)], "grid");
      check_free(m.reference.launch.block[size_t(i)], "block");
      check_free(m.reference.launch.cluster[size_t(i)], "cluster");
    }
    check_free(m.reference.launch.smem, "smem");
  }

  const YAML::Node tn = root["tolerance"];
  if (!tn.IsMap()) P.fail_at(tn, "tolerance", "expected {dtype: max relative error, ...}");
  P.unique_keys(tn, "tolerance");
  for (const auto& kv : tn) {
    const std::string d = kv.first.Scalar();
    if (!is_known_dtype(d)) P.fail_at(kv.first, "tolerance." + d, "unknown dtype");
    const double t = P.number(kv.second, "tolerance." + d);
    if (t < 0 || t > 1) P.fail_at(kv.second, "tolerance." + d, "expected 0 <= tolerance <= 1");
    m.tolerance[d] = t;
  }
  for (const auto& d : m.out_dtypes.empty() ? m.dtypes : m.out_dtypes)
    if (!m.tolerance.count(d)) P.fail_at(tn, "tolerance", "no tolerance for output dtype " + d);

  const YAML::Node mn = root["metric"];
  if (mn.IsMap()) P.unique_keys(mn, "metric");
  if (!mn.IsMap() || mn.size() != 1)
    P.fail_at(mn, "metric", "expected {flops: expr} or {bytes: expr}");
  if (mn["flops"].IsDefined()) {
    m.metric = {MetricSpec::Kind::flops, P.expr(mn["flops"], "metric.flops", m.symbols)};
  } else if (mn["bytes"].IsDefined()) {
    m.metric = {MetricSpec::Kind::bytes, P.expr(mn["bytes"], "metric.bytes", m.symbols)};
  } else {
    P.fail_at(mn, "metric", "expected {flops: expr} or {bytes: expr}");
  }

  if (root["k_slices"].IsDefined()) m.k_slices = P.expr(root["k_slices"], "k_slices", m.symbols);

  // Named values of the problem and the device for the rules' `when`s (space.cc,
  // bind_heuristic_values): parsed after everything else that reads names, so nothing but a
  // `when` and a later heuristic value can read one; they may read dims, dtype sizes, layout
  // constants, device limits and earlier heuristic values, never a param or a derived value.
  parse_named_exprs(P, root, "heuristic_values", m, m.heuristic_values,
                    [&](const NamedExpr& v, const YAML::Node& n) {
                      for (int slot : v.expr.used_slots)
                        if (reads_config(m, slot))
                          P.fail_at(n, "heuristic_values." + v.name,
                                    "may name the problem's dims, in_bytes, out_bytes, layout "
                                    "constants, device limits and earlier heuristic values, not "
                                    "params or derived values ('" +
                                        m.symbols.name(slot) +
                                        "'): it is bound with the problem, before any config");
                    });

  const YAML::Node hn = root["heuristic"];
  if (!hn.IsSequence() || hn.size() == 0)
    P.fail_at(hn, "heuristic", "expected a non-empty list of rules");
  for (size_t i = 0; i < hn.size(); ++i) {
    const std::string where = "heuristic[" + std::to_string(i) + "]";
    P.only_keys(hn[i], where, {"when", "params"});
    HeuristicRule r;
    r.line = P.line(hn[i]);
    if (hn[i]["when"].IsDefined()) {
      r.when = P.expr(hn[i]["when"], where + ".when", m.symbols);
      // A rule's `when` picks the rule before its params are bound (space.cc, fitting_rule): a
      // param or a derived value there would read whatever an earlier rule left.
      for (int slot : r.when.used_slots)
        if (reads_config(m, slot))
          P.fail_at(hn[i]["when"], where + ".when",
                    "may name the problem's dims, in_bytes, out_bytes, layout constants, "
                    "device limits and heuristic values, not params or derived values ('" +
                        m.symbols.name(slot) +
                        "'): it is tested before the rule's params are bound");
    }
    const YAML::Node pn = hn[i]["params"];
    if (!pn.IsMap()) P.fail_at(hn[i], where + ".params", "expected {PARAM: value, ...}");
    P.unique_keys(pn, where + ".params");
    for (const auto& kv : pn) {
      const std::string name = kv.first.Scalar();
      const ParamDomain* d = m.param(name);
      if (!d) P.fail_at(kv.first, where + ".params." + name, "not a param of this template");
      const auto v = P.integer(kv.second, where + ".params." + name);
      if (std::find(d->values.begin(), d->values.end(), v) == d->values.end())
        P.fail_at(kv.second, where + ".params." + name,
                  "value " + std::to_string(v) + " is not in the domain");
      r.params[name] = v;
    }
    for (const auto& p : m.params)
      if (!r.params.count(p.name)) P.fail_at(pn, where + ".params", "missing param " + p.name);
    m.heuristic.push_back(std::move(r));
  }
  if (!m.heuristic.back().when.text.empty())
    P.fail_at(hn[hn.size() - 1], "heuristic", "the last rule must have no 'when' (the default)");
  // A heuristic value no rule and no later value reads is a mistake (a rule edited away from it,
  // or a misspelt name the rule meant), like a config key nothing reads.
  if (const YAML::Node vn = root["heuristic_values"]; vn.IsDefined()) {
    std::set<int> read;
    for (const auto& r : m.heuristic)
      read.insert(r.when.used_slots.begin(), r.when.used_slots.end());
    for (const auto& v : m.heuristic_values)
      read.insert(v.expr.used_slots.begin(), v.expr.used_slots.end());
    for (const auto& kv : vn)
      if (!read.count(m.symbols.find(kv.first.Scalar())))
        P.fail_at(kv.first, "heuristic_values." + kv.first.Scalar(),
                  "read by no rule's when and no later value");
  }
  m.slots = resolve_slots(m);
  return m;
}

}  // namespace

std::string_view to_string(ArgKind kind) {
  switch (kind) {
    case ArgKind::buffer:
      return "buffer";
    case ArgKind::scalar:
      return "scalar";
    case ArgKind::tensor_map:
      return "tensor_map";
  }
  return "?";
}

std::string_view to_string(TensorMapSwizzle swizzle) {
  switch (swizzle) {
    case TensorMapSwizzle::none:
      return "none";
    case TensorMapSwizzle::b32:
      return "32B";
    case TensorMapSwizzle::b64:
      return "64B";
    case TensorMapSwizzle::b128:
      return "128B";
  }
  return "?";
}

std::string_view to_string(TensorMapL2Promotion promotion) {
  switch (promotion) {
    case TensorMapL2Promotion::none:
      return "none";
    case TensorMapL2Promotion::b64:
      return "64B";
    case TensorMapL2Promotion::b128:
      return "128B";
    case TensorMapL2Promotion::b256:
      return "256B";
  }
  return "?";
}

std::string_view to_string(TensorMapOobFill fill) {
  return fill == TensorMapOobFill::zeros ? "zeros" : "nan";
}

std::optional<TensorMapSwizzle> parse_swizzle(std::string_view text) {
  for (auto v : {TensorMapSwizzle::none, TensorMapSwizzle::b32, TensorMapSwizzle::b64,
                 TensorMapSwizzle::b128})
    if (text == to_string(v)) return v;
  return std::nullopt;
}

std::optional<TensorMapL2Promotion> parse_l2_promotion(std::string_view text) {
  for (auto v : {TensorMapL2Promotion::none, TensorMapL2Promotion::b64,
                 TensorMapL2Promotion::b128, TensorMapL2Promotion::b256})
    if (text == to_string(v)) return v;
  return std::nullopt;
}

std::optional<TensorMapOobFill> parse_oob_fill(std::string_view text) {
  for (auto v : {TensorMapOobFill::zeros, TensorMapOobFill::nan})
    if (text == to_string(v)) return v;
  return std::nullopt;
}

int swizzle_bytes(TensorMapSwizzle swizzle) {
  switch (swizzle) {
    case TensorMapSwizzle::none:
      return 0;
    case TensorMapSwizzle::b32:
      return 32;
    case TensorMapSwizzle::b64:
      return 64;
    case TensorMapSwizzle::b128:
      return 128;
  }
  return 0;
}

std::string_view to_string(BufferRole role) {
  switch (role) {
    case BufferRole::in:
      return "in";
    case BufferRole::out:
      return "out";
    case BufferRole::inout:
      return "inout";
    case BufferRole::workspace:
      return "workspace";
  }
  return "?";
}

std::string_view to_string(ScalarType type) {
  switch (type) {
    case ScalarType::i32:
      return "i32";
    case ScalarType::i64:
      return "i64";
    case ScalarType::f32:
      return "f32";
  }
  return "?";
}

const ParamDomain* Manifest::param(std::string_view n) const {
  for (const auto& p : params)
    if (p.name == n) return &p;
  return nullptr;
}

bool Manifest::supports(const Problem& p, int cc) const {
  if (p.op != op) return false;
  if (std::find(dtypes.begin(), dtypes.end(), p.dtype) == dtypes.end()) return false;
  if (out_dtypes.empty()
          ? p.out_dtype != p.dtype
          : std::find(out_dtypes.begin(), out_dtypes.end(), p.out_dtype) == out_dtypes.end())
    return false;
  if (!layouts.count(p.layout)) return false;
  if (p.dims.size() != dims.size()) return false;
  for (size_t i = 0; i < dims.size(); ++i)
    if (p.dims[i].first != dims[i]) return false;
  if (cc < min_cc || (max_cc && cc > max_cc)) return false;
  return true;
}

bool Manifest::grid_reads_max_active_clusters() const {
  const int slot = symbols.find(k_max_active_clusters);
  for (const auto& g : launch.grid)
    if (std::binary_search(g.used_slots.begin(), g.used_slots.end(), slot)) return true;
  return false;
}

double Manifest::space_size() const {
  double n = 1;
  for (const auto& p : params) n *= double(p.values.size());
  return n;
}

std::string cpp_type(std::string_view dtype) {
  if (dtype == "bf16") return "ktune_bf16";
  if (dtype == "fp16") return "ktune_fp16";
  if (dtype == "fp32") return "float";
  if (dtype == "i32") return "int";
  return "void";
}

namespace {

Result<Manifest> parse_manifest(const std::string& yaml, const std::string& path,
                                YAML::Node* document) {
  Parser P(path);
  try {
    YAML::Node root = YAML::Load(yaml);
    if (document) *document = root;
    return parse(root, path, P);
  } catch (const ManifestError& e) {
    return fail(ErrorCode::invalid_argument, e.what());
  } catch (const YAML::Exception& e) {
    return fail(ErrorCode::invalid_argument,
                path + ":" + std::to_string(e.mark.line + 1) + ": YAML: " + e.msg);
  } catch (const std::exception& e) {
    // A defect of the loader, not of the manifest; still an error, never a dead daemon.
    return fail(ErrorCode::invalid_argument,
                P.last_place() + ": cannot load the manifest: " + e.what());
  }
}

}  // namespace

Result<Manifest> parse_manifest(const std::string& yaml, const std::string& path) {
  return parse_manifest(yaml, path, nullptr);
}

Result<Manifest> load_manifest(const std::string& path) {
  std::ifstream in(path);
  if (!in) return fail(ErrorCode::io_error, path + ": cannot open manifest");
  std::stringstream ss;
  ss << in.rdbuf();
  return load_manifest(path, ss.str());
}

Result<Manifest> load_manifest(const std::string& path, const std::string& text,
                               YAML::Node* document) {
  auto m = parse_manifest(text, path, document);
  if (!m) return m;
  std::error_code ec;
  if (!fs::is_regular_file(m->source, ec))
    return fail(ErrorCode::invalid_argument, path + ": source: no file " + m->source);
  for (const auto& h : m->headers)
    if (!fs::is_regular_file(h, ec))
      return fail(ErrorCode::invalid_argument, path + ": headers: no file " + h);
  return m;
}

}  // namespace ktune
