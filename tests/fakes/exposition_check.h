// A strict check of Prometheus text exposition (format 0.0.4), stricter than Prometheus itself
// where its clients are: what the Python client's parser rejects is rejected here too.
//
// Rules: every line is `# HELP`, `# TYPE` or a sample; each family has at most one HELP and one
// TYPE, both before its samples, and its samples are contiguous; a sample belongs to the family
// declared last and is named as its type says (counter `x`: `x_total`; histogram: `_bucket` with
// `le`, `_sum`, `_count`; summary: the name with `quantile`, `_sum`, `_count`; gauge: the name);
// no family may be named like another's sample (gauge `x` beside counter `x_total`); no series
// twice; histogram buckets ascend to +Inf with cumulative counts equal to `_count`.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace ktune::testing {

struct ExpositionSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::vector<std::string> problems;         // empty: the text passed
  std::map<std::string, std::string> types;  // family -> type
  std::vector<ExpositionSample> samples;
};

namespace exposition_detail {

inline bool valid_name(const std::string& n) {
  static const std::regex re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  return std::regex_match(n, re);
}

// Parses `{a="1",b="x\"y"}` at `pos`; false on a syntax error.
inline bool parse_labels(const std::string& line, size_t& pos,
                         std::map<std::string, std::string>& labels, std::string& why) {
  ++pos;  // '{'
  while (pos < line.size() && line[pos] != '}') {
    const size_t eq = line.find('=', pos);
    if (eq == std::string::npos) return why = "label without '='", false;
    const std::string key = line.substr(pos, eq - pos);
    if (!valid_name(key) || key.find(':') != std::string::npos)
      return why = "bad label name '" + key + "'", false;
    pos = eq + 1;
    if (pos >= line.size() || line[pos] != '"') return why = "label value not quoted", false;
    ++pos;
    std::string value;
    while (pos < line.size() && line[pos] != '"') {
      if (line[pos] == '\\') {
        if (pos + 1 >= line.size()) return why = "dangling escape", false;
        const char e = line[pos + 1];
        if (e != '\\' && e != '"' && e != 'n') return why = "bad escape in label value", false;
        value += e == 'n' ? '\n' : e;
        pos += 2;
      } else {
        value += line[pos++];
      }
    }
    if (pos >= line.size()) return why = "unterminated label value", false;
    ++pos;  // closing quote
    if (labels.count(key)) return why = "label '" + key + "' twice", false;
    labels[key] = value;
    if (pos < line.size() && line[pos] == ',') {
      ++pos;
      if (pos < line.size() && line[pos] == '}') return why = "trailing comma in labels", false;
    } else if (pos >= line.size() || line[pos] != '}') {
      return why = "expected ',' or '}' in labels", false;
    }
  }
  if (pos >= line.size()) return why = "unterminated labels", false;
  ++pos;  // '}'
  return true;
}

inline bool parse_value(const std::string& s, double& v) {
  if (s == "+Inf") return v = INFINITY, true;
  if (s == "-Inf") return v = -INFINITY, true;
  if (s == "NaN") return v = NAN, true;
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

// The names a family of `type` may give its samples (and so reserves).
inline std::set<std::string> sample_names(const std::string& family, const std::string& type) {
  if (type == "counter") {
    const std::string base =
        family.ends_with("_total") ? family.substr(0, family.size() - 6) : family;
    return {base + "_total", base + "_created"};
  }
  if (type == "histogram") return {family + "_bucket", family + "_sum", family + "_count"};
  if (type == "summary") return {family, family + "_sum", family + "_count"};
  return {family};
}

inline std::string base_name(const std::string& family, const std::string& type) {
  return type == "counter" && family.ends_with("_total") ? family.substr(0, family.size() - 6)
                                                         : family;
}

}  // namespace exposition_detail

inline Exposition check_exposition(const std::string& text) {
  using namespace exposition_detail;
  Exposition out;
  auto problem = [&](size_t line_no, const std::string& what) {
    out.problems.push_back("line " + std::to_string(line_no) + ": " + what);
  };
  if (!text.empty() && text.back() != '\n') problem(0, "text does not end with a newline");
  std::set<std::string> helped, sampled_families, series;
  std::map<std::string, std::string> reserved;  // name -> family reserving it
  std::string current;                          // the family declared last
  std::istringstream in(text);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) {
      problem(n, "empty line");
      continue;
    }
    if (line[0] == '#') {
      std::istringstream ls(line);
      std::string hash, kind, name;
      ls >> hash >> kind >> name;
      if (kind != "HELP" && kind != "TYPE") {
        problem(n, "comment that is neither HELP nor TYPE");
        continue;
      }
      if (!valid_name(name)) {
        problem(n, "bad metric name '" + name + "'");
        continue;
      }
      if (sampled_families.count(name)) problem(n, kind + " for '" + name + "' after its samples");
      if (kind == "HELP") {
        if (!helped.insert(name).second) problem(n, "second HELP for '" + name + "'");
        continue;
      }
      std::string type, rest;
      ls >> type;
      if (ls >> rest) problem(n, "trailing text after TYPE");
      static const std::set<std::string> k_types = {"counter", "gauge", "histogram", "summary",
                                                    "untyped"};
      if (!k_types.count(type)) problem(n, "unknown type '" + type + "'");
      if (out.types.count(name)) {
        problem(n, "second TYPE for '" + name + "'");
        continue;
      }
      out.types[name] = type;
      std::set<std::string> names = sample_names(name, type);
      names.insert(base_name(name, type));
      for (const auto& r : names) {
        auto [it, fresh] = reserved.emplace(r, name);
        if (!fresh && it->second != name)
          problem(n,
                  "family '" + name + "' collides with family '" + it->second + "' on '" + r + "'");
      }
      current = name;
      continue;
    }
    ExpositionSample s;
    size_t pos = line.find_first_of("{ ");
    if (pos == std::string::npos) {
      problem(n, "sample without a value");
      continue;
    }
    s.name = line.substr(0, pos);
    if (!valid_name(s.name)) problem(n, "bad sample name '" + s.name + "'");
    std::string why;
    if (line[pos] == '{' && !parse_labels(line, pos, s.labels, why)) {
      problem(n, why);
      continue;
    }
    if (pos >= line.size() || line[pos] != ' ') {
      problem(n, "expected a space before the value");
      continue;
    }
    std::istringstream vs(line.substr(pos + 1));
    std::string value, timestamp, extra;
    vs >> value >> timestamp >> extra;
    if (!parse_value(value, s.value)) problem(n, "bad value '" + value + "'");
    if (!extra.empty()) problem(n, "trailing text after the sample");
    if (current.empty()) {
      problem(n, "sample '" + s.name + "' before any TYPE");
      continue;
    }
    const std::string& type = out.types[current];
    if (!sample_names(current, type).count(s.name) || s.name.ends_with("_created"))
      problem(n,
              "sample '" + s.name + "' does not belong to " + type + " family '" + current + "'");
    if (type == "histogram" && s.name.ends_with("_bucket") && !s.labels.count("le"))
      problem(n, "bucket without 'le'");
    if (type == "summary" && s.name == current && !s.labels.count("quantile"))
      problem(n, "summary sample without 'quantile'");
    sampled_families.insert(current);
    std::string id = s.name + "{";
    for (const auto& [k, v] : s.labels) id += k + "=" + v + ",";
    if (!series.insert(id).second) problem(n, "series " + id + "} twice");
    out.samples.push_back(std::move(s));
  }
  // Histograms: ascending buckets to +Inf, cumulative, equal to _count.
  for (const auto& [family, type] : out.types) {
    if (type != "histogram") continue;
    std::map<std::string, std::vector<std::pair<double, double>>> buckets;  // by other labels
    std::map<std::string, double> counts;
    for (const auto& s : out.samples) {
      std::string key;
      for (const auto& [k, v] : s.labels)
        if (k != "le") key += k + "=" + v + ",";
      double le = 0;
      if (s.name == family + "_bucket" && parse_value(s.labels.at("le"), le))
        buckets[key].push_back({le, s.value});
      else if (s.name == family + "_count")
        counts[key] = s.value;
    }
    if (buckets.empty()) out.problems.push_back(family + ": histogram without buckets");
    for (const auto& [key, list] : buckets) {
      for (size_t i = 1; i < list.size(); ++i) {
        if (!(list[i].first > list[i - 1].first))
          out.problems.push_back(family + ": buckets not ascending");
        if (list[i].second < list[i - 1].second)
          out.problems.push_back(family + ": bucket counts not cumulative");
      }
      if (!std::isinf(list.back().first)) out.problems.push_back(family + ": no +Inf bucket");
      if (!counts.count(key) || counts[key] != list.back().second)
        out.problems.push_back(family + ": _count differs from the +Inf bucket");
    }
  }
  return out;
}

}  // namespace ktune::testing
