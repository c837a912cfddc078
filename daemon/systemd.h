// systemd service notifications (sd_notify): tell systemd when ktuned is ready, what it is doing,
// and when it stops or reloads, so a Type=notify unit (config/ktuned.service) starts dependants
// only once the socket answers and `systemctl status ktuned` shows the daemon's own status line.
//
// Every call is a no-op when NOTIFY_SOCKET is unset (ktuned started by hand, by tests or by
// another supervisor). A failed send is logged as a warning and otherwise ignored: a notification
// never stops the daemon. Thread-safe (each call is one datagram).
#pragma once

#include <string_view>

namespace ktune {

// READY=1 with a status line ("serving on /run/ktune/ktuned.sock, 2 GPUs"). Call once the socket
// is listening, and again after a reload has finished.
void notify_ready(std::string_view status);

// STATUS=<status>: the one-line state systemctl shows ("tuning gemm ... on GPU 0", "GPU 0
// paused: foreign process 1234 on GPU").
void notify_status(std::string_view status);

// STOPPING=1: shutdown has begun (systemd then waits up to TimeoutStopSec).
void notify_stopping();

// RELOADING=1 with MONOTONIC_USEC (systemd 253+ requires it, older versions ignore it); follow
// with notify_ready() once the new configuration is in effect.
void notify_reloading();

}  // namespace ktune
