#include "templates/expression.h"

#include <muParser.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace ktune {
namespace {

double op_mod(double a, double b) {
  const auto ib = static_cast<long long>(b);
  if (ib == 0) return std::nan("");
  return double(static_cast<long long>(a) % ib);
}
double op_not(double a) {
  return a == 0 ? 1 : 0;
}
double fn_floor(double a) {
  return std::floor(a);
}
double fn_ceil(double a) {
  return std::ceil(a);
}
double fn_ceil_div(double a, double b) {
  if (b == 0) return std::nan("");
  return std::ceil(a / b);
}
double fn_is_pow2(double a) {
  const auto i = static_cast<long long>(a);
  return (double(i) == a && i > 0 && (i & (i - 1)) == 0) ? 1 : 0;
}

void add_ktune_functions(mu::Parser& p) {
  p.DefineOprt("%", op_mod, mu::prMUL_DIV, mu::oaLEFT, true);
  p.DefineInfixOprt("!", op_not, mu::prINFIX, true);
  p.DefineFun("floor", fn_floor, true);
  p.DefineFun("ceil", fn_ceil, true);
  p.DefineFun("ceil_div", fn_ceil_div, true);
  p.DefineFun("is_pow2", fn_is_pow2, true);
}

// Variable factory used during validation: hands out scratch storage for any name so that
// muparser reports every variable the expression uses instead of failing on the first.
double* scratch_var(const char*, void* user) {
  auto* store = static_cast<std::vector<std::unique_ptr<double>>*>(user);
  store->push_back(std::make_unique<double>(1.0));
  return store->back().get();
}

}  // namespace

int SymbolTable::add(const std::string& name) {
  if (auto it = m_slots.find(name); it != m_slots.end()) return it->second;
  const int slot = int(m_names.size());
  m_names.push_back(name);
  m_slots.emplace(name, slot);
  return slot;
}

int SymbolTable::find(std::string_view name) const {
  auto it = m_slots.find(name);
  return it == m_slots.end() ? -1 : it->second;
}

Result<Expression> compile_expression(std::string_view text, const SymbolTable& symbols) {
  Expression expr{std::string(text), {}};
  if (expr.text.find_first_not_of(" \t") == std::string::npos)
    return fail(ErrorCode::invalid_argument, "empty expression");
  std::vector<std::unique_ptr<double>> scratch;
  try {
    mu::Parser p;
    add_ktune_functions(p);
    p.SetVarFactory(scratch_var, &scratch);
    p.SetExpr(expr.text);
    const auto& used = p.GetUsedVar();
    for (const auto& [name, _] : used) {
      const int slot = symbols.find(name);
      if (slot < 0)
        return fail(ErrorCode::invalid_argument,
                    "unknown variable '" + name + "' in '" + expr.text + "'");
      expr.used_slots.push_back(slot);
    }
    p.Eval();  // catches errors GetUsedVar's partial parse does not (e.g. a dangling operator)
  } catch (const mu::Parser::exception_type& e) {
    return fail(ErrorCode::invalid_argument, "bad expression '" + expr.text + "': " + e.GetMsg() +
                                                 " at position " + std::to_string(e.GetPos()));
  }
  std::sort(expr.used_slots.begin(), expr.used_slots.end());
  return expr;
}

struct Evaluator::Impl {
  const SymbolTable& symbols;
  std::unordered_map<std::string, std::unique_ptr<mu::Parser>> parsers;
};

Evaluator::Evaluator(const SymbolTable& symbols)
    : m_impl(std::make_unique<Impl>(Impl{symbols, {}})), m_values(symbols.size(), 0.0) {}

Evaluator::~Evaluator() = default;

Result<double> Evaluator::eval(const Expression& expr) {
  try {
    auto& parser = m_impl->parsers[expr.text];
    if (!parser) {
      // Bind exactly the names this expression uses to their slots; m_values never reallocates.
      auto p = std::make_unique<mu::Parser>();
      add_ktune_functions(*p);
      for (int slot : expr.used_slots)
        p->DefineVar(m_impl->symbols.name(slot), &m_values[size_t(slot)]);
      p->SetExpr(expr.text);
      parser = std::move(p);
    }
    return parser->Eval();
  } catch (const mu::Parser::exception_type& e) {
    m_impl->parsers.erase(expr.text);
    return fail(ErrorCode::invalid_argument, "'" + expr.text + "': " + e.GetMsg());
  }
}

}  // namespace ktune
