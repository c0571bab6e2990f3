// CurveZMQ keys and the ZAP handler (auth.h).
#include "distribute/ps/auth.h"

#include <sys/stat.h>

#include <array>
#include <cstdio>
#include <filesystem>

#include "tandem/distribute/parameter_server.h"
#include "tandem/error.h"
#include "tandem/io.h"

namespace tandem::distribute::ps {
namespace {

constexpr size_t kZ85Length = 40;

std::string key_file(const std::string& path, const char* what) {
  std::string text = io::read_file(path);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  std::array<uint8_t, 32> binary{};
  if (text.size() != kZ85Length || zmq_z85_decode(binary.data(), text.c_str()) == nullptr)
    fail("--auth: \"{}\" should hold a {} (a CurveZMQ key, {} characters of Z85 text), got {} characters{}", path, what,
         kZ85Length, text.size(), text.size() == kZ85Length ? " that are not Z85" : "");
  return text;
}

void write_secret(const std::string& path, const std::string& text) {
  io::write_file_atomically(path, text + "\n");
  if (::chmod(path.c_str(), 0600) != 0) fail_file(errno, "cannot make \"{}\" private: {}", path, std::strerror(errno));
}

}  // namespace

KeyPair make_key_pair() {
  std::array<char, kZ85Length + 1> pub{}, sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0)
    fail("keys: this ZeroMQ cannot make CurveZMQ keys (built without libsodium?): {}", zmq_strerror(zmq_errno()));
  return {pub.data(), sec.data()};
}

void write_keys(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(dir) / "allowed", ec);
  if (ec) fail_file(ec.value(), "keys: cannot make \"{}/allowed\": {}", dir, ec.message());
  for (const char* name : {"server.key", "client.key"})
    if (fs::exists(fs::path(dir) / name))
      fail("keys: \"{}\" already holds keys ({}); remove them first or choose another directory", dir, name);
  for (const char* role : {"server", "client"}) {
    KeyPair pair = make_key_pair();
    write_secret(fmt::format("{}/{}.key", dir, role), pair.secret_key);
    io::write_file_atomically(fmt::format("{}/{}.pub", dir, role), pair.public_key + "\n");
    if (std::string(role) == "client")
      io::write_file_atomically(fmt::format("{}/allowed/client.pub", dir), pair.public_key + "\n");
  }
}

Keys read_keys(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir))
    fail_file(ENOENT, "--auth: \"{}\" is not a directory (make one with `tandem keys DIR`)", dir);
  Keys keys;
  keys.dir = dir;
  keys.server = {key_file(dir + "/server.pub", "public key"), key_file(dir + "/server.key", "secret key")};
  keys.client = {key_file(dir + "/client.pub", "public key"), key_file(dir + "/client.key", "secret key")};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(dir) / "allowed", ec))
    if (entry.is_regular_file() && entry.path().extension() == ".pub")
      keys.allowed.insert(key_file(entry.path().string(), "public key"));
  if (ec) fail_file(ec.value(), "--auth: cannot read \"{}/allowed\": {}", dir, ec.message());
  if (keys.allowed.empty()) fail("--auth: \"{}/allowed\" holds no public key (*.pub): no client could connect", dir);
  return keys;
}

void secure_server(zmq::socket_t& socket, const Keys& keys) {
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, keys.server.secret_key);
  socket.set(zmq::sockopt::zap_domain, "tandem");
}

void secure_client(zmq::socket_t& socket, const Keys& keys) {
  socket.set(zmq::sockopt::curve_serverkey, keys.server.public_key);
  socket.set(zmq::sockopt::curve_publickey, keys.client.public_key);
  socket.set(zmq::sockopt::curve_secretkey, keys.client.secret_key);
}

Authenticator::Authenticator(zmq::context_t& context, Keys keys, std::string who)
    : socket_(context, zmq::socket_type::rep), keys_(std::move(keys)), who_(std::move(who)) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");  // where the context asks (ZAP, RFC 27)
  thread_ = std::thread([this] { serve(); });
}

Authenticator::~Authenticator() {
  stop_ = true;
  thread_.join();
}

// A request: version, request id, domain, address, routing id, mechanism, then the mechanism's
// credentials (CURVE: the client's 32-byte public key). The answer: version, request id, status
// code, status text, user id, metadata.
void Authenticator::serve() {
  while (!stop_) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
    std::vector<zmq::message_t> request;
    if (!zmq::recv_multipart(socket_, std::back_inserter(request))) continue;
    auto text = [&](size_t i) { return i < request.size() ? request[i].to_string() : std::string(); };
    std::string status = "400", reason = "malformed request", client;
    if (request.size() >= 6 && text(0) == "1.0") {
      if (text(5) != "CURVE" || request.size() < 7 || request[6].size() != 32) {
        reason = "not a CurveZMQ client";
      } else {
        std::array<char, kZ85Length + 1> z85{};
        zmq_z85_encode(z85.data(), static_cast<const uint8_t*>(request[6].data()), 32);
        client = z85.data();
        if (keys_.allowed.count(client)) status = "200", reason = "OK";
        else reason = "its public key is not allowed";
      }
    }
    if (status != "200") {
      int64_t n = ++refused_;
      if (n <= 10 || n % 1000 == 0)
        std::fprintf(stderr, "%s: refused a client at %s: %s%s (refusal %lld; allowed keys: %s/allowed)\n",
                     who_.c_str(), text(3).c_str(), reason.c_str(), client.empty() ? "" : (" " + client).c_str(),
                     static_cast<long long>(n), keys_.dir.c_str());
    }
    std::array<std::string, 6> answer{"1.0", text(1), status, reason, status == "200" ? client : "", ""};
    for (size_t i = 0; i < answer.size(); ++i)
      socket_.send(zmq::buffer(answer[i]), i + 1 < answer.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

}  // namespace tandem::distribute::ps

namespace tandem::distribute {
void make_cluster_keys(const std::string& dir) { ps::write_keys(dir); }
}  // namespace tandem::distribute
