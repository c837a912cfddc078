// Expressions in template manifests: constraints, derived values, launch geometry, arg sizes.
//
// muparser's syntax and semantics (double precision; docs/templates.md lists the grammar) with
// ktune's additions: `%` (integer remainder), `!`, `floor`, `ceil`, `ceil_div(a, b)`,
// `is_pow2(x)`. An Expression is compiled once, when its template loads, against a SymbolTable
// (the names in scope) into a small postfix program over the slots of a value array; an unknown
// name fails compilation, so a manifest with a typo is rejected when it loads, not when a tuning
// job reaches it. Evaluating walks the program: no parsing and no heap allocation, so a fresh
// Evaluator per lookup is cheap. tests/templates/expression_diff_test.cc checks every manifest
// expression against muparser itself.
//
// Thread-safety: an Evaluator is single-threaded (it holds the values); make one per thread or
// per call. SymbolTable and Expression are immutable after construction and can be shared; copies
// of an Expression share one compiled program.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
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
  // Hashed, looked up by string_view: a cold lookup binds ~30 names per instantiate().
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> m_names;
  std::unordered_map<std::string, int, Hash, std::equal_to<>> m_slots;
};

// The compiled form of one expression (defined in expression.cc).
struct ExpressionProgram;

// A validated expression: its text, the slots of the variables it reads, and its program.
struct Expression {
  std::string text;
  std::vector<int> used_slots;  // sorted
  // Null for a default-constructed Expression (evaluating one is an Error).
  std::shared_ptr<const ExpressionProgram> program;
};

// Parses `text` against `symbols` into its program. Errors name the unknown variable, or the
// syntax problem and its position, without a file (callers prefix "file:line: where: ").
Result<Expression> compile_expression(std::string_view text, const SymbolTable& symbols);

// The value `expr` takes whatever the slots without a value in `known` hold, when the known ones
// alone decide it (constants, `0 && x`, `1 || x`, a `?:` whose condition is known or whose two
// branches agree); nullopt otherwise, or for an Expression never compiled. `known` has one entry
// per slot of the expression's SymbolTable. Used when a manifest loads, to drop from a heuristic
// rule's plan what its params alone decide (manifest.h, RulePlan).
std::optional<double> fold(const Expression& expr, const std::vector<std::optional<double>>& known);

// Evaluates compiled expressions over one array of variable values (one slot per symbol).
class Evaluator {
 public:
  // The deepest operand stack a program may need; compile_expression() rejects deeper ones.
  static constexpr int k_max_stack = 64;

  explicit Evaluator(const SymbolTable& symbols) : m_values(symbols.size(), 0.0) {}
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  void set(int slot, double value) { m_values[size_t(slot)] = value; }
  double get(int slot) const { return m_values[size_t(slot)]; }
  // Evaluates; an Error only for an Expression that was never compiled or reads a slot outside
  // this Evaluator's table (division by zero gives inf/nan, as in muparser, and is not one).
  Result<double> eval(const Expression& expr);

 private:
  std::vector<double> m_values;
  std::array<double, k_max_stack> m_stack;
};

}  // namespace ktune
