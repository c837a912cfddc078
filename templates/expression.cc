#include "templates/expression.h"

#include <cmath>

#include "templates/expression_ops.h"
#include "templates/expression_program.h"

namespace ktune {

using expression_detail::Instruction;
using expression_detail::OpCode;

namespace {

inline double unary(OpCode op, double a) {
  switch (op) {
    case OpCode::negate:
      return -a;
    case OpCode::logical_not:
      return expr_ops::logical_not(a);
    case OpCode::floor:
      return expr_ops::floor(a);
    case OpCode::ceil:
      return expr_ops::ceil(a);
    case OpCode::abs:
      return expr_ops::abs(a);
    case OpCode::log2:
      return expr_ops::log2(a);
    case OpCode::is_pow2:
      return expr_ops::is_pow2(a);
    default:
      return std::nan("");
  }
}

inline double binary(OpCode op, double a, double b) {
  switch (op) {
    case OpCode::add:
      return a + b;
    case OpCode::subtract:
      return a - b;
    case OpCode::multiply:
      return a * b;
    case OpCode::divide:
      return a / b;
    case OpCode::remainder:
      return expr_ops::remainder(a, b);
    case OpCode::power:
      return std::pow(a, b);
    case OpCode::less:
      return a < b;
    case OpCode::less_equal:
      return a <= b;
    case OpCode::greater:
      return a > b;
    case OpCode::greater_equal:
      return a >= b;
    case OpCode::equal:
      return a == b;
    case OpCode::not_equal:
      return a != b;
    // As muparser: both operands are evaluated, and NaN counts as true.
    case OpCode::logical_and:
      return a != 0 && b != 0;
    case OpCode::logical_or:
      return a != 0 || b != 0;
    case OpCode::ceil_div:
      return expr_ops::ceil_div(a, b);
    default:
      return std::nan("");
  }
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
  return expression_detail::parse_expression(text, symbols);
}

Result<double> Evaluator::eval(const Expression& expr) {
  if (!expr.program)
    return fail(ErrorCode::invalid_argument, "'" + expr.text + "': not a compiled expression");
  const ExpressionProgram& program = *expr.program;
  if (program.max_slot >= int(m_values.size()))
    return fail(ErrorCode::internal,
                "'" + expr.text + "': reads a variable outside this evaluator's symbol table");
  const std::vector<Instruction>& code = program.code;
  const double* values = m_values.data();
  double* s = m_stack.data();
  size_t n = 0;  // operands on the stack; compile_expression() bounds it by k_max_stack
  for (size_t pc = 0; pc < code.size(); ++pc) {
    const Instruction& in = code[pc];
    switch (in.op) {
      case OpCode::constant:
        s[n++] = in.value;
        break;
      case OpCode::load:
        s[n++] = values[in.arg];
        break;
      case OpCode::jump_if_zero:
        if (s[--n] == 0) pc = size_t(in.arg) - 1;
        break;
      case OpCode::jump:
        pc = size_t(in.arg) - 1;
        break;
      case OpCode::min:
      case OpCode::max:
        n -= size_t(in.arg);
        s[n] = in.op == OpCode::min ? expr_ops::min(s + n, in.arg) : expr_ops::max(s + n, in.arg);
        ++n;
        break;
      default:
        if (in.op < expression_detail::k_first_binary) {
          s[n - 1] = unary(in.op, s[n - 1]);
        } else {
          --n;
          s[n - 1] = binary(in.op, s[n - 1], s[n]);
        }
    }
  }
  return s[0];
}

}  // namespace ktune
