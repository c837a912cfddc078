// MuparserReference: expressions evaluated by muparser, as ktune did before they were compiled
// (one parser per expression text, ktune's operators and functions added). Kept in the tests as
// the reference the compiled form must match value for value. Single-threaded.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "templates/expression.h"

namespace mu {
class Parser;
}

namespace ktune {

// Whether muparser accepts `text` with every name in `symbols` defined as a variable.
bool muparser_accepts(const std::string& text, const SymbolTable& symbols);

class MuparserReference {
 public:
  // muparser's bytecode optimizer, on in ktune before: it rewrites `(x + 1) / 3` into
  // `x * (1/3) + 1/3` and `x * 0.1 / 0.3` into `x * (0.1/0.3)`, which round differently from the
  // expression as written. Off evaluates as written, as the compiled form does.
  enum class Optimizer { on, off };

  explicit MuparserReference(const SymbolTable& symbols, Optimizer optimizer = Optimizer::on);
  ~MuparserReference();
  MuparserReference(const MuparserReference&) = delete;
  MuparserReference& operator=(const MuparserReference&) = delete;

  void set(int slot, double value) { m_values[size_t(slot)] = value; }
  // Parses `text` on first use, then evaluates it over the current values.
  Result<double> eval(const std::string& text);

 private:
  const SymbolTable& m_symbols;
  Optimizer m_optimizer;
  std::vector<double> m_values;
  std::map<std::string, std::unique_ptr<mu::Parser>> m_parsers;
};

}  // namespace ktune
