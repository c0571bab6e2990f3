// A launched parameter-server job (`tandem launch --ps 1 --workers 2`, asynchronous) against
// strangers on every port its tasks listen on, with and without --auth: every listening socket is
// on loopback; connections that send garbage, that say a task's hello and then that the job failed
// (the control plane's own words, unsealed, or sealed under a key that is not the job's), or that
// say nothing, change nothing: the job ends with its accuracy, and each refused control connection
// is named in the log.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/cli_util.h"
#include "collectives/control_channel.h"
#include "collectives/control_wire.h"
#include "distribute/ps/auth.h"
#include "distribute/ps/connection_watch.h"
#include "distribute/ps_cluster_util.h"
#include "test_util.h"

namespace tandem::testing {
namespace {

using namespace std::chrono_literals;
using distribute::detail::Channel;
using distribute::detail::frame;

// The TCP sockets process `pid` listens on, as "ADDRESS:PORT" (its sockets' inodes found in
// /proc/net/tcp and tcp6, as `ss -ltnp` does).
std::vector<std::pair<std::string, int>> listening(pid_t pid) {
  std::vector<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    std::error_code ec;
    std::string link = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && link.starts_with("socket:[")) inodes.push_back(link.substr(8, link.size() - 9));
  }
  std::vector<std::pair<std::string, int>> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(io::read_file(table));
    std::string line;
    std::getline(lines, line);  // the header
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state != "0A" || std::find(inodes.begin(), inodes.end(), inode) == inodes.end()) continue;  // 0A: LISTEN
      std::string address = local.substr(0, local.find(':'));
      int port = std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
      if (address.size() == 8) {  // IPv4, this machine's byte order
        uint32_t raw = std::stoul(address, nullptr, 16);
        address = fmt::format("{}.{}.{}.{}", raw & 255, (raw >> 8) & 255, (raw >> 16) & 255, raw >> 24);
      }
      out.emplace_back(address, port);
    }
  }
  return out;
}

int connect_to_port(int port) {
  int fd = distribute::detail::connect_to("127.0.0.1", port, 1000ms);
  EXPECT_GE(fd, 0) << "port " << port;
  return fd;
}

std::string as_bytes(int32_t value) { return {reinterpret_cast<const char*>(&value), 4}; }

// A ZeroMQ client on `port` (under `keys`, a key pair of its own: one the allowlist lacks) saying
// one frame that is not a Tandem message; kept open in `sockets`.
void zeromq_stranger(int port, const distribute::ps::Keys* keys, zmq::context_t& context,
                     std::vector<zmq::socket_t>& sockets) {
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  if (keys != nullptr) {
    distribute::ps::Keys stranger = *keys;
    stranger.client = distribute::ps::make_key_pair();
    distribute::ps::secure_client(socket, stranger);
  }
  socket.connect(fmt::format("tcp://127.0.0.1:{}", port));
  (void)socket.send(zmq::str_buffer("not a Tandem message"), zmq::send_flags::dontwait);
  sockets.push_back(std::move(socket));
}

