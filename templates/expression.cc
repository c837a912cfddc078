#include "templates/expression.h"

#include <algorithm>
#include <array>
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

using Known = std::optional<double>;

// binary() over operands that may be unknown: known when both are, or when one decides.
Known fold_binary(OpCode op, Known a, Known b) {
  if (a && b) return binary(op, *a, *b);
  // Both operands are evaluated, but one false decides && and one true || (NaN counts as true).
  if (op == OpCode::logical_and && ((a && *a == 0) || (b && *b == 0))) return 0.0;
  if (op == OpCode::logical_or && ((a && *a != 0) || (b && *b != 0))) return 1.0;
  return std::nullopt;
}

// fold()'s walk from `pc` with operand stack `s` (by value: a `?:` on an unknown condition walks
// both branches from the same stack). `forks` bounds the branches walked per expression.
Known fold_from(const std::vector<Instruction>& code, size_t pc, std::vector<Known> s,
                const std::vector<Known>& known, int& forks) {
  const auto slot = [&known](int at) {
    return size_t(at) < known.size() ? known[size_t(at)] : std::nullopt;
  };
  for (; pc < code.size(); ++pc) {
    const Instruction& in = code[pc];
    switch (in.op) {
      case OpCode::constant:
        s.push_back(in.value);
        break;
      case OpCode::load:
        s.push_back(slot(in.arg));
        break;
      case OpCode::jump_if_zero: {
        const Known c = s.back();
        s.pop_back();
        if (c) {
          if (*c == 0) pc = size_t(in.arg) - 1;
          break;
        }
        if (++forks > 64) return std::nullopt;
        const Known taken = fold_from(code, size_t(in.arg), s, known, forks);
        if (!taken || std::isnan(*taken)) return std::nullopt;
        const Known fall = fold_from(code, pc + 1, std::move(s), known, forks);
        return fall && *fall == *taken ? fall : std::nullopt;
      }
      case OpCode::jump:
        pc = size_t(in.arg) - 1;
        break;
      case OpCode::min:
      case OpCode::max: {
        const size_t n = size_t(in.arg), base = s.size() - n;
        Known r;
        if (std::all_of(s.begin() + long(base), s.end(), [](const Known& k) { return bool(k); })) {
          std::array<double, Evaluator::k_max_stack> v{};
          for (size_t i = 0; i < n; ++i) v[i] = *s[base + i];
          r = in.op == OpCode::min ? expr_ops::min(v.data(), in.arg)
                                   : expr_ops::max(v.data(), in.arg);
        }
        s.resize(base);
        s.push_back(r);
        break;
      }
      case OpCode::binary_load_const:
        s.push_back(fold_binary(in.sub, slot(in.arg), in.value));
        break;
      case OpCode::binary_load_load:
        s.push_back(fold_binary(in.sub, slot(in.arg), slot(in.arg2)));
        break;
      case OpCode::binary_const_load:
        s.push_back(fold_binary(in.sub, in.value, slot(in.arg)));
        break;
      default:
        if (in.op < expression_detail::k_first_binary) {
          if (s.back()) s.back() = unary(in.op, *s.back());
        } else {
          const Known b = s.back();
          s.pop_back();
          s.back() = fold_binary(in.op, s.back(), b);
        }
    }
  }
  return s.empty() ? std::nullopt : s.front();
}

}  // namespace

std::optional<double> fold(const Expression& expr,
                           const std::vector<std::optional<double>>& known) {
  if (!expr.program) return std::nullopt;
  int forks = 0;
  std::vector<Known> stack;
  stack.reserve(8);
  return fold_from(expr.program->code, 0, std::move(stack), known, forks);
}

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
      case OpCode::binary_load_const:
        s[n++] = binary(in.sub, values[in.arg], in.value);
        break;
      case OpCode::binary_load_load:
        s[n++] = binary(in.sub, values[in.arg], values[in.arg2]);
        break;
      case OpCode::binary_const_load:
        s[n++] = binary(in.sub, in.value, values[in.arg]);
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
