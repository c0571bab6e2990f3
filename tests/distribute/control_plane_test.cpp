// The control plane (collectives/control_plane.h) of a two-rank job on this machine, against
// strangers on its port: it listens on loopback only; connections that say nothing, say garbage,
// or come by the hundred hold nothing up (the ranks' beats go on, the job does not fail); one
// without the job's key is refused and named, whatever it says; and a failure another rank
// reports is printed as that rank's words, cleaned, never as this rank's.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "collectives/control_plane.h"
#include "collectives/control_wire.h"
#include "tandem/error.h"

namespace tandem::distribute::detail {
namespace {

using namespace std::chrono_literals;

// Ranks 0 and 1 of one job, made together (each constructor waits for the other's side).
struct TwoRanks {
  std::unique_ptr<ControlPlane> zero, one;
  int port = 0;
  std::string key;  // the job's, from rank 0's word
  explicit TwoRanks(std::chrono::milliseconds timeout) {
    std::promise<std::string> text;
    std::shared_future<std::string> said = text.get_future().share();
    std::vector<std::string> hosts{"127.0.0.1", "127.0.0.1"}, names{"chief:0 (test)", "worker:0 (test)"};
    std::thread other([&] {
      one = std::make_unique<ControlPlane>(
          1, hosts, timeout, nullptr, [&](std::string& t, const auto&) { t = said.get(); }, names);
    });
    zero = std::make_unique<ControlPlane>(
        0, hosts, timeout, nullptr, [&](std::string& t, const auto&) { text.set_value(t); }, names);
    other.join();
    port = std::stoi(said.get());
    size_t at = said.get().find(" key:");
    key = from_hex(said.get().substr(at + 5, 2 * kJobKeyBytes));
  }
};

// A connection to this machine's `port` within 200 ms (never waiting on a full backlog), or -1.
int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  pollfd p{fd, POLLOUT, 0};
  if ((connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0 && errno != EINPROGRESS) ||
      poll(&p, 1, 200) != 1) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(ControlPlane, ALocalJobListensOnLoopbackOnly) {
  EXPECT_EQ(listen_address({"127.0.0.1", "127.0.0.1"}, true), "127.0.0.1");
  EXPECT_EQ(listen_address({"node1", "node1", "node1"}, false), "127.0.0.1");  // MPI: one machine's name
  EXPECT_EQ(listen_address({"10.1.2.3", "10.1.2.4"}, true), "10.1.2.3");       // a cluster spec's own address
  EXPECT_EQ(listen_address({"node1", "node2"}, false), "");                    // MPI across machines: every interface
  TwoRanks job(3000ms);
  // The port rank 0 said it listens on answers on loopback; what it is bound to is loopback.
  int fd = connect_loopback(job.port);
  ASSERT_GE(fd, 0);
  close(fd);
  std::string table;
  FILE* tcp = std::fopen("/proc/net/tcp", "r");
  ASSERT_NE(tcp, nullptr);
  char line[512];
  std::string needle = fmt::format(":{:04X} ", job.port);
  while (std::fgets(line, sizeof line, tcp) != nullptr) {
    std::string l(line);
    if (l.find(needle) != std::string::npos && l.find(" 0A ") != std::string::npos) table += l;  // 0A: LISTEN
  }
  std::fclose(tcp);
  ASSERT_FALSE(table.empty()) << "no listening socket on port " << job.port;
  EXPECT_NE(table.find("0100007F:" + fmt::format("{:04X}", job.port)), std::string::npos)
      << "not on 127.0.0.1: " << table;
}

// A task's whole conversation as a stranger could hold it with `key`: a hello naming `rank`,
// then a failure. Returns the connection (the caller closes it).
int hello_and_failure(int port, const std::string& key, int32_t rank) {
  int fd = connect_loopback(port);
  std::string challenge = read_exactly(fd, kChallengeBytes, 1000ms), mine(kChallengeBytes, 'x');
  Channel channel(key, challenge, mine, false);
  int32_t origin = rank;
  std::string bytes = mine + channel.seal(frame(kHello, std::string(reinterpret_cast<const char*>(&rank), 4)));
  bytes += channel.seal(frame(kFail, std::string(reinterpret_cast<const char*>(&origin), 4) + "stop"));  // after
  (void)!::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  return fd;
}

// Whether rank 0 closed the connection (read end: 0, or reset) before `deadline`.
bool closed_within(int fd, std::chrono::milliseconds deadline) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(deadline.count())) <= 0) return false;
  char byte = 0;
  ssize_t n = recv(fd, &byte, 1, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN);
}

