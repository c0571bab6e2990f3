// A control connection's encryption (control_channel.h), on libsodium.
#include "collectives/control_channel.h"

#include <sodium.h>

#include <array>
#include <cstring>

#include "tandem/error.h"

namespace tandem::distribute::detail {
namespace {

constexpr uint32_t kMostSealed = (1u << 20) + crypto_secretbox_MACBYTES;

void ready() {
  static const bool ok = sodium_init() >= 0;
  if (!ok) fail("control connection: libsodium could not start (sodium_init)");
}

// BLAKE2b keyed with the job key, over which way the key is for and both challenges.
std::string derive(const std::string& job_key, const char* direction, const std::string& server_challenge,
                   const std::string& client_challenge) {
  std::string in = direction + server_challenge + client_challenge;
  std::string out(crypto_secretbox_KEYBYTES, '\0');
  crypto_generichash(reinterpret_cast<unsigned char*>(out.data()), out.size(),
                     reinterpret_cast<const unsigned char*>(in.data()), in.size(),
                     reinterpret_cast<const unsigned char*>(job_key.data()), job_key.size());
  return out;
}

// A message's nonce: its number in its direction (each direction has its own key).
std::array<unsigned char, crypto_secretbox_NONCEBYTES> nonce(uint64_t n) {
  std::array<unsigned char, crypto_secretbox_NONCEBYTES> out{};
  std::memcpy(out.data(), &n, sizeof n);
  return out;
}

}  // namespace

std::string random_bytes(size_t n) {
  ready();
  std::string out(n, '\0');
  randombytes_buf(out.data(), n);
  return out;
}

std::string to_hex(const std::string& bytes) {
  std::string out(2 * bytes.size() + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  out.pop_back();  // the terminating zero
  return out;
}

std::string from_hex(const std::string& text) {
  std::string out(text.size() / 2, '\0');
  size_t length = 0;
  const char* end = nullptr;
  if (sodium_hex2bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.c_str(), text.size(), nullptr,
                     &length, &end) != 0 ||
      end != text.c_str() + text.size() || length != out.size())
    return {};
  return out;
}

Channel::Channel(const std::string& job_key, const std::string& server_challenge, const std::string& client_challenge,
                 bool accepted) {
  ready();
  std::string to_server = derive(job_key, "to rank 0", server_challenge, client_challenge);
  std::string from_server = derive(job_key, "from rank 0", server_challenge, client_challenge);
  send_key_ = accepted ? from_server : to_server;
  receive_key_ = accepted ? to_server : from_server;
}

size_t Channel::record_bytes(size_t plain_bytes) { return 4 + plain_bytes + crypto_secretbox_MACBYTES; }

std::string Channel::seal(const std::string& plain) {
  auto length = static_cast<uint32_t>(plain.size() + crypto_secretbox_MACBYTES);
  std::string out(4 + length, '\0');
  std::memcpy(out.data(), &length, 4);
  auto n = nonce(sent_++);
  crypto_secretbox_easy(reinterpret_cast<unsigned char*>(out.data() + 4),
                        reinterpret_cast<const unsigned char*>(plain.data()), plain.size(), n.data(),
                        reinterpret_cast<const unsigned char*>(send_key_.data()));
  return out;
}

bool Channel::open(std::string& raw, std::string& plain) {
  if (receive_key_.empty()) return raw.empty();
  size_t at = 0;
  bool ok = true;
  while (raw.size() - at >= 4) {
    uint32_t length = 0;
    std::memcpy(&length, raw.data() + at, 4);
    if (length < crypto_secretbox_MACBYTES || length > kMostSealed) {
      ok = false;
      break;
    }
    if (raw.size() - at - 4 < length) break;
    std::string opened(length - crypto_secretbox_MACBYTES, '\0');
    auto n = nonce(received_);
    if (crypto_secretbox_open_easy(reinterpret_cast<unsigned char*>(opened.data()),
                                   reinterpret_cast<const unsigned char*>(raw.data() + at + 4), length, n.data(),
                                   reinterpret_cast<const unsigned char*>(receive_key_.data())) != 0) {
      ok = false;
      break;
    }
    ++received_;
    plain += opened;
    at += 4 + length;
  }
  raw.erase(0, at);
  return ok;
}

}  // namespace tandem::distribute::detail
