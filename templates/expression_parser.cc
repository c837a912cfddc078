// The expression parser: precedence climbing over the text, emitting the postfix program of
// expression_program.h as it goes. Operators, precedences and functions follow muparser as ktune
// configured it (tests/templates/expression_diff_test.cc compares the two).
#include <algorithm>
#include <charconv>
#include <optional>

#include "templates/expression_program.h"

namespace ktune::expression_detail {
namespace {

// muparser's binary operators and precedences (muParserDef.h: prLOR 1, prLAND 2, prCMP 4,
// prADD_SUB 5, prMUL_DIV 6, prPOW 7), plus ktune's `%` at prMUL_DIV. All associate left but `^`.
// Two-character tokens come before their one-character prefixes.
struct BinaryOp {
  std::string_view token;
  int precedence;
  bool right_associative;
  OpCode op;
};
constexpr BinaryOp k_binary_ops[] = {
    {"||", 1, false, OpCode::logical_or}, {"&&", 2, false, OpCode::logical_and},
    {"<=", 4, false, OpCode::less_equal}, {">=", 4, false, OpCode::greater_equal},
    {"==", 4, false, OpCode::equal},      {"!=", 4, false, OpCode::not_equal},
    {"<", 4, false, OpCode::less},        {">", 4, false, OpCode::greater},
    {"+", 5, false, OpCode::add},         {"-", 5, false, OpCode::subtract},
    {"*", 6, false, OpCode::multiply},    {"/", 6, false, OpCode::divide},
    {"%", 6, false, OpCode::remainder},   {"^", 7, true, OpCode::power},
};
// Prefix `-`, `+` and `!` bind like muparser's infix operators (prINFIX 6): tighter than `*`,
// looser than `^`, so -A^2 is -(A^2). Their operand is parsed at this precedence.
constexpr int k_prefix_operand_precedence = 7;

constexpr int k_variadic = 1 << 20;
struct Function {
  std::string_view name;
  int min_args;
  int max_args;
  OpCode op;
};
constexpr Function k_functions[] = {
    {"floor", 1, 1, OpCode::floor},      {"ceil", 1, 1, OpCode::ceil},
    {"abs", 1, 1, OpCode::abs},          {"log2", 1, 1, OpCode::log2},
    {"is_pow2", 1, 1, OpCode::is_pow2},  {"ceil_div", 2, 2, OpCode::ceil_div},
    {"min", 1, k_variadic, OpCode::min}, {"max", 1, k_variadic, OpCode::max},
};

// The parser recurses once per level: every ternary(), binary() and unary() call (a parenthesis,
// a call argument, a `?:` branch, an operator's right operand, a prefix operand). Deeper text is
// rejected, so a hostile expression cannot overflow the stack.
constexpr int k_max_nesting = 256;

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

// Precedence climbing over the text, emitting postfix code as it goes. Every method returns
// false after recording the first error.
class Parser {
 public:
  Parser(std::string_view text, const SymbolTable& symbols) : m_text(text), m_symbols(symbols) {}

  Result<Expression> parse() {
    skip_space();
    if (at_end()) return fail(ErrorCode::invalid_argument, "empty expression");
    if (ternary()) {
      skip_space();
      if (!at_end()) unexpected();
    }
    if (m_error) return std::unexpected(*m_error);
    auto program = std::make_shared<ExpressionProgram>();
    program->code = std::move(m_code);
    std::sort(m_used.begin(), m_used.end());
    m_used.erase(std::unique(m_used.begin(), m_used.end()), m_used.end());
    program->max_slot = m_used.empty() ? -1 : m_used.back();
    return Expression{std::string(m_text), std::move(m_used), std::move(program)};
  }

 private:
  // One level of recursion for as long as it lives (see k_max_nesting).
  class Level {
   public:
    explicit Level(int& nesting) : m_nesting(++nesting) {}
    ~Level() { --m_nesting; }
    Level(const Level&) = delete;
    Level& operator=(const Level&) = delete;
    bool too_deep() const { return m_nesting > k_max_nesting; }

   private:
    int& m_nesting;
  };

  bool nested_too_deeply() { return syntax_error(m_pos, "nested too deeply"); }

