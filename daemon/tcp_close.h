// Closing a TCP connection without losing what was sent on it.
//
// Linux resets a TCP connection that is closed with input still unread (requests a draining
// session never took, the rest of an HTTP request over the limits), and the reset discards what
// the kernel has not delivered yet: a reply sent just before the close can be cut off. After
// shutdown(send), wait_until_acknowledged() waits until the peer has acknowledged every byte and
// the FIN (the send queue is empty: SIOCOUTQ), so the close that follows loses nothing. The
// kernel has no event for it: the queue is checked every 5 ms. A peer whose replies were
// acknowledged long ago costs one ioctl.
#pragma once

#include <linux/sockios.h>
#include <sys/ioctl.h>

#include <boost/asio.hpp>
#include <chrono>

namespace ktune {

// Returns once `socket`'s send queue is empty, the socket is closed, or `until` passes.
template <typename Socket>
boost::asio::awaitable<void, typename Socket::executor_type> wait_until_acknowledged(
    Socket& socket, std::chrono::steady_clock::time_point until) {
  using SocketExecutor = typename Socket::executor_type;
  boost::asio::basic_waitable_timer<std::chrono::steady_clock,
                                    boost::asio::wait_traits<std::chrono::steady_clock>,
                                    SocketExecutor>
      pause(socket.get_executor());
  boost::system::error_code ec;
  for (int unacked = 0; socket.is_open() && std::chrono::steady_clock::now() < until;) {
    if (::ioctl(socket.native_handle(), SIOCOUTQ, &unacked) != 0 || unacked == 0) break;
    pause.expires_after(std::chrono::milliseconds(5));
    co_await pause.async_wait(
        boost::asio::redirect_error(boost::asio::use_awaitable_t<SocketExecutor>(), ec));
  }
}

}  // namespace ktune
