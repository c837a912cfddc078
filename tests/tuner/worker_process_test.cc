// WorkerProcess against the fake worker: how the child is started (posix_spawn, the socket on
// fd 3), including the corner where the child's end of the pair already is fd 3.
#include "tuner/worker_process.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace ktune {
namespace {

const std::string k_fake_worker = std::string(KTUNE_BINARY_DIR) + "/tests/fake-worker";

TEST(WorkerProcess, SpawnsAndGreets) {
  auto w = WorkerProcess::spawn(k_fake_worker, 0, 5000);
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_TRUE((*w)->alive());
  EXPECT_EQ((*w)->hello().value("pid", -1), (*w)->pid());
}

TEST(WorkerProcess, AMissingBinaryIsUnavailable) {
  auto w = WorkerProcess::spawn("/nonexistent/ktune-worker", 0, 5000);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, ErrorCode::unavailable);
}

// With stdin closed, socketpair() hands out fds 0 and 3: the child's end is fd 3 already, and a
// dup2(3, 3) would leave it close-on-exec. (Whatever holds fd 3 here, e.g. a descriptor ctest
// passed down, is moved aside for the test and put back.)
TEST(WorkerProcess, ChildEndAlreadyOnFd3) {
  const int fd3_flags = ::fcntl(3, F_GETFD);
  const int saved_fd3 = fd3_flags == -1 ? -1 : ::fcntl(3, F_DUPFD_CLOEXEC, 100);
  if (saved_fd3 >= 0) ::close(3);
  const int saved_stdin = ::fcntl(0, F_DUPFD_CLOEXEC, 100);
  ASSERT_GE(saved_stdin, 0);
  ::close(0);
  {
    auto w = WorkerProcess::spawn(k_fake_worker, 0, 5000);
    EXPECT_TRUE(w) << w.error().message;
    struct stat st {};
    EXPECT_TRUE(::fstat(0, &st) == 0 && S_ISSOCK(st.st_mode)) << "the parent's end took fd 0";
    EXPECT_EQ(::fcntl(3, F_GETFD), -1) << "the parent keeps no copy of the child's end";
  }
  ASSERT_EQ(::dup2(saved_stdin, 0), 0);
  ::close(saved_stdin);
  if (saved_fd3 >= 0) {
    ASSERT_EQ(::dup2(saved_fd3, 3), 3);
    ::fcntl(3, F_SETFD, fd3_flags);
    ::close(saved_fd3);
  }
}

}  // namespace
}  // namespace ktune
