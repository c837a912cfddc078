// The compiled form of an Expression (internal to templates/expression*.cc): postfix code over
// the slots of a value array and an operand stack of at most Evaluator::k_max_stack entries.
// Built once by the parser (expression_parser.cc), then immutable and shared by every copy of
// its Expression; Evaluator::eval (expression.cc) runs it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "templates/expression.h"

namespace ktune {
namespace expression_detail {

// Grouped so the evaluator can tell unary from binary operators by range.
enum class OpCode : std::uint8_t {
  // Stack and control.
  constant,
  load,
  jump_if_zero,  // pops the condition
  jump,
  min,  // variadic: `arg` operands
  max,
  // A binary operator (`sub`) over two plain operands, fused by the parser (the most common shape
  // of a manifest expression: `STAGES <= 4`, `M * N`, `2 * K`): push sub(slot arg, value),
  // sub(slot arg, slot arg2), sub(value, slot arg).
  binary_load_const,
  binary_load_load,
  binary_const_load,
  // Unary: replace the top of the stack.
  negate,
  logical_not,
  floor,
  ceil,
  abs,
  log2,
  is_pow2,
  // Binary: pop two, push one.
  add,
  subtract,
  multiply,
  divide,
  remainder,
  power,
  less,
  less_equal,
  greater,
  greater_equal,
  equal,
  not_equal,
  logical_and,
  logical_or,
  ceil_div,
};
constexpr OpCode k_first_binary = OpCode::add;

struct Instruction {
  OpCode op = OpCode::constant;
  int arg = 0;  // load, binary_*: the slot; jumps: the target index; min/max: the argument count
  double value = 0;               // constant, binary_load_const, binary_const_load: the value
  OpCode sub = OpCode::constant;  // binary_*: the binary operator
  int arg2 = 0;                   // binary_load_load: the second operand's slot
};

// Parses `text` into an Expression with its program (compile_expression's work).
Result<Expression> parse_expression(std::string_view text, const SymbolTable& symbols);

}  // namespace expression_detail

struct ExpressionProgram {
  std::vector<expression_detail::Instruction> code;
  int max_slot = -1;  // the highest slot a load reads
};

}  // namespace ktune