  // cond ? a : b, right-associative, below every binary operator (muparser's prIF_THEN_ELSE).
  bool ternary() {
    const Level level(m_nesting);
    if (level.too_deep()) return nested_too_deeply();
    if (!binary(1)) return false;
    skip_space();
    if (peek() != '?') return true;
    ++m_pos;
    const size_t jump_if_zero = emit({OpCode::jump_if_zero}, -1);
    if (!ternary()) return false;
    skip_space();
    if (peek() != ':') return syntax_error(m_pos, "'?' without its ':'");
    ++m_pos;
    const size_t jump = emit({OpCode::jump}, 0);
    m_code[jump_if_zero].arg = int(m_code.size());
    --m_depth;  // the then-branch's value is not on the stack when the else-branch runs
    if (!ternary()) return false;
    m_code[jump].arg = int(m_code.size());
    return true;
  }

  bool binary(int min_precedence) {
    const Level level(m_nesting);
    if (level.too_deep()) return nested_too_deeply();
    if (!unary()) return false;
    for (;;) {
      skip_space();
      const BinaryOp* op = match_binary();
      if (!op || op->precedence < min_precedence) return true;
      m_pos += op->token.size();
      if (!binary(op->right_associative ? op->precedence : op->precedence + 1)) return false;
      emit_binary(op->op);
      if (m_error) return false;  // too many operands: stop at the first error
    }
  }

  // A binary operator whose two operands are plain loads or constants becomes one instruction
  // (three dispatches become one), unless a jump lands on the second operand or after it: a jump
  // target stays an instruction boundary. Targets are patched to the code's size at the time, so
  // only those patched already can point into the fused pair.
  void emit_binary(OpCode op) {
    const size_t n = m_code.size();
    const auto is_target = [&](size_t at) {
      return std::any_of(m_code.begin(), m_code.end(), [&](const Instruction& in) {
        return (in.op == OpCode::jump || in.op == OpCode::jump_if_zero) && in.arg == int(at);
      });
    };
    if (n >= 2 && !is_target(n - 1) && !is_target(n)) {
      Instruction& a = m_code[n - 2];
      const Instruction& b = m_code[n - 1];
      std::optional<Instruction> fused;
      if (a.op == OpCode::load && b.op == OpCode::constant)
        fused =
            Instruction{.op = OpCode::binary_load_const, .arg = a.arg, .value = b.value, .sub = op};
      else if (a.op == OpCode::load && b.op == OpCode::load)
        fused = Instruction{.op = OpCode::binary_load_load, .arg = a.arg, .sub = op, .arg2 = b.arg};
      else if (a.op == OpCode::constant && b.op == OpCode::load)
        fused =
            Instruction{.op = OpCode::binary_const_load, .arg = b.arg, .value = a.value, .sub = op};
      if (fused) {
        a = *fused;
        m_code.pop_back();
        --m_depth;  // two operands pushed, one result: as emit({op}, -1) leaves it
        return;
      }
    }
    emit({op}, -1);
  }

  // muparser refuses two prefix operators in a row ("--1", "!-1"), and so does this.
  bool unary() {
    const Level level(m_nesting);
    if (level.too_deep()) return nested_too_deeply();
    skip_space();
    const char c = peek();
    if (c != '-' && c != '+' && c != '!') return primary();
    ++m_pos;
    skip_space();
    if (peek() == '-' || peek() == '+' || peek() == '!') return unexpected();
    if (!binary(k_prefix_operand_precedence)) return false;
    if (c == '-') emit({OpCode::negate}, 0);
    if (c == '!') emit({OpCode::logical_not}, 0);
    return true;
  }

  bool primary() {
    skip_space();
    if (at_end()) return syntax_error(m_pos, "unexpected end of expression");
    const char c = peek();
    if (is_digit(c) || c == '.') return number();
    if (is_name_start(c)) return name();
    if (c != '(') return unexpected();
    ++m_pos;
    if (!ternary()) return false;
    skip_space();
    if (peek() != ')') return at_end() ? syntax_error(m_pos, "missing ')'") : unexpected();
    ++m_pos;
    return true;
  }

