// WorkerProcess against the fake worker: how the child is started (posix_spawn, the socket on
// fd 3), including the corner where the child's end of the pair already is fd 3.
#include "tuner/worker_process.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <limits>

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

// A worker binary of another build speaks another protocol (argument kinds, clusters): refused
// at its hello instead of misreading requests.
TEST(WorkerProcess, AWorkerOfAnotherProtocolIsRefused) {
  ::setenv("FAKE_WORKER_PROTOCOL", "1", 1);
  auto w = WorkerProcess::spawn(k_fake_worker, 0, 5000);
  ::unsetenv("FAKE_WORKER_PROTOCOL");
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, ErrorCode::unavailable);
  EXPECT_NE(w.error().message.find("speaks protocol 1; this build needs " +
                                   std::to_string(k_worker_protocol_version)),
            std::string::npos)
      << w.error().message;
}

// Tensor maps, unpassed buffers and clusters survive the trip to the worker and back.
TEST(WorkerProtocol, TensorMapArgsAndClustersRoundTrip) {
  ArgValue map;
  map.name = "tmA";
  map.kind = ArgKind::tensor_map;
  map.dtype = "bf16";
  map.map = TensorMapValue{"A",
                           {4096, 1000},
                           {8192},
                           {64, 128},
                           {1, 1},
                           TensorMapSwizzle::b128,
                           TensorMapL2Promotion::b128,
                           TensorMapOobFill::nan};
  auto back = arg_from_json(to_json(map));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->kind, ArgKind::tensor_map);
  EXPECT_EQ(back->dtype, "bf16");
  EXPECT_EQ(back->map, map.map);
  ArgValue buffer;
  buffer.name = "A";
  buffer.dtype = "bf16";
  buffer.count = 4096000;
  buffer.pass = false;
  auto b = arg_from_json(to_json(buffer));
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->is_buffer());
  EXPECT_FALSE(b->pass);
  // A map whose ranks disagree is a corrupt frame, not a trial.
  WorkerJson bad = to_json(map);
  bad["box"] = {64};
  EXPECT_FALSE(arg_from_json(bad));
  LaunchGeometry g;
  g.grid = {132, 1, 1};
  g.cluster = {2, 1, 1};
  EXPECT_EQ(launch_from_json(to_json(g)), g);
}

// Outputs that were not finite give a +inf reference error: sent as the largest double, read back
// as +inf (sent as JSON's null, it failed the parent's parse: it took such a wrong_result for a
// crash).
TEST(WorkerProtocol, WrongResultWithNonFiniteErrorRoundTrips) {
  TrialResult r;
  r.id = 7;
  r.outcome = Outcome::wrong_result;
  r.ref_error = std::numeric_limits<double>::infinity();
  auto back = trial_result_from_json(WorkerJson::parse(to_json(r).dump()));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->outcome, Outcome::wrong_result);
  EXPECT_TRUE(std::isinf(back->ref_error));
  r.ref_error = 0.5;
  back = trial_result_from_json(WorkerJson::parse(to_json(r).dump()));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->ref_error, 0.5);
}

// The timing's L2 state travels by name; a request without one (an older parent) times with the
// L2 flushed, the default.
TEST(WorkerProtocol, TimingL2StateRoundTripsAndDefaultsToFlushed) {
  TimingOptions rotated;
  rotated.l2 = TimingL2::rotated;
  rotated.target_ms = 30;
  const WorkerJson j = to_json(rotated);
  EXPECT_EQ(j.at("l2"), "rotated");
  const TimingOptions back = timing_options_from_json(j);
  EXPECT_EQ(back.l2, TimingL2::rotated);
  EXPECT_EQ(back.target_ms, 30);
  EXPECT_EQ(timing_options_from_json(WorkerJson::object()).l2, TimingL2::flushed);
  EXPECT_EQ(parse_timing_l2("flushed"), TimingL2::flushed);
  EXPECT_FALSE(parse_timing_l2("warm"));
  EXPECT_FALSE(parse_timing_l2("unknown")) << "unknown is the absence of a timing, never sent";
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
