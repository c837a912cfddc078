// ktune-worker: owns one GPU for a tuning parent. Started with the parent's end of a socketpair:
//   ktune-worker --fd 3 --device 0
// and serves the framed protocol of docs/worker-protocol.md until the parent closes the pipe.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tuner/gpu_worker.h"

int main(int argc, char** argv) {
  ktune::die_with_parent();
  int fd = -1, device = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--fd") == 0)
      fd = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--device") == 0)
      device = std::atoi(argv[i + 1]);
  }
  if (fd < 0) {
    std::fprintf(
        stderr,
        "usage: ktune-worker --fd N [--device ORDINAL]  (started by ktuned or ktune tune)\n");
    return 2;
  }
  return ktune::run_worker(fd, device);
}
