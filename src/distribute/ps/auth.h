#pragma once
// CurveZMQ for a parameter-server cluster (--auth DIR): every ZeroMQ connection encrypted and
// authenticated. `tandem keys DIR` writes the cluster's key pairs: DIR/server.{key,pub} (the
// bound sockets: the chief's and the servers'), DIR/client.{key,pub} (the connecting ones: the
// chief's and the workers'), and DIR/allowed/client.pub. A bound socket admits only clients whose
// public key is a file of DIR/allowed (a ZAP handler answers for it: CurveZMQ alone admits any
// client that knows the server's public key); a refused client reads nothing, changes nothing,
// and is named in the log. Keys are Z85 text, 40 characters.
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace tandem::distribute::ps {

struct KeyPair {
  std::string public_key, secret_key;  // Z85
};
KeyPair make_key_pair();

struct Keys {
  std::string dir;
  KeyPair server, client;
  std::set<std::string> allowed;  // public keys, Z85
};
// Writes a new set of keys into `dir` (made if missing; refused where keys are already there).
void write_keys(const std::string& dir);
// Reads them back; a missing or malformed file is named with what was expected.
Keys read_keys(const std::string& dir);

void secure_server(zmq::socket_t& socket, const Keys& keys);  // before bind
void secure_client(zmq::socket_t& socket, const Keys& keys);  // before connect

// The ZAP handler of a ZeroMQ context: a thread answering its sockets' authentication requests
// from the allowlist, logging each refusal (the first ten, then every thousandth) as `who`.
class Authenticator {
 public:
  Authenticator(zmq::context_t& context, Keys keys, std::string who);
  ~Authenticator();
  Authenticator(const Authenticator&) = delete;
  Authenticator& operator=(const Authenticator&) = delete;
  int64_t refused() const { return refused_.load(); }

 private:
  void serve();
  zmq::socket_t socket_;
  Keys keys_;
  std::string who_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> refused_{0};
  std::thread thread_;
};

}  // namespace tandem::distribute::ps