// What strangers do to one port; the connections are held open until `held` is closed.
void visit(int port, std::vector<int>& held) {
  using distribute::detail::kFail;
  using distribute::detail::kHello;
  const std::string failure = as_bytes(9) + "a stranger says the job failed";
  for (int kind = 0; kind < 4; ++kind) {
    int fd = connect_to_port(port);
    if (fd < 0) continue;
    std::string bytes;
    if (kind == 0) bytes = "GET / HTTP/1.0\r\n\r\n" + std::string(4096, 'z');   // garbage
    if (kind == 1) bytes = frame(kHello, as_bytes(9)) + frame(kFail, failure);  // the old, unsealed words
    if (kind == 2) {  // sealed, under a key that is not the job's
      std::string challenge = distribute::detail::read_exactly(fd, distribute::detail::kChallengeBytes, 500ms);
      std::string mine = distribute::detail::random_bytes(distribute::detail::kChallengeBytes);
      Channel channel(distribute::detail::random_bytes(distribute::detail::kJobKeyBytes), challenge, mine, false);
      bytes = mine + channel.seal(frame(kHello, as_bytes(9)));
      bytes += channel.seal(frame(kFail, failure));
    }
    // kind 3: says nothing
    if (!bytes.empty()) (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    held.push_back(fd);
  }
}

double test_accuracy(const std::string& out) {
  std::smatch said;
  if (!std::regex_search(out, said, std::regex("test accuracy: ([0-9.]+)%"))) return -1;
  return std::stod(said[1].str());
}

TEST(PsStrangers, StrangersOnEveryPortOfALaunchedJobChangeNothingWithAndWithoutAuth) {
  TempDir dir;
  make_mnist(dir.file("data/mnist"), 600, 60);
  Watched keys = run_watched({TANDEM_CLI, "keys", dir.file("keys")}, dir, 30, "keys.log");
  ASSERT_EQ(keys.code, 0) << keys.output;
  for (bool auth : {false, true}) {
    SCOPED_TRACE(auth ? "with --auth" : "without --auth");
    std::vector<std::string> argv{
        TANDEM_CLI,   "launch",        "--ps",    "1",         "--workers",  "2",         "--",
        TANDEM_CLI,   "fit",           "--model", "mlp",       "--strategy", "ps-async",  "--epochs",
        "40",         "--batch-size",  "8",       "--threads", "1",          "--verbose", "2",
        "--data-dir", dir.file("data")};
    if (auth) argv.insert(argv.end(), {"--auth", dir.file("keys")});
    std::string log = auth ? "auth.log" : "open.log";
    Background job(dir, argv, log);
    ASSERT_TRUE(job.wait_for("Epoch 2/", 120)) << job.said();
    std::vector<int> held;
    zmq::context_t context(1);
    std::vector<zmq::socket_t> sockets;
    distribute::ps::Keys keys = distribute::ps::read_keys(dir.file("keys"));
    int ports = 0;
    for (auto [type, index] :
         std::vector<std::pair<std::string, int>>{{"chief", 0}, {"ps", 0}, {"worker", 0}, {"worker", 1}}) {
      pid_t pid = task_pid(job.pid(), type, index);
      ASSERT_GT(pid, 0) << type << ":" << index << "'s process not found\n" << job.said();
      for (auto [address, port] : listening(pid)) {
        EXPECT_EQ(address, "127.0.0.1") << type << ":" << index << " listens on " << address << ":" << port;
        visit(port, held);
        zeromq_stranger(port, auth ? &keys : nullptr, context, sockets);
        ++ports;
      }
    }
    EXPECT_EQ(ports, 3) << "the chief's control and data ports and the server's data port";
    int code = job.wait(240);
    for (int fd : held) close(fd);
    sockets.clear();
    std::string out = job.said();
    ASSERT_EQ(code, 0) << out;
    expect_no_sanitizer_report(out);
    EXPECT_EQ(out.find("a stranger says"), std::string::npos) << out;
    EXPECT_EQ(out.find("joined the running job"), std::string::npos) << out;
    EXPECT_TRUE(std::regex_search(out, std::regex("chief:0 \\(127\\.0\\.0\\.1:[0-9]+\\): refused a control connection "
                                                  "from 127\\.0\\.0\\.1:[0-9]+: no valid key")))
        << out;
    if (auth) EXPECT_NE(out.find("refused a client at"), std::string::npos) << out;  // the data ports' ZAP
    EXPECT_GE(test_accuracy(out), 80.0) << out;
    if (!auth) EXPECT_NE(out.find("parameter servers: dropped a message from "), std::string::npos) << out;
    // The data ports' strangers that never made a ZeroMQ handshake: named, and counted at the end.
    for (const char* task : {"chief:0", "ps:0"}) {
      EXPECT_TRUE(std::regex_search(
          out, std::regex(std::string(task) + " \\(127\\.0\\.0\\.1:[0-9]+\\): refused a ZeroMQ connection "
                                              "from 127\\.0\\.0\\.1:[0-9]+: ")))
          << task << "\n"
          << out;
      EXPECT_TRUE(std::regex_search(
          out, std::regex(std::string(task) + " \\(127\\.0\\.0\\.1:[0-9]+\\): [^\n]*\\b[4-9] connections refused on "
                                              "its ZeroMQ port, in all")))
          << task << "\n"
          << out;
    }
  }
}

// The local port a connected socket came from.
int local_port(int fd) {
  sockaddr_in at{};
  socklen_t length = sizeof at;
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&at), &length), 0);
  return ntohs(at.sin_port);
}

// A ROUTER bound to a free loopback port under a ConnectionWatch named "ps:0 (a test)", stderr
// captured from before the watch starts.
struct WatchedRouter {
  zmq::socket_t router;
  std::unique_ptr<distribute::ps::ConnectionWatch> watch;
  std::string endpoint;
  int port = 0;
  WatchedRouter(zmq::context_t& context, std::chrono::milliseconds handshake)
      : router(context, zmq::socket_type::router) {
    router.set(zmq::sockopt::linger, 0);
    ::testing::internal::CaptureStderr();
    watch = std::make_unique<distribute::ps::ConnectionWatch>(context, router, "ps:0 (a test)", handshake);
    router.bind("tcp://127.0.0.1:*");
    endpoint = router.get(zmq::sockopt::last_endpoint);
    port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  }
};

