// Access rules (daemon/access.h) and the dispatcher's policy stage applying them: no sockets.
#include "daemon/access.h"

#include <gtest/gtest.h>

#include "store/table_io.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using protocol::Json;

class AccessDispatchTest : public ::testing::Test {
 protected:
  AccessDispatchTest() : m_templates(TemplateRegistry::load({builtin_template_dir()})) {
    NodeIdentity node;
    node.driver = "none";
    node.nvrtc = "13.0";
    node.node_id = "test-node";
    node.gpu_error = "no GPU in tests";
    m_parts = std::make_unique<testing::DaemonParts>(default_config(), m_templates, node);
  }

  Json call(const Json& request, const Peer& peer) {
    return Json::parse(m_parts->dispatcher.handle(request.dump(), peer).line);
  }
  static std::string code(const Json& reply) {
    return reply["ok"].get<bool>() ? "ok" : reply["error"]["code"].get<std::string>();
  }
  // A request for every op, with the fields it needs to get past its own checks.
  static Json request(std::string_view op) {
    Json r = {{"v", 1}, {"id", 1}, {"op", op}};
    const Json problem = {
        {"op", "gemm"}, {"dtype", "bf16"}, {"dims", {{"M", 8}, {"N", 8}, {"K", 8}}}};
    if (op == "lookup") r["problem"] = problem, r["device"] = "nvidia-h200";
    if (op == "tune") r["problem"] = problem;
    if (op == "import") r["table"] = table();
    if (op == "plan") r["plan"] = "- {op: gemm, dtype: bf16, dims: {M: 8, N: 8, K: 8}}";
    if (op == "job" || op == "cancel" || op == "watch") r["job"] = "000000000042";
    if (op == "pin" || op == "unpin") r["name"] = "p";
    return r;
  }
  static std::string table() {
    return render_table({testing::winner(testing::gemm_problem(64, 64, 64), 5.0)},
                        TableFormat::json);
  }
  static bool admin_op(const protocol::OpInfo& op) {
    return op.flags & (protocol::op_write | protocol::op_admin);
  }
  size_t winners() { return scan_winners(m_parts->store)->size(); }

  TemplateRegistry m_templates;
  std::unique_ptr<testing::DaemonParts> m_parts;
};

// A read-only Unix peer (a member of the daemon's group) runs every read op, and every op that
// writes is refused as forbidden, naming the group that may, before its handler runs.
TEST_F(AccessDispatchTest, ReadOnlyUnixPeerIsRefusedEveryAdminOp) {
  m_parts->config.admin_group = "ktune-admin";
  const Peer reader{false, Rights::read};
  size_t admin_ops = 0;
  for (const auto& op : protocol::k_ops) {
    const Json reply = call(request(op.name), reader);
    if (!admin_op(op)) {
      EXPECT_NE(code(reply), "forbidden") << op.name << ": " << reply.dump();
      continue;
    }
    ++admin_ops;
    EXPECT_EQ(code(reply), "forbidden") << op.name << ": " << reply.dump();
    Json v2 = request(op.name);
    v2["v"] = 2;
    EXPECT_EQ(call(v2, reader)["v"], 2) << op.name << ": the refusal echoes the version asked in";
    const std::string message = reply["error"]["message"].get<std::string>();
    EXPECT_NE(message.find("'ktune-admin' (server.admin_group)"), std::string::npos) << message;
    EXPECT_NE(message.find(std::string(op.name)), std::string::npos) << message;
  }
  EXPECT_EQ(admin_ops, 6u) << "import, tune, plan, cancel, pin, unpin";
  EXPECT_EQ(winners(), 0u) << "the refused import wrote nothing";
  EXPECT_TRUE(m_parts->jobs.list(10, std::nullopt).empty()) << "the refused plan queued nothing";
  // The same requests from an admin get past the policy stage (the import lands).
  for (const auto& op : protocol::k_ops)
    EXPECT_NE(code(call(request(op.name), Peer{false, Rights::admin})), "forbidden") << op.name;
  EXPECT_EQ(winners(), 1u);
}

TEST_F(AccessDispatchTest, ForbiddenWithoutAdminGroupSaysWhoMay) {
  const Json reply = call(request("import"), Peer{false, Rights::read});
  ASSERT_EQ(code(reply), "forbidden");
  EXPECT_NE(reply["error"]["message"].get<std::string>().find("no server.admin_group is set"),
            std::string::npos)
      << reply.dump();
}

// TCP: the read token runs read ops, the admin token everything; no token, a wrong one or one of
// another type is unauthorized, whatever the op.
TEST_F(AccessDispatchTest, TcpTokensGrantReadOrAdmin) {
  m_parts->config.tcp_token = "read-token";
  m_parts->config.tcp_admin_token = "admin-token";
  const Peer tcp{true};
  auto with = [](Json r, Json token) {
    r["token"] = std::move(token);
    return r;
  };
  EXPECT_EQ(code(call(with(request("status"), "read-token"), tcp)), "ok");
  EXPECT_EQ(code(call(with(request("import"), "read-token"), tcp)), "forbidden");
  EXPECT_EQ(winners(), 0u);
  EXPECT_EQ(code(call(with(request("import"), "admin-token"), tcp)), "ok");
  EXPECT_EQ(winners(), 1u);
  EXPECT_EQ(code(call(with(request("status"), "admin-token"), tcp)), "ok");
  for (const Json& bad : {Json("read-tokeN"), Json("read-token "), Json(""), Json(42), Json()})
    EXPECT_EQ(code(call(with(request("status"), bad), tcp)), "unauthorized") << bad.dump();
  EXPECT_EQ(code(call(request("status"), tcp)), "unauthorized");
}

