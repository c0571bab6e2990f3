// Push and pull of a model between one worker and one parameter server (a process of its own) on
// loopback, beside a bare ZeroMQ send and receive of the same bytes, in one run. The server is
// Tandem's (server.h) with plain SGD; a pull is a request and the model back (the server copies a
// snapshot, the worker writes it into its variables); a push is the gradients out and the
// server's answer after its update. Bare: the same bytes one way, a one-byte answer the other.
// Prints GB/s each way (bytes ÷ round trip), best of `rounds` rounds of `repetitions`.
// With a fourth argument "auth", both sides' sockets use CurveZMQ (keys made for the run, the
// server's ZAP handler admitting the worker's key), as `--auth DIR` sets them; with "inproc", the
// server is a thread of this process on ZeroMQ's inproc transport, as an in-process cluster's
// (ps-async:PxW:threads).
// Usage: bench_ps [megabytes] [repetitions] [rounds] [auth|inproc]
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "distribute/ps/auth.h"
#include "distribute/ps/server.h"
#include "distribute/ps/shards.h"
#include "tandem/optimizers.h"

using namespace tandem;
using namespace tandem::distribute::ps;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) try {
  double megabytes = argc > 1 ? std::atof(argv[1]) : 10.0;
  int repetitions = argc > 2 ? std::atoi(argv[2]) : 20, rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  std::optional<Keys> keys;
  bool inproc = argc > 4 && std::string(argv[4]) == "inproc";
  if (argc > 4 && std::string(argv[4]) == "auth") {
    char dir[] = "/tmp/tandem-bench-keys-XXXXXX";
    if (mkdtemp(dir) == nullptr) fail("bench_ps: cannot make a directory for the keys");
    write_keys(std::string(dir) + "/k");
    keys = read_keys(std::string(dir) + "/k");
    std::filesystem::remove_all(dir);
  }
  const int variables = 4;
  int64_t per = static_cast<int64_t>(megabytes * 1e6 / 4 / variables);
  int fd = socket(AF_INET, SOCK_STREAM, 0);  // a free port, given back for the server to take
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length) != 0)
    fail("bench_ps: no free port");
  close(fd);
  std::string address = inproc ? "inproc://bench-ps" : fmt::format("tcp://127.0.0.1:{}", ntohs(a.sin_port));
  zmq::context_t context(1);
  // The server: Tandem's, then a bare echo on the next message's kind.
  auto serve = [&](zmq::context_t& own) {
    std::optional<Authenticator> authenticator;
    if (keys) authenticator.emplace(own, *keys, "ps:0");
    zmq::socket_t router(own, zmq::socket_type::router);
    if (keys) secure_server(router, *keys);
    router.bind(address);
    ParameterServer ps("ps:0", std::make_unique<optimizers::SGD>(0.01f));
    ps.serve(router, [] { return false; });
    std::string bytes(static_cast<size_t>(per * variables * 4), 'x');
    while (true) {  // bare: "send" (the bytes come, one byte goes back) or "receive" (the bytes go)
      zmq::message_t route, body;
      if (!router.recv(route) || !router.recv(body)) break;
      router.send(route, zmq::send_flags::sndmore);
      if (body.size() == 1 && *static_cast<const char*>(body.data()) == 'r') router.send(zmq::buffer(bytes));
      else if (body.size() == 1 && *static_cast<const char*>(body.data()) == 'q') break;
      else router.send(zmq::buffer("k", 1));
    }
  };
  std::thread in_process;
  pid_t server = -1;
  if (inproc) {
    in_process = std::thread(serve, std::ref(context));
  } else if ((server = fork()) == 0) {
    zmq::context_t own(1);
    serve(own);
    _exit(0);
  }
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  if (keys) secure_client(dealer, *keys);
  dealer.connect(address);
  auto await = [&] {
    auto answer = receive(dealer, std::chrono::seconds(30), false);
    if (!answer) fail("bench_ps: the server did not answer");
    return std::move(*answer);
  };
  std::vector<Variable> model;
  for (int v = 0; v < variables; ++v) model.push_back(Variable{.name = "v", .value = Tensor::full({per}, 0.5f)});
  Outgoing init(MessageType::Init, 0, 0, 0);
  for (int v = 0; v < variables; ++v)
    init.add(static_cast<uint32_t>(v), 0, model[static_cast<size_t>(v)].value.clone());
  init.send(dealer);
  await();
  std::vector<Tensor> gradients;
  for (int v = 0; v < variables; ++v) gradients.push_back(Tensor::full({per}, 0.001f));
  int64_t version = 0;
  auto pull = [&] {
    Outgoing(MessageType::Pull, 0).send(dealer);
    Incoming values = await();
    for (const Item& item : values.items)
      std::memcpy(model[item.header.variable].value.raw(), item.payload.data(), item.payload.size());
    version = values.envelope.step;
  };
  auto push = [&] {
    Outgoing message(MessageType::Push, 0, version, 0);
    for (int v = 0; v < variables; ++v) message.add(static_cast<uint32_t>(v), 0, gradients[static_cast<size_t>(v)]);
    message.send(dealer);
    await();
    ++version;
  };
  std::string bytes(static_cast<size_t>(per * variables * 4), 'y');
  auto bare_send = [&] {
    dealer.send(zmq::buffer(bytes));
    zmq::message_t answer;
    (void)dealer.recv(answer);
  };
  auto bare_receive = [&] {
    dealer.send(zmq::buffer("r", 1));
    zmq::message_t answer;
    (void)dealer.recv(answer);
  };
  auto best_of = [&](const std::function<void()>& call) {
    double best = 1e300;
    for (int i = 0; i < repetitions; ++i) {
      auto start = Clock::now();
      call();
      best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
    }
    return best;
  };
  double pulls = 1e300, pushes = 1e300;
  for (int r = 0; r < rounds; ++r) {
    pulls = std::min(pulls, best_of(pull));
    pushes = std::min(pushes, best_of(push));
  }
  Outgoing(MessageType::Stop, 0).send(dealer);
  await();
  double sends = 1e300, receives = 1e300;
  for (int r = 0; r < rounds; ++r) {
    sends = std::min(sends, best_of(bare_send));
    receives = std::min(receives, best_of(bare_receive));
  }
  dealer.send(zmq::buffer("q", 1));
  if (inproc) in_process.join();
  else waitpid(server, nullptr, 0);
  double gb = static_cast<double>(bytes.size()) / 1e9;
  std::printf("%.1f MB model in %d variables, %s%s, best of %d rounds of %d\n", static_cast<double>(bytes.size()) / 1e6,
              variables,
              inproc ? "worker and server threads of one process on inproc" : "worker and server processes on loopback",
              keys ? ", CurveZMQ (--auth)" : "", rounds, repetitions);
  std::printf(
      "  pull (server to worker):  %6.3f ms  %5.2f GB/s   bare ZeroMQ receive %6.3f ms  %5.2f GB/s   ratio %.2f\n",
      pulls * 1e3, gb / pulls, receives * 1e3, gb / receives, receives / pulls);
  std::printf(
      "  push (worker to server):  %6.3f ms  %5.2f GB/s   bare ZeroMQ send    %6.3f ms  %5.2f GB/s   ratio %.2f\n",
      pushes * 1e3, gb / pushes, sends * 1e3, gb / sends, sends / pushes);
  std::printf("  (a push's round trip includes the server's SGD update of the model)\n");
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
