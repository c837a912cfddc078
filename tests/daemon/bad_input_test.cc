// Bad input through the dispatcher: numbers out of range, invalid UTF-8, deep nesting, odd ids.
// Each gets one error reply that is valid JSON (echoing the id when it could be read), and the
// next request is answered as usual.
#include <gtest/gtest.h>

#include "daemon/dispatcher.h"
#include "templates/space.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using protocol::Json;

class BadInputTest : public ::testing::Test {
 protected:
  BadInputTest() : m_templates(TemplateRegistry::load({builtin_template_dir()})) {
    NodeIdentity node;
    node.driver = "none";
    node.nvrtc = "13.0";
    node.node_id = "test-node";
    node.gpu_error = "no GPU in tests";
    m_parts = std::make_unique<testing::DaemonParts>(default_config(), m_templates, node);
  }

  // Every reply line of `line`, each checked to be one JSON object with the protocol's fields.
  std::vector<Json> replies(const std::string& line) {
    const std::string out = m_parts->dispatcher.handle(line).line;
    std::vector<Json> parsed;
    size_t start = 0;
    for (size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1) {
      Json j;
      EXPECT_NO_THROW(j = Json::parse(out.substr(start, nl - start)))
          << "reply is not valid JSON: " << out.substr(start, nl - start);
      EXPECT_TRUE(j.is_object() && j.contains("id") && j.contains("ok")) << j.dump();
      parsed.push_back(std::move(j));
    }
    EXPECT_EQ(start, out.size()) << "the reply ends with a newline";
    return parsed;
  }
  Json reply(const std::string& line) {
    auto all = replies(line);
    EXPECT_EQ(all.size(), 1u) << line;
    return all.empty() ? Json() : all.front();
  }
  void expect_still_serving() {
    Json j = reply(R"({"v":1,"id":"next","op":"status"})");
    EXPECT_TRUE(j.value("ok", false)) << j.dump();
  }

  TemplateRegistry m_templates;
  std::unique_ptr<testing::DaemonParts> m_parts;
};

const std::string k_lookup_rest =
    R"(,"op":"lookup","device":"nvidia-h200.sm90.132sm.140gib","problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":512,"N":512,"K":512}}})";

TEST_F(BadInputTest, NumberBeyondADoubleIsABadRequestWithTheId) {
  const std::vector<std::pair<std::string, Json>> cases = {
      {R"({"v":1,"id":5,"op":"status","x":1e400})", 5},
      {R"({"v":1,"id":"q","op":"lookup","limit":-1e400})", "q"},
      {R"({"v":1,"op":"status","id":[1,2],"pad":[1e999]})", Json::array({1, 2})},
      {R"({"v":1,"id":1e400,"op":"status"})", nullptr},
      {R"(1e400)", nullptr},
  };
  for (const auto& [line, id] : cases) {
    Json j = reply(line);
    EXPECT_FALSE(j.value("ok", true)) << line;
    EXPECT_EQ(j["error"]["code"], "bad_request") << line;
    EXPECT_NE(j["error"]["message"].get<std::string>().find("out of range"), std::string::npos)
        << j.dump();
    EXPECT_EQ(j["id"], id) << line;
    expect_still_serving();
  }
}

TEST_F(BadInputTest, InvalidUtf8IsAParseErrorAndTheReplyIsValidJson) {
  const std::vector<std::pair<std::string, Json>> cases = {
      {"{\"v\":1,\"id\":9,\"op\":\"status\",\"x\":\"\xff\xfe\"}", 9},
      {"{\"v\":1,\"id\":9,\"op\":\"\xc3\x28\"}", 9},             // bad continuation byte
      {"{\"v\":1,\"id\":\"\xed\xa0\x80\",\"op\":\"status\"}", nullptr},  // a UTF-16 surrogate
      {"\xff\xff\xff", nullptr},
      {"{\"v\":1,\"id\":3,\"op\":\"status\"}\xff", 3},
      {"{\"v\":1,\"id\":4,\"op\":\"status\",\"x\":\"\\ud800\"}", 4},  // a lone surrogate escape
  };
  for (const auto& [line, id] : cases) {
    Json j = reply(line);
    EXPECT_FALSE(j.value("ok", true));
    EXPECT_EQ(j["error"]["code"], "parse_error") << j.dump();
    EXPECT_EQ(j["id"], id) << j.dump();
    expect_still_serving();
  }
}

