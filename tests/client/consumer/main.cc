// Links ktune::client and asks a daemon that is not there: must fail cleanly with
// connection_failed (exit 3), proving the installed headers, library and package config work —
// the launch API included, which links and starts without libcuda (it is dlopen'ed on launch).
#include <ktune/client.h>
#include <ktune/launcher.h>

#include <cstdio>

int main() {
  ktune::ClientOptions options;
  options.socket_path = "/nonexistent/ktuned.sock";
  ktune::Client client(options);
  auto reply = client.lookup({{"gemm", "bf16", "", "rc", {{"M", 64}, {"N", 64}, {"K", 64}}}});
  if (reply) return 1;
  std::printf("%s\n", reply.error().message.c_str());
  ktune::Launcher launcher(client);
  auto launched = ktune::gemm(launcher, {64, 64, 64}, 0, 0, 0, nullptr);
  if (launched || launched.error().kind != ktune::protocol::ErrorKind::connection_failed) return 4;
  return reply.error().kind == ktune::protocol::ErrorKind::connection_failed ? 3 : 2;
}
