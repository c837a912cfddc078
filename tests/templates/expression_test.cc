#include "templates/expression.h"

#include <gtest/gtest.h>

#include <cmath>

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

TEST_F(ExpressionTest, UsedSlotsAreRecorded) {
  auto e = compile_expression("B * 2", m_symbols);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->used_slots, std::vector<int>{m_b});
}

TEST_F(ExpressionTest, ModuloByZeroIsNaN) {
  auto e = compile_expression("A % B", m_symbols);
  Evaluator ev(m_symbols);
  ev.set(m_a, 3);
  ev.set(m_b, 0);
  EXPECT_TRUE(std::isnan(*ev.eval(*e)));
}

}  // namespace
}  // namespace ktune