TEST_F(BadInputTest, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep = R"({"v":1,"id":8,"op":"status","x":)" + std::string(100'000, '[') +
                           std::string(100'000, ']') + "}";
  Json j = reply(deep);
  EXPECT_EQ(j["error"]["code"], "bad_request") << j.dump();
  EXPECT_EQ(j["id"], 8);
  // An id nested deeper than the limit is not echoed (it would cost recursion to copy).
  j = reply(R"({"v":1,"op":"status","id":)" + std::string(1000, '[') + std::string(1000, ']') +
            "}");
  EXPECT_EQ(j["error"]["code"], "bad_request") << j.dump();
  expect_still_serving();
  // 64 levels are fine.
  j = reply(R"({"v":1,"id":1,"op":"status","x":)" + std::string(62, '[') + std::string(62, ']') +
            "}");
  EXPECT_TRUE(j.value("ok", false)) << j.dump();
}

// "v" is compared as the 64-bit number sent, not truncated to an int (4294967297 is not 1).
TEST_F(BadInputTest, VersionIsNotTruncated) {
  for (const char* v : {"4294967297", "18446744073709551617", "-4294967295", "1.0"}) {
    Json j = reply(std::string(R"({"v":)") + v + R"(,"id":1,"op":"status"})");
    EXPECT_FALSE(j.value("ok", true)) << v;
    EXPECT_NE(j["error"]["code"], "internal") << v;
  }
  Json j = reply(R"({"v":4294967297,"id":1,"op":"status"})");
  EXPECT_EQ(j["error"]["code"], "unsupported_version");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("4294967297"), std::string::npos);
}

// A plan whose "device" is not a string was answered "internal" (yaml-cpp's bad conversion
// escaped the handler). Found by fuzz_request's check that bad input is never "internal".
TEST_F(BadInputTest, PlanDeviceThatIsNotAStringIsABadRequest) {
  for (const char* device : {"{a: 1}", "[x, y]"}) {
    Json req = {{"v", 1},
                {"id", 1},
                {"op", "plan"},
                {"plan", std::string("device: ") + device +
                             "\nproblems: [{op: gemm, dtype: bf16, dims: {M: 8, N: 8, K: 8}}]"}};
    Json j = reply(req.dump());
    EXPECT_EQ(j["error"]["code"], "bad_request") << j.dump();
  }
  expect_still_serving();
}

// The fast path echoes the id text as written: every reply line must still be JSON whatever the
// id looks like, and equal to the id sent when the line is JSON at all.
TEST_F(BadInputTest, EveryReplyIsValidJsonWhateverTheId) {
  const std::string warm = R"({"v":1,"id":7)" + k_lookup_rest;
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(reply(warm).value("ok", false));
  ASSERT_TRUE(m_parts->dispatcher.try_fast(warm, Peer{})) << "the line is in the text cache";
  const std::vector<std::string> ids = {
      "1-2-3",   "007",          "-0",       "-7",          "1.5",         "1e3",
      "1e400",   "\"\xff\"",     "\"\t\"",   "\"\x01\"",    "\"\xc3\xa9\"", "\"a\\\"b\"",
      "\"\\u0000\"", "\"\\ud800\"", "{\"a\":1}", "[1,[2]]",  "true",        "null",
      "\"\"",    "0",            "00",       "\"7\"",       "18446744073709551616",
      "\"unterminated", "",      "\"a\"\"b\"",
  };
  for (const auto& id : ids) {
    const std::string line = R"({"v":1,"id":)" + id + k_lookup_rest;
    Json sent;
    const bool valid = Json::accept(line);
    if (valid) sent = Json::parse(line)["id"];
    for (int i = 0; i < 2; ++i) {  // the second time the text cache may answer
      Json j = reply(line);
      if (valid) {
        EXPECT_TRUE(j.value("ok", false)) << line << " -> " << j.dump();
        EXPECT_EQ(j["id"], sent) << line;
      } else {
        EXPECT_FALSE(j.value("ok", true)) << line << " -> " << j.dump();
      }
    }
    if (auto fast = m_parts->dispatcher.try_fast(line, Peer{})) {
      EXPECT_TRUE(Json::accept(*fast)) << "fast reply is not JSON for id " << id << ": " << *fast;
      EXPECT_TRUE(valid) << "the fast path answered a line that is not JSON: " << line;
    }
  }
}

}  // namespace
}  // namespace ktune