// A stranger without the job's key, saying what a task joining the job would say and then that
// the job failed: refused and named, and the job goes on. The same bytes under the job's key are
// taken (the check of the check): the job ends with that task's failure.
TEST(ControlPlane, AConnectionWithoutTheJobsKeyIsRefusedAndNamed) {
  TwoRanks job(3000ms);
  job.zero->set_expendable([](int rank) { return rank >= 1; });  // a rank beyond the job's may join
  testing::internal::CaptureStderr();
  int stranger = hello_and_failure(job.port, random_bytes(kJobKeyBytes), 7);
  EXPECT_TRUE(closed_within(stranger, 5000ms)) << "rank 0 kept a connection without the job's key";
  close(stranger);
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("chief:0 (test): refused a control connection from 127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find(": no valid key (refusal 1)"), std::string::npos) << log;
  EXPECT_TRUE(job.zero->take_events().empty());
  EXPECT_FALSE(job.zero->failed()) << job.zero->failure();  // the connection is closed: nothing more comes
  EXPECT_FALSE(job.one->failed()) << job.one->failure();

  int task = hello_and_failure(job.port, job.key, 7);
  for (int i = 0; i < 500 && !job.one->failed(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(closed_within(task, 0ms)) << "rank 0 closed the connection of a task with the job's key";
  close(task);
  EXPECT_EQ(job.zero->failure(), "rank 7 (joined during the job) reported: stop");
  EXPECT_EQ(job.one->failure(), "rank 7 (joined during the job) reported: stop");
}

// A record opens once, in order, under the keys of its own connection only.
TEST(ControlPlane, ARecordOpensOnlyUnderItsConnectionsKeysAndInOrder) {
  std::string key = random_bytes(kJobKeyBytes), theirs = random_bytes(kChallengeBytes),
              mine = random_bytes(kChallengeBytes);
  Channel client(key, theirs, mine, false), server(key, theirs, mine, true);
  std::string first = client.seal("first"), second = client.seal("second"), raw, plain;
  raw = first + second.substr(0, 5);  // a record and a part
  ASSERT_TRUE(server.open(raw, plain));
  EXPECT_EQ(plain, "first");
  EXPECT_EQ(raw, second.substr(0, 5));
  raw += second.substr(5);
  ASSERT_TRUE(server.open(raw, plain));
  EXPECT_EQ(plain, "firstsecond");
  EXPECT_TRUE(raw.empty());
  std::string again = first;  // replayed: its number is past
  EXPECT_FALSE(server.open(again, plain));
  Channel other(key, random_bytes(kChallengeBytes), mine, true);  // another connection's challenge
  std::string copy = first;
  EXPECT_FALSE(other.open(copy, plain));
  std::string altered = client.seal("third");
  altered[10] ^= 1;
  EXPECT_FALSE(server.open(altered, plain));
  std::string reply = server.seal("back");  // the other direction has its own key and count
  plain.clear();
  EXPECT_TRUE(client.open(reply, plain));
  EXPECT_EQ(plain, "back");
  EXPECT_EQ(from_hex(to_hex(key)), key);
  EXPECT_EQ(from_hex("zz"), "");
}

// Strangers that connect and say nothing, say garbage, or come by the hundred: for longer than
// the timeout, the job's beats go on (neither rank fails) and it ends cleanly.
TEST(ControlPlane, StrangersOnThePortHoldNothingUp) {
  TwoRanks job(1500ms);
  job.zero->set_expendable([](int rank) { return rank >= 1; });  // as an asynchronous job: connections are taken
  std::vector<int> strangers;
  for (int i = 0; i < 200; ++i) {
    int fd = connect_loopback(job.port);
    if (fd < 0) continue;
    if (i % 3 == 1) (void)!::send(fd, "garbage, not a hello", 20, MSG_NOSIGNAL);
    if (i % 3 == 2) (void)!::send(fd, "\x01\x00", 2, MSG_NOSIGNAL);  // half a hello, then silence
    strangers.push_back(fd);
  }
  std::this_thread::sleep_for(3000ms);  // twice the timeout: a held-up beat would fail the job
  EXPECT_FALSE(job.zero->failed()) << job.zero->failure();
  EXPECT_FALSE(job.one->failed()) << job.one->failure();
  for (int fd : strangers) close(fd);
  std::thread other([&] { EXPECT_TRUE(job.one->leave_and_wait()) << job.one->failure(); });
  EXPECT_TRUE(job.zero->leave_and_wait()) << job.zero->failure();
  other.join();
}

// Strangers still waiting for their hello when the job ends are refused by name, and past the
// log's rate limit (the tenth refusal, then every thousandth) a closing line counts them all.
TEST(ControlPlane, StrangersStillWaitingAtTheEndAreNamedAndCounted) {
  TwoRanks job(3000ms);
  std::vector<int> strangers;
  for (int i = 0; i < 12; ++i)
    if (int fd = connect_loopback(job.port); fd >= 0) strangers.push_back(fd);
  ASSERT_EQ(strangers.size(), 12u);
  std::this_thread::sleep_for(300ms);  // taken, well within the 2 s a hello may take
  testing::internal::CaptureStderr();
  job.one.reset();
  job.zero.reset();
  std::string log = testing::internal::GetCapturedStderr();
  for (int fd : strangers) close(fd);
  for (int n = 1; n <= 10; ++n)
    EXPECT_NE(log.find(fmt::format(": the job ended before its hello (refusal {})", n)), std::string::npos) << log;
  EXPECT_EQ(log.find("(refusal 11)"), std::string::npos) << log;
  EXPECT_NE(log.find("chief:0 (test): refused a control connection from 127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("chief:0 (test): 12 control connections refused in all\n"), std::string::npos) << log;
}

// Rank 0's exchange hands rank 1 the text at once, then waits on rank 2 (which never comes) for
// 2.5 times the timeout, calling `meanwhile` as the parameter-server chief does while it waits for a
// stopped worker's greeting. Rank 1 is taken meanwhile and hears rank 0's beats: it neither fails
// to reach rank 0 nor takes it for stopped. Rank 2, which may miss the start, is lost (an event
// naming it); without that leave, rank 0's start-up ends naming it.
TEST(ControlPlane, RankZeroTakesAndBeatsToTheOthersWhileItsExchangeWaits) {
  std::vector<std::string> hosts{"127.0.0.1", "127.0.0.1", "127.0.0.1"},
      names{"chief:0 (test)", "worker:0 (test)", "worker:1 (test)"};
  for (bool may_miss : {true, false}) {
    std::promise<std::string> text;
    std::shared_future<std::string> said = text.get_future().share();
    std::unique_ptr<ControlPlane> zero, one;
    std::string one_error;
    std::thread other([&] {
      try {
        one = std::make_unique<ControlPlane>(
            1, hosts, 600ms, nullptr, [&](std::string& t, const auto&) { t = said.get(); }, names);
      } catch (const Error& e) {
        one_error = e.what();
      }
    });
    auto exchange = [&](std::string& t, const std::function<void()>& meanwhile) {
      text.set_value(t);
      for (auto until = std::chrono::steady_clock::now() + 1500ms; std::chrono::steady_clock::now() < until;) {
        meanwhile();
        std::this_thread::sleep_for(10ms);
      }
    };
    std::string zero_error;
    try {
      zero = std::make_unique<ControlPlane>(0, hosts, 600ms, nullptr, exchange, names, false,
                                            [&](int rank) { return may_miss && rank == 2; });
    } catch (const Error& e) {
      zero_error = e.what();
    }
    other.join();
    ASSERT_EQ(one_error, "") << "rank 1 did not join while rank 0's exchange waited";
    if (!may_miss) {
      EXPECT_EQ(zero_error, "control connections: worker:1 (test) did not connect to chief:0 (test) within 0.6 s");
      continue;
    }
    ASSERT_EQ(zero_error, "");
    std::this_thread::sleep_for(300ms);
    EXPECT_FALSE(one->failed()) << one->failure();
    EXPECT_FALSE(zero->failed()) << zero->failure();
    EXPECT_TRUE(zero->lost(2));
    EXPECT_FALSE(zero->lost(1));
    std::vector<ControlPlane::Event> events = zero->take_events();
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].rank, 2);
    EXPECT_FALSE(events[0].joined);
    EXPECT_EQ(events[0].what,
              "worker:1 (test) did not join during start-up: no control connection within 0.6 s (the process is "
              "stopped, slow to start, or died)");
  }
}

// A failure rank 1 reports reaches rank 0 as rank 1's words, its control characters removed; one
// that names its rank itself is shown as it is.
TEST(ControlPlane, APeersFailureIsPrintedAsItsWordsCleaned) {
  {
    TwoRanks job(3000ms);
    job.one->report_failure("the disk is full\n\x1b[31mred\x1b[0m");
    for (int i = 0; i < 200 && !job.zero->failed(); ++i) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(job.zero->failed());
    EXPECT_EQ(job.zero->failure(), "worker:0 (test) reported: the disk is full  [31mred [0m");
    EXPECT_EQ(job.one->failure(), "the disk is full\n\x1b[31mred\x1b[0m") << "its own words, as it said them";
  }
  {
    TwoRanks job(3000ms);
    job.one->report_failure("worker:0 (test) failed: out of memory");
    for (int i = 0; i < 200 && !job.zero->failed(); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_EQ(job.zero->failure(), "worker:0 (test) failed: out of memory");
  }
  {  // rank 0's own failure, relayed: rank 1 names rank 0 as the one who said it
    TwoRanks job(3000ms);
    job.zero->report_failure(std::string(5000, 'x'));
    for (int i = 0; i < 200 && !job.one->failed(); ++i) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(job.one->failed());
    EXPECT_TRUE(job.one->failure().starts_with("chief:0 (test) reported: xxx")) << job.one->failure();
    EXPECT_TRUE(job.one->failure().ends_with("... (3000 bytes more)")) << job.one->failure().size();
  }
}

}  // namespace
}  // namespace tandem::distribute::detail
