// Expressions in template manifests: constraints, derived values, launch geometry, arg sizes.
//
// Built on muparser (double precision) with ktune's additions: `%` (integer remainder), `!`,
// `floor`, `ceil`, `ceil_div(a, b)`, `is_pow2(x)`. An Expression is compiled once against a
// SymbolTable (the names in scope); an unknown name fails compilation, so a manifest with a typo
// is rejected when it loads, not when a tuning job reaches it.
//
// Thread-safety: an Evaluator is single-threaded (muparser parsers keep state); make one per
// thread. SymbolTable and Expression are immutable after construction and can be shared.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.h"

namespace ktune {

// Names in scope and their slot numbers in a value array.
class SymbolTable {
 public:
  // Returns the slot of `name`, adding it if new.
  int add(const std::string& name);
  // -1 when absent.
  int find(std::string_view name) const;
  size_t size() const { return m_names.size(); }
  const std::string& name(int slot) const { return m_names[size_t(slot)]; }

 private:
  std::vector<std::string> m_names;
  std::map<std::string, int, std::less<>> m_slots;
};

// A validated expression: its text and the slots of the variables it reads.
struct Expression {
  std::string text;
  std::vector<int> used_slots;  // sorted
};

// Checks `text` against `symbols`. Errors name the unknown variable or the syntax problem and its
// position, without a file (callers prefix "file:line: where: ").
Result<Expression> compile_expression(std::string_view text, const SymbolTable& symbols);

// Evaluates expressions over one array of variable values, caching one muparser parser per
// distinct expression text.
class Evaluator {
 public:
  explicit Evaluator(const SymbolTable& symbols);
  ~Evaluator();
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  void set(int slot, double value) { m_values[size_t(slot)] = value; }
  double get(int slot) const { return m_values[size_t(slot)]; }
  // Evaluates; a runtime failure (e.g. division by zero giving inf/nan is not one) is an Error.
  Result<double> eval(const Expression& expr);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
  std::vector<double> m_values;
};

}  // namespace ktune
