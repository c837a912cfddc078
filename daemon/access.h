// Access: who may talk to ktuned and what each peer may do (docs/reliability.md § Access).
//
// Two rights. Read: every op that changes nothing. Admin: every op flagged op_write or op_admin
// in protocol::k_ops (import, tune, plan, cancel, pin, unpin, and any later op so flagged);
// docs/protocol.md § Rights lists both, checked against k_ops by a test.
//  - Unix socket: rights come from the peer's credentials (SO_PEERCRED, SO_PEERGROUPS), read once
//    at accept. The daemon's own user and root are admins, and so are members of
//    server.admin_group; members of the daemon's group are readers; anyone else is refused.
//  - TCP has no credentials: every request carries a token, compared in constant time.
//    server.tcp_token grants read, server.tcp_admin_token (when set) admin. A TCP listener
//    without a token does not start (config/config.cc).
//  - Anything that looks like HTTP on the protocol port (a browser page, curl) is refused and the
//    connection closed: a JSON request line never starts with a letter.
// Thread-safety: AccessPolicy is immutable once built; the free functions are pure.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/protocol.h"
#include "config/config.h"

namespace ktune {

enum class Rights { none, read, admin };

// Who is asking: the transport facts the policy stage needs, without the socket.
struct Peer {
  bool tcp = false;  // TCP: rights come from each request's token, never from `rights`
  // Unix socket: what the peer's credentials allow (AccessPolicy::unix_rights). The default is
  // the daemon's own user: tests and in-process callers.
  Rights rights = Rights::admin;
};

// A Unix-socket peer as the kernel reports it.
struct PeerCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
};

// Reads the credentials of the peer connected to Unix socket `fd`.
Result<PeerCredentials> peer_credentials(int fd);

class AccessPolicy {
 public:
  // The policy for this process (its uid and gid) and `config` (server.admin_group, a group name
  // or a numeric gid, resolved here). An unknown group name is an error.
  static Result<AccessPolicy> create(const DaemonConfig& config);
  // The same with the daemon's identity given (tests).
  AccessPolicy(uid_t daemon_uid, gid_t daemon_gid, std::optional<gid_t> admin_gid);

  // What a Unix-socket peer may do; Rights::none: refuse the connection.
  Rights unix_rights(const PeerCredentials& peer) const;
  // Why a peer with Rights::none is refused, for its error line.
  std::string refusal(const PeerCredentials& peer) const;

 private:
  uid_t m_uid;
  gid_t m_gid;
  std::optional<gid_t> m_admin_gid;
};

// What the "token" field of a TCP request grants under `config`.
Rights tcp_rights(const DaemonConfig& config, const protocol::Json& request);

// Whether `rights` may run `op`; the error (forbidden) says what the op needs and who has it.
protocol::Expected<void> authorize(const protocol::OpInfo& op, Rights rights, const Peer& peer,
                                   const DaemonConfig& config);

// Equality whose time depends only on the length of `expected`, not on where the two differ.
bool constant_time_equal(std::string_view given, std::string_view expected);

// Whether a request line is HTTP: it starts with a letter (JSON never does) and either with a
// method token and a space ("GET ", "POST ", "OPTIONS ", ...) or contains " HTTP/1.".
bool looks_like_http(std::string_view line);
// The reply to an HTTP request on the protocol port, before the connection is closed.
std::string http_refusal();

}  // namespace ktune
