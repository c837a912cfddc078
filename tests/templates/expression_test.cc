#include "templates/expression.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ktune {
namespace {

class ExpressionTest : public ::testing::Test {
 protected:
  ExpressionTest() {
    m_a = m_symbols.add("A");
    m_b = m_symbols.add("B");
  }
  double eval(const std::string& text, double a, double b) {
    auto e = compile_expression(text, m_symbols);
    EXPECT_TRUE(e) << e.error().message;
    Evaluator ev(m_symbols);
    ev.set(m_a, a);
    ev.set(m_b, b);
    auto v = ev.eval(*e);
    EXPECT_TRUE(v) << v.error().message;
    return v.value_or(-12345);
  }
  SymbolTable m_symbols;
  int m_a, m_b;
};

TEST_F(ExpressionTest, Arithmetic) {
  EXPECT_EQ(eval("A * B + 1", 3, 4), 13);
  EXPECT_EQ(eval("A % B", 10, 4), 2);
  EXPECT_EQ(eval("A % 8 == 0 && B > 1", 64, 2), 1);
  EXPECT_EQ(eval("ceil_div(A, B)", 10, 4), 3);
  EXPECT_EQ(eval("floor(A / B) + ceil(A / B)", 10, 4), 5);
  EXPECT_EQ(eval("A > B ? A : B", 3, 9), 9);
  EXPECT_EQ(eval("min(A, B, 2)", 3, 9), 2);
  EXPECT_EQ(eval("is_pow2(A) + is_pow2(B)", 64, 12), 1);
  EXPECT_EQ(eval("!(A == 1)", 1, 0), 0);
  EXPECT_EQ(eval("log2(A)", 1024, 0), 10);
}

// `%` and is_pow2 on operands that do not truncate to a 64-bit integer: NaN, not undefined
// behaviour (NaN % -1 was LLONG_MIN % -1: SIGFPE).
TEST_F(ExpressionTest, RemainderAndIsPow2OutsideTheIntegers) {
  EXPECT_TRUE(std::isnan(eval("(A / 0) % -1", 64, 0)));
  EXPECT_TRUE(std::isnan(eval("(0 / 0) % -1", 0, 0)));
  EXPECT_TRUE(std::isnan(eval("A % (1 / 0)", 7, 0)));
  EXPECT_TRUE(std::isnan(eval("A % B", 1e19, 3)));
  EXPECT_TRUE(std::isnan(eval("A % B", -1e19, 3)));
  EXPECT_TRUE(std::isnan(eval("A % B", 7, 1e19)));
  EXPECT_EQ(eval("A % B", -9223372036854775808.0, -1), 0);
  EXPECT_EQ(eval("A % -1", 7, 0), 0);
  EXPECT_EQ(eval("A % B", -9223372036854775808.0, 3), -2);
  EXPECT_TRUE(std::isnan(eval("is_pow2(A / B)", 1, 0)));
  EXPECT_TRUE(std::isnan(eval("is_pow2(A / B)", 0, 0)));
  EXPECT_EQ(eval("is_pow2(2 ^ 70)", 0, 0), 1);
  EXPECT_EQ(eval("is_pow2(A)", 1e20, 0), 0);
  EXPECT_EQ(eval("is_pow2(A)", -9223372036854775808.0, 0), 0);
  EXPECT_EQ(eval("is_pow2(A) + is_pow2(B)", 0.5, 1), 1);
  EXPECT_EQ(eval("is_pow2(A) + is_pow2(B)", 6, 3.5), 0);
}

TEST_F(ExpressionTest, UnknownVariableIsNamed) {
  auto e = compile_expression("A * BLOK_M", m_symbols);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message, "unknown variable 'BLOK_M' in 'A * BLOK_M'");
}

TEST_F(ExpressionTest, SyntaxErrorHasPosition) {
  auto e = compile_expression("A * (B + ", m_symbols);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("bad expression 'A * (B + '"), std::string::npos)
      << e.error().message;
  EXPECT_FALSE(compile_expression("", m_symbols));
}

