#include "tests/templates/muparser_reference.h"

#include <muParser.h>

#include "templates/expression_ops.h"

namespace ktune {
namespace {

// ktune's additions, defined exactly as templates/expression.cc defined them on muparser.
double op_mod(double a, double b) {
  return expr_ops::remainder(a, b);
}
double op_not(double a) {
  return expr_ops::logical_not(a);
}
double fn_floor(double a) {
  return expr_ops::floor(a);
}
double fn_ceil(double a) {
  return expr_ops::ceil(a);
}
double fn_ceil_div(double a, double b) {
  return expr_ops::ceil_div(a, b);
}
double fn_is_pow2(double a) {
  return expr_ops::is_pow2(a);
}

std::unique_ptr<mu::Parser> make_parser(const SymbolTable& symbols, std::vector<double>& values) {
  auto p = std::make_unique<mu::Parser>();
  p->DefineOprt("%", op_mod, mu::prMUL_DIV, mu::oaLEFT, true);
  p->DefineInfixOprt("!", op_not, mu::prINFIX, true);
  p->DefineFun("floor", fn_floor, true);
  p->DefineFun("ceil", fn_ceil, true);
  p->DefineFun("ceil_div", fn_ceil_div, true);
  p->DefineFun("is_pow2", fn_is_pow2, true);
  for (size_t i = 0; i < symbols.size(); ++i) p->DefineVar(symbols.name(int(i)), &values[i]);
  return p;
}

}  // namespace

bool muparser_accepts(const std::string& text, const SymbolTable& symbols) {
  std::vector<double> values(symbols.size(), 1.0);
  try {
    auto p = make_parser(symbols, values);
    p->SetExpr(text);
    p->Eval();
    return true;
  } catch (const mu::Parser::exception_type&) {
    return false;
  }
}

MuparserReference::MuparserReference(const SymbolTable& symbols, Optimizer optimizer)
    : m_symbols(symbols), m_optimizer(optimizer), m_values(symbols.size(), 0.0) {}

MuparserReference::~MuparserReference() = default;

Result<double> MuparserReference::eval(const std::string& text) {
  try {
    auto& parser = m_parsers[text];
    if (!parser) {
      parser = make_parser(m_symbols, m_values);
      parser->EnableOptimizer(m_optimizer == Optimizer::on);
      parser->SetExpr(text);
    }
    return parser->Eval();
  } catch (const mu::Parser::exception_type& e) {
    m_parsers.erase(text);
    return fail(ErrorCode::invalid_argument, "'" + text + "': " + e.GetMsg());
  }
}

}  // namespace ktune
