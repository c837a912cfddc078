// Plain lookup lines (daemon/plain_line.h): what the reader without a JSON parser accepts, it
// reads as the general parser does; everything else it leaves to the general parser; and the
// daemon's reply to a plain line is the reply to the same request written any other way.
#include "daemon/plain_line.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using protocol::Json;

// The general parser's reading of a line, as the dispatcher and op_lookup make it.
struct General {
  int v = 0;
  Json id;
  std::string op;
  protocol::LookupRequest request;
};
std::optional<General> general(std::string_view line) {
  auto r = protocol::parse_request(line);
  if (!r) return std::nullopt;
  auto l = protocol::lookup_from_json(r->body);
  if (!l) return std::nullopt;
  return General{r->v, r->id, r->op, std::move(*l)};
}

// REQUIRES: plain accepted `line`. The general parser must accept it too, with the same meaning.
void expect_same_reading(const std::string& line, const PlainLookup& plain) {
  const auto g = general(line);
  ASSERT_TRUE(g) << "plain accepted what the general parser refuses: " << line;
  EXPECT_EQ(plain.version, g->v) << line;
  EXPECT_EQ(plain.id, g->id) << line;
  EXPECT_EQ(plain.id.type(), g->id.type()) << line;
  EXPECT_EQ(g->op, "lookup") << line;
  EXPECT_EQ(plain.request.problem.op, g->request.problem.op) << line;
  EXPECT_EQ(plain.request.problem.dtype, g->request.problem.dtype) << line;
  EXPECT_EQ(plain.request.problem.out_dtype, g->request.problem.out_dtype) << line;
  EXPECT_EQ(plain.request.problem.layout, g->request.problem.layout) << line;
  EXPECT_EQ(plain.request.problem.dims, g->request.problem.dims) << line;
  EXPECT_EQ(plain.request.device, g->request.device) << line;
  EXPECT_EQ(plain.request.limit, g->request.limit) << line;
  EXPECT_EQ(plain.request.pin, g->request.pin) << line;
}

const std::string k_problem =
    R"("problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":4096,"N":512,"K":0}})";

TEST(PlainLineTest, ReadsWhatClientsSendAsTheGeneralParserDoes) {
  const std::vector<std::string> lines = {
      R"({"v":1,"id":1,"op":"lookup",)" + k_problem + "}",
      R"({"v":2,"id":"req-7","op":"lookup","device":"nvidia-h200",)" + k_problem + "}",
      R"({"v":1,"id":0,"op":"lookup",)" + k_problem + R"(,"limit":64,"pin":"p1","device":""})",
      R"({"v":2,"id":9999999999999999999,"op":"lookup","limit":1,)" + k_problem + "}",
      R"({"v":1,"id":"","op":"lookup","problem":{"dims":{"rows":1,"cols":999999999999999999},)"
      R"("out_dtype":"fp32","dtype":"fp16","op":"softmax"}})",
      R"({"v":1,"id":3,"op":"lookup","problem":{"op":"gemm","dtype":"bf16","dims":{"":5}}})",
      R"({"v":1,"id":"a b~!#$%&'()*+,-./:;<=>?@[]^_`{|}","op":"lookup",)" + k_problem + "}",
  };
  for (const auto& line : lines) {
    const auto plain = parse_plain_lookup(line);
    ASSERT_TRUE(plain) << line;
    expect_same_reading(line, *plain);
  }
  const auto p = parse_plain_lookup(lines[2]);
  EXPECT_EQ(p->request.limit, 64);
  EXPECT_EQ(p->request.pin, "p1");
  EXPECT_EQ(p->request.problem.dims,
            (std::vector<std::pair<std::string, std::int64_t>>{{"M", 4096}, {"N", 512}, {"K", 0}}))
      << "in the order written";
}

