// ParameterServerStrategy's parts, in process: the cluster spec, the placement of shards, a server
// serving real sockets (bad messages, the staleness bound, keys), and a cluster spec refused without
// keys. The wire format is ps_wire_test.cpp's; whole clusters ps_cluster_test.cpp's; replay and the
// tasks that die ps_faults_test.cpp's.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "distribute/ps/auth.h"
#include "distribute/ps/server.h"
#include "distribute/ps/transport.h"
#include "tandem/distribute/cluster.h"
#include "tandem/distribute/parameter_server.h"
#include "test_util.h"

namespace tandem::testing {
namespace {

using distribute::ClusterSpec;
using namespace distribute::ps;

TEST(ClusterSpec, ReadsTfConfigAndNamesEveryMistake) {
  ClusterSpec spec = ClusterSpec::parse(
      R"({"cluster": {"chief": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "localhost:2002"], "ps": ["[::1]:2003"]},
          "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(spec.task().str(), "worker:1");
  EXPECT_EQ(spec.count("worker"), 2);
  EXPECT_EQ(spec.host({"ps", 0}), "::1");
  EXPECT_EQ(spec.port({"worker", 1}), 2002);
  EXPECT_EQ(spec.describe({"chief", 0}), "chief:0 (127.0.0.1:2000)");
  EXPECT_EQ(ClusterSpec::parse(spec.to_json({"ps", 0})).task().str(), "ps:0");
  spec.check_hosts();
  auto refused = [](const std::string& json) { return error_of([&] { ClusterSpec::parse(json, "TF_CONFIG"); }); };
  EXPECT_NE(refused("{\"cluster\": ").find("TF_CONFIG is not valid JSON"), std::string::npos);
  EXPECT_NE(refused(R"({"cluster": {"evaluator": ["h:1"]}})").find("cluster.evaluator: unknown task type"),
            std::string::npos);
  EXPECT_NE(refused(R"({"cluster": {"worker": ["h:99999"]}})").find("the port must be a number from 1 to 65535"),
            std::string::npos);
  EXPECT_NE(
      refused(R"({"cluster": {"worker": ["justahost"]}})").find("task worker:0 (\"justahost\") is not \"host:port\""),
      std::string::npos);
  EXPECT_NE(
      refused(R"({"cluster": {"worker": ["h:1"], "ps": ["h:1"]}})").find("tasks worker:0 and ps:0 are both at h:1"),
      std::string::npos);
  EXPECT_NE(refused(R"({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 3}})")
                .find("task index 3 is out of range: the cluster lists 1 worker task (0 to 0)"),
            std::string::npos);
  EXPECT_NE(refused(R"({"cluster": {"worker": ["h:1"]}, "task": {"type": "ps", "index": 0}})")
                .find("task type \"ps\" is not in the cluster (it has worker tasks)"),
            std::string::npos);
  ClusterSpec no_ps = ClusterSpec::parse(R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"]}})");
  EXPECT_NE(error_of([&] {
              no_ps.require({"chief", "worker", "ps"}, {"chief", "worker", "ps"}, "ParameterServerStrategy");
            }).find("the cluster has no ps task; ParameterServerStrategy needs at least one"),
            std::string::npos);
  ClusterSpec nowhere = ClusterSpec::parse(R"({"cluster": {"worker": ["127.0.0.1:1", "no-such-host.invalid:2"]}})");
  EXPECT_NE(error_of([&] {
              nowhere.check_hosts();
            }).find("task worker:1 (\"no-such-host.invalid:2\"): host \"no-such-host.invalid\" does not resolve"),
            std::string::npos);
  // A task named by its host's name listens on the host's address (ZeroMQ binds to no name: a
  // Slurm cluster's tasks are "node:port").
  ClusterSpec named = ClusterSpec::parse(R"({"cluster": {"ps": ["localhost:2300"], "worker": ["[::1]:2301"]}})");
  EXPECT_EQ(named.listen_endpoint({"ps", 0}), "tcp://127.0.0.1:2300");
  EXPECT_EQ(named.listen_endpoint({"worker", 0}), "tcp://[::1]:2301");
  EXPECT_NE(error_of([&] { nowhere.listen_endpoint({"worker", 1}); }).find("does not resolve"), std::string::npos);
  // A port some other process listens on.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof a;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length);
  ClusterSpec taken = ClusterSpec::parse(
      fmt::format(R"({{"cluster": {{"ps": ["127.0.0.1:{}"]}}, "task": {{"type": "ps"}}}})", ntohs(a.sin_port)));
  EXPECT_NE(error_of([&] { taken.check_own_port_free(); }).find("another process has that port"), std::string::npos);
  close(fd);
}

// An in-process cluster: this process its chief, its tasks at inproc endpoints of its own (two
// clusters never share one), named "(in process)"; it has no TF_CONFIG to write.
TEST(ClusterSpec, AnInProcessClusterNamesItsThreadsAndHasNoAddresses) {
  ClusterSpec a = ClusterSpec::local(1, 3), b = ClusterSpec::local(1, 3);
  EXPECT_TRUE(a.in_process());
  EXPECT_FALSE(ClusterSpec::parse(R"({"cluster": {"worker": ["127.0.0.1:1"]}})").in_process());
  EXPECT_EQ(a.task(), (distribute::TaskId{"chief", 0}));
  EXPECT_EQ(a.count("ps"), 1);
  EXPECT_EQ(a.count("worker"), 3);
  EXPECT_EQ(a.describe({"worker", 2}), "worker:2 (in process)");
  EXPECT_TRUE(a.endpoint({"ps", 0}).starts_with("inproc://"));
  EXPECT_NE(a.endpoint({"ps", 0}), b.endpoint({"ps", 0}));
  EXPECT_NE(a.endpoint({"ps", 0}), a.endpoint({"worker", 0}));
  EXPECT_EQ(a.as_task({"worker", 1}).task(), (distribute::TaskId{"worker", 1}));
  EXPECT_EQ(a.as_task({"worker", 1}).endpoint({"ps", 0}), a.endpoint({"ps", 0}));
  EXPECT_NE(error_of([&] { a.as_task({"worker", 3}); }).find("the cluster has no task worker:3"), std::string::npos);
  EXPECT_NE(error_of([&] { a.to_json(a.task()); }).find("an in-process cluster has no TF_CONFIG"), std::string::npos);
  EXPECT_NE(error_of([] { ClusterSpec::local(0, 2); }).find("num_ps must be from 1 to 9999 servers, got 0"),
            std::string::npos);
  EXPECT_EQ(ClusterSpec::parse(R"({"cluster": {"ps": ["[::1]:7"]}, "task": {"type": "ps"}})").endpoint({"ps", 0}),
            "tcp://[::1]:7");
}

TEST(PsPlacement, ShardsCoverEachVariableOnDistinctServersAndBalanceTheBytes) {
  std::vector<Shape> shapes{{784, 128}, {128}, {128, 10}, {10}, {1000, 3}};
  for (int servers : {1, 2, 3}) {
    auto placed = distribute::place_variables(shapes, servers, distribute::Partitioner::min_size(4096, servers));
    std::vector<int64_t> load(static_cast<size_t>(servers), 0);
    for (size_t v = 0; v < shapes.size(); ++v) {
      int64_t covered = 0;
      std::vector<int> on;
      for (const auto& p : placed)
        if (p.variable == static_cast<int>(v)) {
          EXPECT_EQ(p.begin, covered) << "variable " << v;
          covered = p.end;
          on.push_back(p.server);
          load[static_cast<size_t>(p.server)] += (p.end - p.begin) * shapes[v].numel() / shapes[v][0];
        }
      EXPECT_EQ(covered, shapes[v][0]) << "variable " << v;
      std::sort(on.begin(), on.end());
      EXPECT_EQ(std::unique(on.begin(), on.end()), on.end()) << "two shards of variable " << v << " on one server";
    }
    EXPECT_EQ(static_cast<int>(std::count_if(placed.begin(), placed.end(), [](auto& p) { return p.variable == 0; })),
              servers);  // 392 KB over shards of at least 4 KB: one per server
    auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*hi - *lo, 784 * 128 / servers) << servers << " servers";
  }
  auto fixed = distribute::place_variables({{5, 2}}, 4, distribute::Partitioner::fixed_shards(8));
  EXPECT_EQ(fixed.size(), 4u);  // at most one shard per server
  EXPECT_THROW(distribute::place_variables(shapes, 0, {}), Error);
  // MaxSizePartitioner: as few shards as keep each within the size (100 rows of 40 bytes within
  // 1,000 bytes: 4 shards), capped by max_shards and, as every partitioner, by the servers.
  EXPECT_EQ(distribute::place_variables({{100, 10}}, 8, distribute::Partitioner::max_size(1000)).size(), 4u);
  EXPECT_EQ(distribute::place_variables({{100, 10}}, 8, distribute::Partitioner::max_size(1000, 3)).size(), 3u);
  EXPECT_EQ(distribute::place_variables({{100, 10}}, 2, distribute::Partitioner::max_size(1000)).size(), 2u);
  EXPECT_EQ(distribute::place_variables({{100, 10}}, 8, distribute::Partitioner::max_size(4000)).size(), 1u);
  EXPECT_NE(error_of([] {
              distribute::place_variables({{4}}, 1, distribute::Partitioner::max_size(0));
            }).find("MaxSizePartitioner: max_shard_bytes 0 must be positive"),
            std::string::npos);
}

// A server on a free loopback port, serving on its own thread, and a DEALER client that drives it
// as the chief and the workers do (with keys: CurveZMQ on both sides, the server's ZAP handler).
struct ServedOnLoopback {
  explicit ServedOnLoopback(int workers = 1, const Keys* keys = nullptr)
      : router(context, zmq::socket_type::router), server("ps:0", std::make_unique<optimizers::SGD>(0.5f), workers) {
    if (keys != nullptr) authenticator.emplace(context, *keys, "ps:0");
    router.set(zmq::sockopt::linger, 0);
    if (keys != nullptr) secure_server(router, *keys);
    router.bind("tcp://127.0.0.1:*");
    address = router.get(zmq::sockopt::last_endpoint);
    serving = std::thread([this] { server.serve(router, [] { return false; }); });
    client = connect(keys == nullptr ? std::nullopt : std::optional<KeyPair>(keys->client), keys);
  }
  ~ServedOnLoopback() {  // a test that ended early still stops the server
    if (!serving.joinable()) return;
    try {
      stop();
    } catch (const std::exception&) {
      std::terminate();  // the thread would outlive the test
    }
  }
  // A DEALER to the server: with `own` (and keys), a CurveZMQ client holding that key pair.
  zmq::socket_t connect(std::optional<KeyPair> own, const Keys* keys) {
    zmq::socket_t socket(context, zmq::socket_type::dealer);
    socket.set(zmq::sockopt::linger, 0);
    socket.set(zmq::sockopt::sndtimeo, 500);  // a refused connection takes nothing: an Error, not a hang
    if (own && keys != nullptr) {
      Keys as = *keys;
      as.client = *own;
      secure_client(socket, as);
    }
    socket.connect(address);
    return socket;
  }
  std::optional<Incoming> ask(zmq::socket_t& socket, Outgoing message, std::chrono::milliseconds wait) {
    message.send(socket);
    return receive(socket, wait, false);
  }
  Incoming ask(Outgoing message) {
    auto answer = ask(client, std::move(message), std::chrono::seconds(10));
    if (!answer) throw std::runtime_error("no answer");
    return std::move(*answer);
  }
  Incoming stop() {
    Incoming answer = ask(Outgoing(MessageType::Stop, 0));
    serving.join();
    return answer;
  }
  zmq::context_t context{1};
  std::optional<Authenticator> authenticator;
  zmq::socket_t router;
  std::string address;
  ParameterServer server;
  std::thread serving;
  zmq::socket_t client;
};

// A server on a free loopback port, driven over a DEALER as the chief and the workers drive it.
TEST(ParameterServer, AppliesPushesRefusesBadMessagesAndKeepsServing) {
  ServedOnLoopback on;
  ParameterServer& server = on.server;
  auto ask = [&](Outgoing message) { return on.ask(std::move(message)); };
  Incoming early = ask(Outgoing(MessageType::Pull, 0));  // before the chief's init
  EXPECT_EQ(early.envelope.type, MessageType::Refused);
  EXPECT_NE(std::string(early.items.at(0).payload).find("pull before init"), std::string::npos);
  Outgoing init(MessageType::Init, 0, 0, 0);
  init.add(0, 0, encode(PsPolicy{}), kPolicyItem);  // asynchronous
  init.add(0, 0, Tensor::from_vector({2, 2}, std::vector<float>{1, 2, 3, 4}));
  init.add(1, 0, Tensor::from_vector({3}, std::vector<float>{5, 6, 7}));
  EXPECT_EQ(ask(std::move(init)).envelope.type, MessageType::Ready);
  Outgoing push(MessageType::Push, 0, 0, 0);
  push.add(0, 0, encode(PushInfo{}), kPushInfoItem);
  push.add(0, 0, Tensor::from_vector({2, 2}, std::vector<float>{2, 2, 2, 2}));
  push.add(1, 0, Tensor::from_vector({3}, std::vector<float>{-2, 0, 2}));
  Incoming pushed = ask(std::move(push));
  EXPECT_EQ(pushed.envelope.type, MessageType::Pushed);
  EXPECT_EQ(pushed.envelope.step, 1);  // the version after
  EXPECT_EQ(pushed.envelope.aux, 0);   // computed on the version it was applied to
  // Garbage of every kind: refused, counted, answered where there is someone to answer.
  Outgoing wrong_shape(MessageType::Push, 0, 1, 0);
  wrong_shape.add(0, 0, encode(PushInfo{}), kPushInfoItem);
  wrong_shape.add(0, 0, Tensor::zeros({4}));
  wrong_shape.add(1, 0, Tensor::zeros({3}));
  Incoming refused = ask(std::move(wrong_shape));
  EXPECT_EQ(refused.envelope.type, MessageType::Refused);
  EXPECT_NE(std::string(refused.items.at(0).payload)
                .find("the gradient of shard 0/0 is float32 (4,), the shard float32 (2, 2)"),
            std::string::npos);
  Outgoing unknown(MessageType::Push, 0, 1, 0);
  unknown.add(0, 0, encode(PushInfo{}), kPushInfoItem);
  unknown.add(7, 0, Tensor::zeros({2, 2}));
  unknown.add(1, 0, Tensor::zeros({3}));
  EXPECT_EQ(ask(std::move(unknown)).envelope.type, MessageType::Refused);
  Outgoing future(MessageType::Push, 0, 99, 0);  // computed on a version the server never had
  future.add(0, 0, encode(PushInfo{}), kPushInfoItem);
  future.add(0, 0, Tensor::zeros({2, 2}));
  future.add(1, 0, Tensor::zeros({3}));
  EXPECT_EQ(ask(std::move(future)).envelope.type, MessageType::Refused);
  Outgoing no_info(MessageType::Push, 0, 1, 0);  // gradients without the push's info first
  no_info.add(0, 0, Tensor::zeros({2, 2}));
  no_info.add(1, 0, Tensor::zeros({3}));
  Incoming without = ask(std::move(no_info));
  EXPECT_EQ(without.envelope.type, MessageType::Refused);
  EXPECT_NE(std::string(without.items.at(0).payload).find("a push begins with its push info"), std::string::npos);
  uint64_t state = 5;
  int64_t dropped = messages_dropped();
  for (int i = 0; i < 200; ++i) {  // random and truncated frames
    std::vector<std::string> frames(1 + i % 4);
    for (auto& f : frames) {
      f.resize(static_cast<size_t>(i % 3 == 0 ? 96 : i % 130));
      for (char& c : f) c = static_cast<char>((state = state * 6364136223846793005ull + 1) >> 56);
    }
    if (i % 5 == 0) frames[0] = std::string(encode({.type = MessageType::Pull}).data(), 60);
    for (size_t k = 0; k < frames.size(); ++k)
      on.client.send(zmq::buffer(frames[k]), k + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  {  // not even ZeroMQ: raw bytes on the port
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::stoi(on.address.substr(on.address.rfind(':') + 1))));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    std::string junk(4096, '\x7f');
    EXPECT_GT(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), 0);
    close(fd);
  }
  // Drain the refusals the garbage earned, then a valid pull is served.
  while (receive(on.client, std::chrono::milliseconds(300), false)) {
  }
  Incoming values = ask(Outgoing(MessageType::Pull, 0));
  ASSERT_EQ(values.envelope.type, MessageType::Values);
  ASSERT_EQ(values.items.size(), 2u);
  EXPECT_EQ(values.items[0].tensor().to_vector(), (std::vector<float>{0, 1, 2, 3}));  // 1 - 0.5 * 2, ...
  EXPECT_EQ(values.items[1].tensor().to_vector(), (std::vector<float>{6, 6, 6}));
  EXPECT_EQ(values.envelope.step, 1);
  EXPECT_GE(server.refused() + messages_dropped() - dropped, 3 + 200 / 2);  // refused, or dropped undecoded
  EXPECT_EQ(on.stop().envelope.type, MessageType::Stop);
}

// The server is the truth of bounded staleness: with bound S (init's policy: bounded staleness S), a push from a
// worker more than S steps ahead of the slowest worker's pushes applied here is refused; the
// histogram counts how far ahead each applied push was.
TEST(ParameterServer, RefusesAPushFurtherAheadThanTheStalenessBound) {
  ServedOnLoopback on(2);
  ParameterServer& server = on.server;
  auto ask = [&](Outgoing message) { return on.ask(std::move(message)); };
  Outgoing init(MessageType::Init, 0, 0, 0);
  init.add(0, 0, encode(PsPolicy{.kind = PsPolicy::Kind::BoundedStaleness, .max_staleness = 1}), kPolicyItem);
  init.add(0, 0, Tensor::from_vector({2}, std::vector<float>{1, 2}));
  ASSERT_EQ(ask(std::move(init)).envelope.type, MessageType::Ready);
  int64_t version = 0;
  auto push = [&](uint32_t worker, int64_t clock) {
    Outgoing p(MessageType::Push, worker, version);
    p.add(0, 0, encode(PushInfo{.clock = clock}), kPushInfoItem);
    p.add(0, 0, Tensor::from_vector({2}, std::vector<float>{1, 1}));
    Incoming answer = ask(std::move(p));
    if (answer.envelope.type == MessageType::Pushed) version = answer.envelope.step;
    return answer;
  };
  EXPECT_EQ(push(0, 0).envelope.type, MessageType::Pushed);  // 0 ahead
  EXPECT_EQ(push(0, 1).envelope.type, MessageType::Pushed);  // 1 ahead of worker 1's 0 steps
  Incoming refused = push(0, 2);                             // 2 ahead: over the bound
  ASSERT_EQ(refused.envelope.type, MessageType::Refused);
  EXPECT_NE(std::string(refused.items.at(0).payload)
                .find("worker 0's step 2 is 2 steps ahead of worker 1, which has finished 0 (the bound is 1)"),
            std::string::npos)
      << refused.items.at(0).payload;
  EXPECT_EQ(push(1, 0).envelope.type, MessageType::Pushed);  // the slowest catches up
  EXPECT_EQ(push(0, 2).envelope.type, MessageType::Pushed);  // now 1 ahead
  EXPECT_EQ(version, 4);                                     // the refused push changed nothing
  EXPECT_EQ(on.stop().envelope.type, MessageType::Stop);
  EXPECT_EQ(server.ahead_counts(), (std::map<int64_t, int64_t>{{0, 2}, {1, 2}}));  // read once it stopped
}

// Synchronous rounds over the wire: a push's info names its round; the chief's CloseRound names the
// round it closes and is answered with the pushes that round was applied with; a push for a round
// already closed (a worker dropped from it that went on) is answered "dropped" and changes nothing.
TEST(ParameterServer, ClosesNumberedRoundsAndDropsAPushForAClosedOne) {
  ServedOnLoopback on(2);
  auto ask = [&](Outgoing message) { return on.ask(std::move(message)); };
  Outgoing init(MessageType::Init, 0, 0, 0);
  init.add(0, 0, encode(PsPolicy{.kind = PsPolicy::Kind::Synchronous}), kPolicyItem);
  init.add(0, 0, Tensor::from_vector({2}, std::vector<float>{1, 2}));
  ASSERT_EQ(ask(std::move(init)).envelope.type, MessageType::Ready);
  int64_t version = 0;
  auto push = [&](uint32_t worker, int64_t pushes, int64_t round) {
    Outgoing p(MessageType::Push, worker, version);
    p.add(0, 0, encode(PushInfo{.round = round, .round_pushes = pushes}), kPushInfoItem);
    p.add(0, 0, Tensor::from_vector({2}, std::vector<float>{2, 2}));
    return ask(std::move(p));
  };
  auto close = [&](int64_t round) {
    Incoming closed = ask(Outgoing(MessageType::CloseRound, 0, round));
    EXPECT_EQ(closed.envelope.type, MessageType::Ready);
    version = closed.envelope.step;
    return closed.envelope.aux;
  };
  EXPECT_EQ(push(0, 2, 4).envelope.aux, 0);
  EXPECT_EQ(close(4), 1);
  EXPECT_EQ(version, 1);
  Incoming late = push(1, 2, 4);
  ASSERT_EQ(late.envelope.type, MessageType::Pushed);
  EXPECT_EQ(late.envelope.aux, -1) << "dropped: round 4 was closed";
  EXPECT_EQ(push(0, 1, 5).envelope.step, 2) << "round 5, of one push, applied at once";
  version = 2;
  Outgoing unsized(MessageType::Push, 0, version);  // a numbered round of no pushes
  unsized.add(0, 0, encode(PushInfo{.round = 6}), kPushInfoItem);
  unsized.add(0, 0, Tensor::from_vector({2}, std::vector<float>{0, 0}));
  Incoming refused = ask(std::move(unsized));
  ASSERT_EQ(refused.envelope.type, MessageType::Refused);
  EXPECT_NE(std::string(refused.items.at(0).payload).find("a push's info is inconsistent: clock 0, round 6"),
            std::string::npos)
      << refused.items.at(0).payload;
  Incoming read = ask(Outgoing(MessageType::Pull, 0));
  EXPECT_EQ(read.envelope.step, 2);
  EXPECT_EQ(read.items.at(0).tensor().to_vector(), (std::vector<float>{-1, 0})) << "SGD 0.5: two updates of 2";
  EXPECT_EQ(on.stop().envelope.type, MessageType::Stop);
}

// CurveZMQ (--auth): a server admits only clients whose public keys are allowed. A client with a
// fresh key pair of its own, and one with no key, get no answer and change nothing (read back by
// an allowed client); the refusals are counted (and logged, naming the key).
TEST(ParameterServer, AdmitsOnlyAllowedKeysUnderAuth) {
  TempDir dir;
  distribute::make_cluster_keys(dir.file("keys"));
  Keys keys = read_keys(dir.file("keys"));
  EXPECT_EQ(keys.allowed, (std::set<std::string>{keys.client.public_key}));
  std::string said;
  try {
    distribute::make_cluster_keys(dir.file("keys"));
  } catch (const Error& e) {
    said = e.what();
  }
  EXPECT_NE(said.find("already holds keys"), std::string::npos) << said;
  ServedOnLoopback on(1, &keys);
  Outgoing init(MessageType::Init, 0, 0, 0);
  init.add(0, 0, encode(PsPolicy{}), kPolicyItem);
  init.add(0, 0, Tensor::from_vector({2}, std::vector<float>{1, 2}));
  EXPECT_EQ(on.ask(std::move(init)).envelope.type, MessageType::Ready);
  for (std::optional<KeyPair> stranger : {std::optional<KeyPair>(make_key_pair()), std::optional<KeyPair>()}) {
    zmq::socket_t other = on.connect(stranger, &keys);
    auto unanswered = [&](Outgoing message) {
      try {
        return !on.ask(other, std::move(message), std::chrono::milliseconds(500)).has_value();
      } catch (const Error& e) {  // the refused connection took nothing
        return std::string(e.what()).find("could not be sent within 0.5 s") != std::string::npos;
      }
    };
    Outgoing push(MessageType::Push, 0, 0, 0);
    push.add(0, 0, encode(PushInfo{}), kPushInfoItem);
    push.add(0, 0, Tensor::from_vector({2}, std::vector<float>{10, 10}));
    EXPECT_TRUE(unanswered(std::move(push)));
    EXPECT_TRUE(unanswered(Outgoing(MessageType::Pull, 0)));
  }
  Incoming values = on.ask(Outgoing(MessageType::Pull, 0));
  EXPECT_EQ(values.envelope.step, 0);  // no update applied
  EXPECT_EQ(values.items.at(0).tensor().to_vector(), (std::vector<float>{1, 2}));
  EXPECT_GE(on.authenticator->refused(), 1);
  EXPECT_EQ(on.stop().envelope.type, MessageType::Stop);
}

// Without keys, the chief and the servers listen on loopback only: a spec naming another address
// is refused before anything listens, unless --insecure.
TEST(PsCluster, ANonLoopbackClusterNeedsKeysOrInsecure) {
  TempDir dir;
  std::string spec =
      R"({"cluster": {"chief": ["10.11.12.13:2000"], "worker": ["127.0.0.1:2001"], "ps": ["127.0.0.1:2002"]},
          "task": {"type": "worker", "index": 0}})";
  setenv("TF_CONFIG", spec.c_str(), 1);
  std::string said;
  try {
    distribute::ParameterServerStrategy strategy(
        ClusterSpec::from_environment(), distribute::ParameterServerOptions{.timeout = std::chrono::seconds(1)});
  } catch (const Error& e) {
    said = e.what();
  }
  unsetenv("TF_CONFIG");
  EXPECT_NE(said.find("chief:0 (10.11.12.13:2000) listens on 10.11.12.13, not a loopback address"), std::string::npos)
      << said;
  EXPECT_NE(said.find("pass --auth DIR"), std::string::npos) << said;
}

}  // namespace
}  // namespace tandem::testing
