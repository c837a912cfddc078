// The heatmap of measured configs: one panel per template and STAGES value, BLOCK_M rows by
// BLOCK_N columns; a cell is the best time of the configs with that tile (the other params
// collapse into it), coloured relative to the problem's best. Failures are marked per cell
// with the letter of their most frequent outcome.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "report/draw.h"

namespace ktune::report {

namespace {

constexpr int k_cell = 24;           // px per cell
constexpr size_t k_max_panels = 24;  // per problem; the rest are counted in a note
constexpr size_t k_max_values = 32;  // per axis

// Which params a template's panels are drawn over.
struct Axes {
  std::string row = "BLOCK_M";
  std::string col = "BLOCK_N";
  std::string panel = "STAGES";  // "" when the template has no such param
};

Axes axes_for(const std::vector<const Trial*>& trials) {
  std::map<std::string, std::set<std::int64_t>> values;
  for (const Trial* t : trials)
    for (const auto& [name, v] : t->params) values[name].insert(v);
  Axes a;
  if (!values.contains("STAGES")) a.panel = "";
  if (values.contains(a.row) && values.contains(a.col)) return a;
  // No tile params (memory-bound templates): the two params with the most distinct values.
  std::vector<std::pair<size_t, std::string>> by_count;
  for (const auto& [name, vs] : values)
    if (name != a.panel) by_count.push_back({vs.size(), name});
  std::stable_sort(by_count.begin(), by_count.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  a.row = by_count.size() > 0 ? by_count[0].second : "";
  a.col = by_count.size() > 1 ? by_count[1].second : "";
  return a;
}

std::int64_t param_or(const Params& p, const std::string& name, std::int64_t fallback) {
  if (name.empty()) return fallback;
  auto it = p.find(name);
  return it == p.end() ? fallback : it->second;
}

char outcome_letter(Outcome o) {
  switch (o) {
    case Outcome::invalid:
      return 'I';
    case Outcome::compile_error:
      return 'C';
    case Outcome::resource_error:
      return 'R';
    case Outcome::wrong_result:
      return 'W';
    case Outcome::crash:
      return 'X';
    case Outcome::timeout:
      return 'T';
    case Outcome::in_flight:
      return '?';
    case Outcome::ok:
      break;
  }
  return ' ';
}

struct Cell {
  double best_us = std::numeric_limits<double>::infinity();
  size_t ok = 0;
  std::map<Outcome, size_t> failures;
  std::string best_params;
};

struct Panel {
  std::string template_name;
  std::string title;
  Axes axes;
  std::map<std::pair<std::int64_t, std::int64_t>, Cell> cells;  // (row, col)
  double best_us = std::numeric_limits<double>::infinity();
};

std::string panel_svg(const Panel& p, double problem_best) {
  std::set<std::int64_t> rows_set, cols_set;
  for (const auto& [rc, _] : p.cells) {
    rows_set.insert(rc.first);
    cols_set.insert(rc.second);
  }
  std::vector<std::int64_t> rows(rows_set.begin(), rows_set.end());
  std::vector<std::int64_t> cols(cols_set.begin(), cols_set.end());
  const bool clipped = rows.size() > k_max_values || cols.size() > k_max_values;
  if (rows.size() > k_max_values) rows.resize(k_max_values);
  if (cols.size() > k_max_values) cols.resize(k_max_values);
  const int left = 60, top = 30, bottom = 30;
  // Wide enough for the title (about 6.5 px per character at the page's font size).
  const int w = std::max(left + int(cols.size()) * k_cell + 8, 8 + int(p.title.size() * 7));
  const int h = top + int(rows.size()) * k_cell + bottom;
  std::string s = strf(
      "<svg class=\"heatmap\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "role=\"img\">",
      w, h, w, h);
  s += "<text class=\"ptitle\" x=\"4\" y=\"12\">" + escape_html(p.title) + "</text>";
  for (size_t i = 0; i < rows.size(); ++i)
    s += strf("<text class=\"tick\" x=\"%d\" y=\"%d\" text-anchor=\"end\">%lld</text>", left - 4,
              top + int(i) * k_cell + k_cell / 2 + 4, (long long)rows[i]);
  for (size_t j = 0; j < cols.size(); ++j)
    s += strf("<text class=\"tick\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">%lld</text>",
              left + int(j) * k_cell + k_cell / 2, top + int(rows.size()) * k_cell + 12,
              (long long)cols[j]);
  s += strf("<text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>",
            left + int(cols.size()) * k_cell / 2, h - 3, escape_html(p.axes.col).c_str());
  // The row param's name stands above its ticks (rotated text would run into the title).
  s += strf("<text class=\"axis\" x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>", left - 2,
            top - 5, escape_html(p.axes.row).c_str());
  for (size_t i = 0; i < rows.size(); ++i) {
    for (size_t j = 0; j < cols.size(); ++j) {
      auto it = p.cells.find({rows[i], cols[j]});
      if (it == p.cells.end()) continue;
      const Cell& c = it->second;
      const int x = left + int(j) * k_cell, y = top + int(i) * k_cell;
      std::string tip = p.axes.row + "=" + std::to_string(rows[i]) + " " + p.axes.col + "=" +
                        std::to_string(cols[j]);
      if (c.ok) {
        tip += strf("\nbest %s us (%.2fx the problem's best) of %zu ok configs",
                    num(c.best_us).c_str(), c.best_us / problem_best, c.ok);
        tip += "\n" + c.best_params;
        s += strf(
            "<rect class=\"cell\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
            "fill=\"%s\"><title>",
            x, y, k_cell - 1, k_cell - 1, time_colour(c.best_us / problem_best).c_str());
      } else {
        s += strf("<rect class=\"empty\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\"><title>", x,
                  y, k_cell - 1, k_cell - 1);
      }
      if (!c.failures.empty()) {
        Outcome worst = c.failures.begin()->first;
        size_t most = 0;
        for (const auto& [o, n] : c.failures) {
          tip += strf("\n%zu %s", n, std::string(to_string(o)).c_str());
          if (n > most) most = n, worst = o;
        }
        s += escape_html(tip) + "</title></rect>";
        // Alone in its cell: a big letter; beside ok configs: a small one in the corner.
        if (c.ok)
          s += strf("<text class=\"fail small\" x=\"%d\" y=\"%d\">%c</text>", x + k_cell - 9, y + 9,
                    outcome_letter(worst));
        else
          s += strf("<text class=\"fail\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">%c</text>",
                    x + k_cell / 2, y + k_cell / 2 + 5, outcome_letter(worst));
      } else {
        s += escape_html(tip) + "</title></rect>";
      }
    }
  }
  s += "</svg>";
  if (clipped)
    s += "<p class=\"note\">more than 32 values on an axis: the largest are not shown</p>";
  return s;
}

std::string legend_svg() {
  std::string s = "<svg class=\"legend\" width=\"420\" height=\"34\" viewBox=\"0 0 420 34\">";
  for (int i = 0; i <= 20; ++i) {
    const double ratio = std::pow(4.0, i / 20.0);
    s += strf("<rect x=\"%d\" y=\"2\" width=\"8\" height=\"12\" fill=\"%s\"/>", 4 + i * 8,
              time_colour(ratio).c_str());
  }
  s += "<text class=\"tick\" x=\"4\" y=\"27\">best</text>"
       "<text class=\"tick\" x=\"84\" y=\"27\" text-anchor=\"middle\">2x</text>"
       "<text class=\"tick\" x=\"172\" y=\"27\" text-anchor=\"end\">&#8805;4x</text>"
       "<text class=\"tick\" x=\"186\" y=\"12\">failures: I invalid, C compile, R resources,</text>"
       "<text class=\"tick\" x=\"186\" y=\"27\">W wrong result, X crash, T timeout</text></svg>";
  return s;
}

}  // namespace

std::string heatmap_html(const std::vector<const TrialSet*>& sets) {
  // Trials by template, then panels by the template's axes.
  std::map<std::string, std::vector<const Trial*>> by_template;
  for (const TrialSet* set : sets)
    for (const Trial& t : set->trials) by_template[t.template_name].push_back(&t);
  std::vector<Panel> panels;
  double problem_best = std::numeric_limits<double>::infinity();
  for (const auto& [name, trials] : by_template) {
    const Axes axes = axes_for(trials);
    std::map<std::int64_t, Panel> by_stage;
    for (const Trial* t : trials) {
      const std::int64_t stage = param_or(t->params, axes.panel, 0);
      Panel& p = by_stage[stage];
      if (p.title.empty()) {
        p.template_name = name;
        p.axes = axes;
        p.title = axes.panel.empty() ? name
                                     : name + " \u00b7 " + axes.panel + "=" + std::to_string(stage);
      }
      Cell& c = p.cells[{param_or(t->params, axes.row, 0), param_or(t->params, axes.col, 0)}];
      if (t->outcome == Outcome::ok) {
        ++c.ok;
        if (t->median_us < c.best_us)
          c.best_us = t->median_us, c.best_params = params_text(t->params);
        p.best_us = std::min(p.best_us, t->median_us);
        problem_best = std::min(problem_best, t->median_us);
      } else {
        ++c.failures[t->outcome];
      }
    }
    for (auto& [_, p] : by_stage) panels.push_back(std::move(p));
  }
  if (panels.empty()) return "<p class=\"note\">no recorded trials for this problem</p>";
  std::string s = "<div class=\"panels\">";
  const size_t total = panels.size();
  const size_t shown = std::min(total, k_max_panels);
  if (total > k_max_panels) {
    // Keep the panels holding the fastest configs.
    std::stable_sort(panels.begin(), panels.end(),
                     [](const Panel& a, const Panel& b) { return a.best_us < b.best_us; });
    panels.resize(shown);
  }
  for (const Panel& p : panels) s += panel_svg(p, problem_best);
  s += "</div>" + legend_svg();
  if (shown < total)
    s += strf("<p class=\"note\">the %zu panels holding the fastest configs shown of %zu</p>",
              shown, total);
  return s;
}

}  // namespace ktune::report