// Each of these is JSON the general parser reads (or refuses with its own error); none is plain.
TEST(PlainLineTest, LeavesEverythingElseToTheGeneralParser) {
  const std::string head = R"({"v":1,"id":1,"op":"lookup",)";
  const std::vector<std::string> lines = {
      head + k_problem + " }",                                        // whitespace
      R"({"v":1,"id":1,"op":"lookup", )" + k_problem + "}",           // whitespace
      head + k_problem + "}\r",                                       // trailing byte
      head + k_problem + "}}",                                        // trailing byte
      head + k_problem,                                               // unterminated
      head + k_problem + R"(,"extra":1})",                            // unknown member
      head + k_problem + R"(,"attach":1})",                           // unknown member
      head + k_problem + "," + k_problem + "}",                       // repeated member
      head + k_problem + R"(,"limit":2,"limit":3})",                  // repeated member
      head + k_problem + R"(,"limit":0})",                            // out of range: its error
      head + k_problem + R"(,"limit":65})",                           // out of range: its error
      head + k_problem + R"(,"limit":07})",                           // not JSON
      head + k_problem + R"(,"limit":2.0})",                          // a float
      head + k_problem + R"(,"limit":null})",                         // null
      head + k_problem + R"(,"device":null})",                        // null
      head + k_problem + R"(,"device":"h\u0032"})",                   // an escape
      head + k_problem + R"(,"device":"h\\200"})",                    // an escape
      head + k_problem + R"(,"device":"h\u00e9"})",                   // an escape
      head + k_problem + ",\"device\":\"h\xc3\xa9\"}",                // non-ASCII
      head + k_problem + R"(,"device":5})",                           // not a string
      head + R"("problem":{"op":"gemm","dtype":"bf16","dims":{}}})",  // no dims
      head + R"("problem":{"op":"gemm","dims":{"M":1}}})",            // no dtype
      head + R"("problem":{"dtype":"bf16","dims":{"M":1}}})",         // no op
      head + R"("device":"h200"})",                                   // no problem
      head + R"("problem":{"op":"gemm","dtype":"bf16","dims":{"M":1,"M":2}}})",        // repeated
      head + R"("problem":{"op":"gemm","op":"gemm","dtype":"bf16","dims":{"M":1}}})",  // repeated
      head + R"("problem":{"op":"gemm","dtype":"bf16","dims":{"M":-1}}})",             // negative
      head + R"("problem":{"op":"gemm","dtype":"bf16","dims":{"M":1e3}}})",            // a float
      head + R"("problem":{"op":"gemm","dtype":"bf16","dims":{"M":1.5}}})",            // a float
      head + R"("problem":{"op":"gemm","dtype":"bf16","dims":{"M":1000000000000000000}}})",
      head + R"("problem":{"op":"gemm","dtype":"bf16","dims":{"M":"1"}}})",      // a string
      head + R"("problem":{"op":"gemm","dtype":"bf16","dims":{"M":1},"x":1}})",  // unknown
      head + R"("problem":[1]})",                                                // not an object
      R"({"v":3,"id":1,"op":"lookup",)" + k_problem + "}",                       // unknown version
      R"({"v":1,"id":10000000000000000000,"op":"lookup",)" + k_problem + "}",    // 20 digits
      R"({"v":1,"id":007,"op":"lookup",)" + k_problem + "}",                     // not JSON
      R"({"v":1,"id":1.5,"op":"lookup",)" + k_problem + "}",                     // a float
      R"({"v":1,"id":null,"op":"lookup",)" + k_problem + "}",                    // null
      R"({"v":1,"id":"a\"b","op":"lookup",)" + k_problem + "}",                  // an escape
      R"({"v":1,"id":1,"op":"status"})",                                         // another op
      R"({"id":1,"v":1,"op":"lookup",)" + k_problem + "}",                       // another order
      R"({"v":1,"id":1,"op":"lookup"})",                                         // no problem
  };
  for (const auto& line : lines) EXPECT_FALSE(parse_plain_lookup(line)) << line;
}