// A bound ROUTER under a ConnectionWatch (the chief's and the servers' data ports): a connection
// that says nothing, one that sends garbage and one that sends the control plane's hello are each
// named with the port it came from, the silent one within the handshake interval; a ZeroMQ peer is
// not named.
TEST(PsStrangers, ABoundZeroMqSocketNamesSilentAndGarbageConnectionsWithinItsTimeout) {
  zmq::context_t context(1);
  WatchedRouter watched(context, 1000ms);
  auto& [router, watch, endpoint, port] = watched;
  // A ZeroMQ peer: its handshake succeeds, and it is never refused.
  zmq::socket_t peer(context, zmq::socket_type::dealer);
  peer.set(zmq::sockopt::linger, 0);
  peer.connect(endpoint);
  (void)peer.send(zmq::str_buffer("a peer"), zmq::send_flags::none);
  auto began = std::chrono::steady_clock::now();
  int silent = connect_to_port(port), garbage = connect_to_port(port), hello = connect_to_port(port);
  ASSERT_GE(silent, 0);
  ASSERT_GE(garbage, 0);
  ASSERT_GE(hello, 0);
  // Their bytes a moment after they connect: ZeroMQ refuses bytes that are not its own within
  // microseconds, and a connection refused before the watch has read its address is named as from
  // "an address gone" (connection_watch.cpp).
  std::this_thread::sleep_for(200ms);
  std::string bytes = "GET / HTTP/1.0\r\n\r\n" + std::string(2048, 'z');
  (void)!::send(garbage, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  bytes = frame(distribute::detail::kHello, as_bytes(9)) +
          frame(distribute::detail::kFail, as_bytes(9) + "a stranger says the job failed");  // the control plane's
  (void)!::send(hello, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::vector<zmq::message_t> got;
  zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&item, 1, 3000ms), 1) << "the peer's message did not come";
  ASSERT_TRUE(zmq::recv_multipart(router, std::back_inserter(got)));
  while (watch->refused() < 3 && std::chrono::steady_clock::now() - began < 5s) std::this_thread::sleep_for(10ms);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  int silent_port = local_port(silent), garbage_port = local_port(garbage), hello_port = local_port(hello);
  watch->stop();
  for (int fd : {silent, garbage, hello}) close(fd);
  std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(watch->refused(), 3) << out;  // the peer's connection is not one
  EXPECT_LT(took, 2.5) << "the silent connection, refused past the 1 s handshake interval\n" << out;
  EXPECT_NE(out.find(fmt::format("ps:0 (a test): refused a ZeroMQ connection from 127.0.0.1:{}: no ZeroMQ handshake "
                                 "within 1 s (it said nothing, or too little) (refusal ",
                                 silent_port)),
            std::string::npos)
      << out;
  for (int from : {garbage_port, hello_port})
    EXPECT_NE(out.find(fmt::format("ps:0 (a test): refused a ZeroMQ connection from 127.0.0.1:{}: its first bytes are "
                                   "not ZeroMQ's (ZMTP 3) greeting (refusal ",
                                   from)),
              std::string::npos)
        << out;
}

// Garbage that ZeroMQ resets at once, each followed at once by a silent connection, which the
// server often gives the garbage's file descriptor number: every connection is refused once, and
// none is named by another's address (a silent one's address read for the garbage before it, as
// the chaos harness once found). Those whose address was not known for sure are "gone".
TEST(PsStrangers, AConnectionIsNeverNamedByTheAddressOfOneThatTookItsNumber) {
  zmq::context_t context(1);
  WatchedRouter watched(context, 500ms);
  auto& watch = watched.watch;
  int port = watched.port;
  std::string bytes = "GET / HTTP/1.0\r\n\r\n" + std::string(2048, 'z');
  std::vector<int> garbage, silent;
  for (int i = 0; i < 5; ++i) {  // 10 refusals: all named (the log names the first ten one by one)
    garbage.push_back(connect_to_port(port));
    (void)!::send(garbage.back(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    silent.push_back(connect_to_port(port));
  }
  auto began = std::chrono::steady_clock::now();
  while (watch->refused() < 10 && std::chrono::steady_clock::now() - began < 5s) std::this_thread::sleep_for(10ms);
  std::set<int> garbage_ports, silent_ports;
  for (int fd : garbage) garbage_ports.insert(local_port(fd));
  for (int fd : silent) silent_ports.insert(local_port(fd));
  watch->stop();
  for (int fd : garbage) close(fd);
  for (int fd : silent) close(fd);
  std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(watch->refused(), 10) << out;
  std::map<int, int> named;  // port: times
  std::regex line("refused a ZeroMQ connection from 127\\.0\\.0\\.1:([0-9]+): ([^(\n]*)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it) {
    int from = std::stoi((*it)[1].str());
    ++named[from];
    bool said_nothing = (*it)[2].str().starts_with("no ZeroMQ handshake");
    EXPECT_TRUE(said_nothing ? silent_ports.count(from) : garbage_ports.count(from)) << from << ": " << (*it)[2] << out;
  }
  for (const auto& [from, times] : named) EXPECT_EQ(times, 1) << from << " named " << times << " times\n" << out;
  for (int from : silent_ports) EXPECT_EQ(named.count(from), 1u) << "silent " << from << " not named\n" << out;
}

}  // namespace
}  // namespace tandem::testing
