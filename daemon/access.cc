#include "daemon/access.h"

#include <grp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

namespace ktune {

using protocol::ErrorKind;

namespace {

bool member_of(const PeerCredentials& peer, gid_t gid) {
  return peer.gid == gid ||
         std::find(peer.groups.begin(), peer.groups.end(), gid) != peer.groups.end();
}

// A group name or a numeric gid; nullopt for "".
Result<std::optional<gid_t>> resolve_group(const std::string& name) {
  if (name.empty()) return std::optional<gid_t>();
  if (std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isdigit(c); }))
    return std::optional<gid_t>(gid_t(std::stoul(name)));
  std::vector<char> buf(16384);
  group entry{};
  group* found = nullptr;
  int rc;
  while ((rc = ::getgrnam_r(name.c_str(), &entry, buf.data(), buf.size(), &found)) == ERANGE)
    buf.resize(buf.size() * 2);
  if (rc == 0 && found) return std::optional<gid_t>(found->gr_gid);
  return fail(ErrorCode::invalid_argument,
              "server.admin_group: no group named '" + name +
                  "' on this machine; create it (groupadd " + name +
                  "), give a numeric gid, or leave the key empty (then only the daemon's user "
                  "and root may run admin ops)");
}

}  // namespace

Result<PeerCredentials> peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return fail(ErrorCode::io_error, "cannot read the peer's credentials");
  PeerCredentials peer{cred.uid, cred.gid, {}};
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 2; ++attempt) {
    socklen_t glen = socklen_t(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(glen / sizeof(gid_t));
      peer.groups = std::move(groups);
      break;
    }
    if (errno != ERANGE) break;
    groups.resize(glen / sizeof(gid_t) + 1);
  }
  return peer;
}

Result<AccessPolicy> AccessPolicy::create(const DaemonConfig& config) {
  auto admin = resolve_group(config.admin_group);
  if (!admin) return std::unexpected(admin.error());
  return AccessPolicy(::getuid(), ::getgid(), *admin);
}

AccessPolicy::AccessPolicy(uid_t daemon_uid, gid_t daemon_gid, std::optional<gid_t> admin_gid)
    : m_uid(daemon_uid), m_gid(daemon_gid), m_admin_gid(admin_gid) {}

Rights AccessPolicy::unix_rights(const PeerCredentials& peer) const {
  if (peer.uid == m_uid || peer.uid == 0) return Rights::admin;
  if (m_admin_gid && member_of(peer, *m_admin_gid)) return Rights::admin;
  if (member_of(peer, m_gid)) return Rights::read;
  return Rights::none;
}

std::string AccessPolicy::refusal(const PeerCredentials& peer) const {
  return "peer uid " + std::to_string(peer.uid) +
         " may not use this daemon (not its user, root, or a member of its group " +
         std::to_string(m_gid) +
         (m_admin_gid ? " or of server.admin_group " + std::to_string(*m_admin_gid) : "") + ")";
}

Rights tcp_rights(const DaemonConfig& config, const protocol::Json& request) {
  const auto it = request.find("token");
  if (it == request.end() || !it->is_string()) return Rights::none;
  const std::string& token = it->get_ref<const std::string&>();
  // Both comparisons always run: the time taken says nothing about which token matched.
  const bool admin = constant_time_equal(token, config.tcp_admin_token);
  const bool read = constant_time_equal(token, config.tcp_token);
  if (admin && !config.tcp_admin_token.empty()) return Rights::admin;
  if (read && !config.tcp_token.empty()) return Rights::read;
  return Rights::none;
}

protocol::Expected<void> authorize(const protocol::OpInfo& op, Rights rights, const Peer& peer,
                                   const DaemonConfig& config) {
  if (!(op.flags & (protocol::op_write | protocol::op_admin)) || rights == Rights::admin) return {};
  std::string why = "'" + std::string(op.name) + "' is an admin op; ";
  if (peer.tcp) {
    why += config.tcp_admin_token.empty()
               ? "over TCP the daemon grants read ops only (no server.tcp_admin_token is set); "
                 "use the Unix socket"
               : "this token grants read ops only: send server.tcp_admin_token as \"token\"";
  } else {
    why += "only the daemon's user (uid " + std::to_string(::getuid()) + "), root" +
           (config.admin_group.empty() ? " may run it (no server.admin_group is set)"
                                       : " and members of group '" + config.admin_group +
                                             "' (server.admin_group) may run it") +
           "; this connection may run read ops";
  }
  return protocol::error(ErrorKind::forbidden, why);
}

bool constant_time_equal(std::string_view given, std::string_view expected) {
  volatile unsigned char diff = given.size() != expected.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = diff | (g ^ static_cast<unsigned char>(expected[i]));
  }
  return diff == 0;
}

bool looks_like_http(std::string_view line) {
  // JSON never starts with a letter, so this cannot refuse a request.
  if (line.empty() || !std::isalpha(static_cast<unsigned char>(line.front()))) return false;
  static constexpr std::string_view k_methods[] = {"GET ",    "POST ",    "PUT ",   "HEAD ",
                                                   "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ",
                                                   "TRACE ",  "PRI "};
  for (auto m : k_methods)
    if (line.starts_with(m)) return true;
  return line.find(" HTTP/1.") != std::string_view::npos;
}

std::string http_refusal() {
  static const std::string body =
      "ktuned speaks newline-delimited JSON on this port (docs/protocol.md), not HTTP\n";
  return "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace ktune