// Every line one byte away from a client's (deleted, replaced, inserted), and every member order:
// whatever plain accepts, the general parser accepts with the same meaning.
TEST(PlainLineTest, NoLineNearAClientsIsReadDifferently) {
  const std::vector<std::string> seeds = {
      R"({"v":2,"id":12,"op":"lookup","device":"nvidia-h200","limit":8,)" + k_problem + "}",
      R"({"v":1,"id":"x","op":"lookup","pin":"p",)"
      R"("problem":{"dtype":"fp16","out_dtype":"fp32","op":"gemm","dims":{"K":90,"M":1,"N":7}}})",
  };
  const std::string bytes = "{}[]\":,0123456789-.eE \\u\x7f\xc3nulltrueMNKx";
  int accepted = 0, mutated = 0;
  for (const auto& seed : seeds) {
    for (size_t at = 0; at < seed.size(); ++at) {
      std::vector<std::string> near = {seed.substr(0, at) + seed.substr(at + 1)};
      for (char c : bytes) {
        near.push_back(seed.substr(0, at) + c + seed.substr(at + 1));
        near.push_back(seed.substr(0, at) + c + seed.substr(at));
      }
      for (const auto& line : near) {
        ++mutated;
        if (auto plain = parse_plain_lookup(line)) {
          ++accepted;
          expect_same_reading(line, *plain);
        }
      }
    }
  }
  // Member order: the members after "op" of the first seed, permuted.
  std::vector<std::string> members = {R"("device":"nvidia-h200")", R"("limit":8)", k_problem,
                                      R"("pin":"q")"};
  std::sort(members.begin(), members.end());
  do {
    std::string line = R"({"v":2,"id":12,"op":"lookup")";
    for (const auto& m : members) line += "," + m;
    line += "}";
    auto plain = parse_plain_lookup(line);
    ASSERT_TRUE(plain) << line;
    expect_same_reading(line, *plain);
  } while (std::next_permutation(members.begin(), members.end()));
  // Both sides were exercised: some mutations (another digit, another letter) stay plain.
  EXPECT_GT(accepted, 100) << "of " << mutated;
  EXPECT_GT(mutated - accepted, 100) << "of " << mutated;
}

// Through the dispatcher: the reply to a plain line is byte for byte the reply to the same request
// with a space in it (read by the general parser), for answers and errors alike.
TEST(PlainLineTest, TheDaemonAnswersAPlainLineAsAnyOther) {
  NodeIdentity node;
  node.node_id = "test-node";
  node.gpu_error = "no GPU in tests";
  testing::DaemonParts parts(default_config(), testing::builtin_templates(), node);
  Problem tuned = testing::gemm_problem(4096, 4096, 4096);
  tuned.layout = "rc";
  parts.index.upsert(testing::winner(tuned, 100));
  const std::string dev = testing::h200().id();
  auto line = [&](const std::string& id, const std::string& members) {
    return R"({"v":2,"id":)" + id + R"(,"op":"lookup",)" + members + "}";
  };
  auto gemm = [](const std::string& dims, const std::string& more = "") {
    return R"("problem":{"op":"gemm","dtype":"bf16")" + more + R"(,"dims":{)" + dims + "}}";
  };
  const std::vector<std::string> lines = {
      line("1", R"("device":")" + dev + R"(",)" + gemm(R"("M":4096,"N":4096,"K":4096)")),  // exact
      line("2", R"("device":")" + dev + R"(",)" + gemm(R"("M":4000,"N":4096,"K":4096)")),  // near
      line("\"s\"", R"("device":"h200","limit":2,)" + gemm(R"("K":64,"N":64,"M":3)")),
      line("4", R"("device":"h200",)" + gemm(R"("M":64,"N":64,"K":64)", R"(,"layout":"rc")")),
      line("5", R"("device":"a100",)" + gemm(R"("M":64,"N":64,"K":64)")),  // not_found
      line("6", R"("device":"h200",)" + gemm(R"("M":0,"N":64,"K":64)")),   // invalid problem
      line("7", R"("device":"h200",)" + gemm(R"("M":64,"N":64)")),         // a dim missing
      line("8", R"("device":"h200","pin":"none",)" + gemm(R"("M":1,"N":1,"K":8)")),  // no pin
      line("9", R"("device":"h200",)" + gemm(R"("M":64,"N":64,"K":64)", R"(,"out_dtype":"fp32")")),
  };
  int answered = 0;
  for (const auto& plain : lines) {
    ASSERT_TRUE(parse_plain_lookup(plain)) << plain;
    std::string spaced = plain;
    spaced.insert(spaced.find(R"("op":"lookup")"), " ");
    ASSERT_FALSE(parse_plain_lookup(spaced));
    // Both readings name one cached answer only if they read one request: a misread plain line
    // would build (and be answered) its own.
    const std::string general_reply = parts.dispatcher.handle(spaced).line;
    const std::string plain_reply = parts.dispatcher.handle(plain).line;
    EXPECT_EQ(plain_reply, general_reply) << plain;
    answered += Json::parse(plain_reply)["ok"].get<bool>();
  }
  EXPECT_GE(answered, 5);
  EXPECT_LT(answered, int(lines.size()));
}

}  // namespace
}  // namespace ktune