// Syntax errors name what is wrong and where (0-based, as muparser did).
TEST_F(ExpressionTest, SyntaxErrorsNameTheProblemAndPosition) {
  const std::pair<const char*, const char*> cases[] = {
      {"A * (B + ", "unexpected end of expression at position 9"},
      {"A * (B + 1", "missing ')' at position 10"},
      {"A B", "unexpected 'B' at position 2"},
      {"A > 1 ? 2", "'?' without its ':' at position 9"},
      {"--A", "unexpected '-' at position 1"},
      {"sin(A)", "unknown function 'sin' at position 0"},
      {"A + ceil_div(A)", "ceil_div() takes 2 argument(s), got 1 at position 4"},
      {"max()", "max() takes at least 1 argument(s), got 0 at position 0"},
      {"1, 2", "unexpected ',' at position 1"},
      {"2 * 1e", "malformed number at position 4"},
  };
  for (const auto& [text, what] : cases) {
    auto e = compile_expression(text, m_symbols);
    ASSERT_FALSE(e) << text;
    EXPECT_EQ(e.error().message, "bad expression '" + std::string(text) + "': " + what);
  }
}

TEST_F(ExpressionTest, UnknownVariableInsideACallIsNamed) {
  auto e = compile_expression("ceil_div(M, BLOCK_M)", m_symbols);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message, "unknown variable 'M' in 'ceil_div(M, BLOCK_M)'");
}

TEST_F(ExpressionTest, DeepNestingIsRejectedNotOverflowed) {
  EXPECT_TRUE(compile_expression(std::string(60, '(') + "A" + std::string(60, ')'), m_symbols));
  EXPECT_FALSE(compile_expression(std::string(100, '(') + "A" + std::string(100, ')'), m_symbols));
  // 65 operands pending at once (right-associative ^) overflow the evaluator's fixed stack.
  std::string deep = "A";
  for (int i = 0; i < 64; ++i) deep += " ^ A";
  auto e = compile_expression(deep, m_symbols);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("needs more than 64 operands"), std::string::npos);
}

// Every path the parser recurses on is bounded (a 300,000-deep `?:` chain overflowed the stack),
// and the first error ends the parse (a long `^` chain went on recursing past its error).
TEST_F(ExpressionTest, DeepChainsAreRejectedNotOverflowed) {
  auto chain = [](const std::string& link, int n, const std::string& last) {
    std::string text;
    for (int i = 0; i < n; ++i) text += link;
    return text + last;
  };
  EXPECT_EQ(eval(chain("A == 1 ? 10 : ", 200, "B"), 2, 7), 7);
  for (const std::string& text :
       {chain("A ? 1 : ", 300000, "1"), chain("A ? ", 300000, "1") + chain(" : 1", 300000, ""),
        chain("-(", 300000, "A") + std::string(300000, ')'), chain("!(", 300, "A") + ")"}) {
    auto e = compile_expression(text, m_symbols);
    ASSERT_FALSE(e);
    EXPECT_NE(e.error().message.find("nested too deeply"), std::string::npos)
        << e.error().message.substr(e.error().message.size() - 60);
  }
  for (const std::string& text : {chain("A ^ ", 300000, "A"), chain("-A ^ ", 300000, "A")}) {
    auto e = compile_expression(text, m_symbols);
    ASSERT_FALSE(e);
    EXPECT_NE(e.error().message.find("needs more than 64 operands"), std::string::npos)
        << e.error().message.substr(e.error().message.size() - 60);
  }
}

TEST_F(ExpressionTest, TernaryOnlyEvaluatesItsBranchAndNests) {
  EXPECT_EQ(eval("A ? B : 1 / 0", 1, 7), 7);
  EXPECT_EQ(eval("A == 1 ? 10 : A == 2 ? 20 : 30", 2, 0), 20);
  EXPECT_EQ(eval("A == 1 ? 10 : A == 2 ? 20 : 30", 3, 0), 30);
  EXPECT_EQ(eval("max(A > B ? A : B, 2) + 1", 1, 5), 6);
}