TEST_F(AccessDispatchTest, TcpWithoutAdminTokenRunsReadOpsOnly) {
  m_parts->config.tcp_token = "read-token";
  Json r = request("cancel");
  r["token"] = "read-token";
  const Json reply = call(r, Peer{true});
  ASSERT_EQ(code(reply), "forbidden");
  EXPECT_NE(reply["error"]["message"].get<std::string>().find("no server.tcp_admin_token"),
            std::string::npos)
      << reply.dump();
  r["token"] = "";  // an empty admin token never matches an empty token
  EXPECT_EQ(code(call(r, Peer{true})), "unauthorized");
}

// A daemon with no token at all (a config that bypassed validation) refuses every TCP request.
TEST_F(AccessDispatchTest, TcpWithNoTokenConfiguredIsRefused) {
  ASSERT_TRUE(m_parts->config.tcp_token.empty());
  EXPECT_EQ(code(call(request("status"), Peer{true})), "unauthorized");
  Json r = request("import");
  r["token"] = "";
  EXPECT_EQ(code(call(r, Peer{true})), "unauthorized");
  EXPECT_EQ(winners(), 0u);
}

// Every op that writes is flagged admin in the op table, so the docs and the CLI see the rule.
TEST(AccessTest, EveryWriteOpIsAnAdminOp) {
  for (const auto& op : protocol::k_ops)
    EXPECT_TRUE(!(op.flags & protocol::op_write) || (op.flags & protocol::op_admin)) << op.name;
}

TEST(AccessTest, UnixRightsFromCredentials) {
  const AccessPolicy policy(1000, 2000, gid_t(3000));
  EXPECT_EQ(policy.unix_rights({1000, 1000, {}}), Rights::admin) << "the daemon's user";
  EXPECT_EQ(policy.unix_rights({0, 0, {}}), Rights::admin) << "root";
  EXPECT_EQ(policy.unix_rights({1001, 3000, {}}), Rights::admin) << "admin group, primary";
  EXPECT_EQ(policy.unix_rights({1001, 1001, {2000, 3000}}), Rights::admin) << "supplementary";
  EXPECT_EQ(policy.unix_rights({1001, 2000, {}}), Rights::read) << "daemon group, primary";
  EXPECT_EQ(policy.unix_rights({1001, 1001, {7, 2000}}), Rights::read) << "supplementary";
  EXPECT_EQ(policy.unix_rights({1001, 1001, {7}}), Rights::none);
  EXPECT_NE(policy.refusal({1001, 1001, {7}}).find("peer uid 1001"), std::string::npos);
  const AccessPolicy no_admin_group(1000, 2000, std::nullopt);
  EXPECT_EQ(no_admin_group.unix_rights({1001, 3000, {3000}}), Rights::none);
  EXPECT_EQ(no_admin_group.unix_rights({1001, 2000, {3000}}), Rights::read);
}

TEST(AccessTest, AdminGroupIsResolvedOrRefused) {
  DaemonConfig c = default_config();
  c.admin_group = "4242";
  EXPECT_TRUE(AccessPolicy::create(c));
  c.admin_group = "root";  // exists on every Linux
  auto root = AccessPolicy::create(c);
  ASSERT_TRUE(root);
  EXPECT_EQ(root->unix_rights({1001, 1001, {0}}), Rights::admin);
  c.admin_group = "no-such-group-ktune";
  auto r = AccessPolicy::create(c);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("server.admin_group: no group named 'no-such-group-ktune'"),
            std::string::npos)
      << r.error().message;
}

TEST(AccessTest, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("s3cret", "s3cret"));
  EXPECT_FALSE(constant_time_equal("s3cre", "s3cret"));
  EXPECT_FALSE(constant_time_equal("s3crett", "s3cret"));
  EXPECT_FALSE(constant_time_equal("S3cret", "s3cret"));
  EXPECT_FALSE(constant_time_equal(std::string("s3cret\0", 7), "s3cret"));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal("x", ""));
}

// Browsers and curl are recognised by their request line; no JSON request ever is.
TEST(AccessTest, HttpRequestLinesAreRecognised) {
  for (const char* line :
       {"GET / HTTP/1.1", "POST / HTTP/1.1", "PUT /x HTTP/1.0", "OPTIONS * HTTP/1.1",
        "HEAD / HTTP/1.1", "DELETE /a HTTP/1.1", "PATCH /a HTTP/1.1", "CONNECT host:443 HTTP/1.1",
        "TRACE / HTTP/1.1", "PRI * HTTP/2.0", "GET /", "BREW /pot HTTP/1.1"})
    EXPECT_TRUE(looks_like_http(line)) << line;
  for (const char* line :
       {R"({"v":1,"id":1,"op":"status"})", R"({"v":1,"id":"GET / HTTP/1.1","op":"status"})",
        R"( {"v":1,"op":"import","origin":"POST / HTTP/1.1"})", "[1,2]", "GETTER", "get / http/1.1",
        "not json", "Host: 127.0.0.1", ""})
    EXPECT_FALSE(looks_like_http(line)) << line;
  const std::string reply = http_refusal();
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 400 Bad Request\r\n")) << reply;
  EXPECT_NE(reply.find("Connection: close"), std::string::npos);
}

}  // namespace
}  // namespace ktune