  // digits [. digits] [e [+-] digits], as muparser's stream-based reader accepts them.
  bool number() {
    const size_t start = m_pos;
    size_t digits = 0;
    while (is_digit(peek())) ++m_pos, ++digits;
    if (peek() == '.') {
      ++m_pos;
      while (is_digit(peek())) ++m_pos, ++digits;
    }
    if (digits == 0) return syntax_error(start, "unexpected '.'");
    if (peek() == 'e' || peek() == 'E') {
      ++m_pos;
      if (peek() == '+' || peek() == '-') ++m_pos;
      if (!is_digit(peek())) return syntax_error(start, "malformed number");
      while (is_digit(peek())) ++m_pos;
    }
    double value = 0;
    const auto [end, ec] = std::from_chars(m_text.data() + start, m_text.data() + m_pos, value);
    if (ec != std::errc() || end != m_text.data() + m_pos)
      return syntax_error(start, "number out of range");
    emit({OpCode::constant, 0, value}, 1);
    return true;
  }

  // A variable, or a function when '(' follows the name at once (muparser's rule).
  bool name() {
    const size_t start = m_pos;
    while (is_name_char(peek())) ++m_pos;
    const std::string_view id = m_text.substr(start, m_pos - start);
    if (peek() == '(') return call(id, start);
    const int slot = m_symbols.find(id);
    if (slot < 0) {
      m_error = Error{ErrorCode::invalid_argument, "unknown variable '" + std::string(id) +
                                                       "' in '" + std::string(m_text) + "'"};
      return false;
    }
    m_used.push_back(slot);
    emit({OpCode::load, slot}, 1);
    return true;
  }

  bool call(std::string_view id, size_t start) {
    const auto* fn = std::find_if(std::begin(k_functions), std::end(k_functions),
                                  [&](const Function& f) { return f.name == id; });
    if (fn == std::end(k_functions))
      return syntax_error(start, "unknown function '" + std::string(id) + "'");
    ++m_pos;  // '('
    int args = 0;
    skip_space();
    if (peek() == ')') {
      ++m_pos;
    } else {
      for (;;) {
        if (!ternary()) return false;
        ++args;
        skip_space();
        if (peek() == ')') break;
        if (peek() != ',') return at_end() ? syntax_error(m_pos, "missing ')'") : unexpected();
        ++m_pos;
      }
      ++m_pos;
    }
    if (args < fn->min_args || args > fn->max_args)
      return syntax_error(
          start, std::string(id) + "() takes " +
                     (fn->max_args == k_variadic ? "at least " + std::to_string(fn->min_args)
                                                 : std::to_string(fn->min_args)) +
                     " argument(s), got " + std::to_string(args));
    emit({fn->op, args}, 1 - args);
    return true;
  }

  const BinaryOp* match_binary() const {
    for (const auto& op : k_binary_ops)
      if (m_text.substr(m_pos, op.token.size()) == op.token) return &op;
    return nullptr;
  }

  // Appends an instruction that changes the stack depth by `effect`; returns its index.
  size_t emit(Instruction in, int effect) {
    m_depth += effect;
    if (m_depth > Evaluator::k_max_stack && !m_error)
      syntax_error(
          m_pos, "needs more than " + std::to_string(Evaluator::k_max_stack) + " operands at once");
    m_code.push_back(in);
    return m_code.size() - 1;
  }

  bool unexpected() {
    if (at_end()) return syntax_error(m_pos, "unexpected end of expression");
    return syntax_error(m_pos, "unexpected '" + std::string(1, peek()) + "'");
  }

  bool syntax_error(size_t pos, const std::string& what) {
    if (!m_error)
      m_error = Error{ErrorCode::invalid_argument, "bad expression '" + std::string(m_text) +
                                                       "': " + what + " at position " +
                                                       std::to_string(pos)};
    return false;
  }

  void skip_space() {
    while (m_pos < m_text.size() && (m_text[m_pos] == ' ' || m_text[m_pos] == '\t' ||
                                     m_text[m_pos] == '\n' || m_text[m_pos] == '\r'))
      ++m_pos;
  }
  bool at_end() const { return m_pos >= m_text.size(); }
  char peek() const { return at_end() ? '\0' : m_text[m_pos]; }

  std::string_view m_text;
  const SymbolTable& m_symbols;
  size_t m_pos = 0;
  int m_depth = 0;    // operands on the stack at this point of the program
  int m_nesting = 0;  // levels of recursion (see k_max_nesting)
  std::vector<Instruction> m_code;
  std::vector<int> m_used;
  std::optional<Error> m_error;
};

}  // namespace

Result<Expression> parse_expression(std::string_view text, const SymbolTable& symbols) {
  return Parser(text, symbols).parse();
}

}  // namespace ktune::expression_detail
