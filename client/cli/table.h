// A plain text table for the CLI's human output: columns sized to their widest cell.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace ktune::cli {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : m_header(std::move(header)) {}
  void add(std::vector<std::string> row) { m_rows.push_back(std::move(row)); }
  bool empty() const { return m_rows.empty(); }

  std::string render() const {
    std::vector<size_t> width(m_header.size(), 0);
    auto measure = [&](const std::vector<std::string>& row) {
      for (size_t i = 0; i < row.size() && i < width.size(); ++i)
        width[i] = std::max(width[i], row[i].size());
    };
    measure(m_header);
    for (const auto& r : m_rows) measure(r);
    auto line = [&](const std::vector<std::string>& row) {
      std::string s;
      for (size_t i = 0; i < width.size(); ++i) {
        const std::string cell = i < row.size() ? row[i] : "";
        s += cell;
        if (i + 1 < width.size()) s += std::string(width[i] - cell.size() + 2, ' ');
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      return s + "\n";
    };
    std::string out = line(m_header);
    for (const auto& r : m_rows) out += line(r);
    return out;
  }

 private:
  std::vector<std::string> m_header;
  std::vector<std::vector<std::string>> m_rows;
};

inline std::string fixed(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace ktune::cli