TEST_F(ExpressionTest, ACopyOutlivesItsOriginalAndAnUncompiledOneFails) {
  auto e = compile_expression("A + B", m_symbols);
  ASSERT_TRUE(e);
  const Expression copy = *e;
  e = compile_expression("A * B", m_symbols);  // the original's program is released here
  ASSERT_TRUE(e);
  Evaluator ev(m_symbols);
  ev.set(m_a, 3);
  ev.set(m_b, 4);
  EXPECT_EQ(ev.eval(copy).value_or(-1), 7);
  EXPECT_EQ(ev.eval(*e).value_or(-1), 12);
  EXPECT_FALSE(ev.eval(Expression{}));
  SymbolTable smaller;
  smaller.add("A");
  Evaluator too_small(smaller);
  EXPECT_FALSE(too_small.eval(*e));
}

TEST_F(ExpressionTest, UsedSlotsAreRecorded) {
  auto e = compile_expression("B * 2", m_symbols);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->used_slots, std::vector<int>{m_b});
  auto both = compile_expression("B * A + min(B, A)", m_symbols);
  ASSERT_TRUE(both);
  EXPECT_EQ(both->used_slots, (std::vector<int>{m_a, m_b}));
}

TEST_F(ExpressionTest, ModuloByZeroIsNaN) {
  auto e = compile_expression("A % B", m_symbols);
  Evaluator ev(m_symbols);
  ev.set(m_a, 3);
  ev.set(m_b, 0);
  EXPECT_TRUE(std::isnan(*ev.eval(*e)));
}

// fold(): with A known, the value it gives is what evaluation gives for every B (special values
// included), and it gives one where A alone decides: short-circuit-free && and ||, ?: on a known
// condition or with agreeing branches, min/max and arithmetic over known operands.
TEST_F(ExpressionTest, FoldGivesAValueOnlyWhereTheKnownSlotsDecideIt) {
  const std::vector<double> bs = {0.0, -0.0, 1.0, -3.5, 7.0, 1e300, INFINITY, -INFINITY, NAN};
  struct Case {
    const char* text;
    double a;
    bool decided;
  };
  const std::vector<Case> cases = {
      {"A == 0 || B > 3", 0, true},
      {"A == 0 || B > 3", 1, false},
      {"A > 0 && B > 3", 0, true},
      {"A > 0 && B > 3", 2, false},
      {"A ? B : 2", 0, true},
      {"A ? B : 2", 1, false},
      {"B > 1 ? A + 1 : A + 1", 4, true},
      {"B > 1 ? A : A + 1", 4, false},
      {"max(A, 2) * 3", 1, true},
      {"max(A, B)", 1, false},
      {"ceil_div(A, 4) + (A % 3)", 10, true},
      {"A * B", 0, false},
      {"!(A == 1) || B", 2, true},
      {"(A == 1 || B) && (A == 2)", 1, true},
  };
  for (const auto& c : cases) {
    auto e = compile_expression(c.text, m_symbols);
    ASSERT_TRUE(e) << c.text;
    std::vector<std::optional<double>> known(m_symbols.size());
    known[size_t(m_a)] = c.a;
    const auto folded = fold(*e, known);
    EXPECT_EQ(bool(folded), c.decided) << c.text << " with A = " << c.a;
    if (!folded) continue;
    for (double b : bs) {
      const double v = eval(c.text, c.a, b);
      if (std::isnan(*folded))
        EXPECT_TRUE(std::isnan(v)) << c.text;
      else
        EXPECT_EQ(v, *folded) << c.text << " with B = " << b;
    }
  }
  EXPECT_FALSE(fold(Expression{}, {}));  // never compiled
}

}  // namespace
}  // namespace ktune
