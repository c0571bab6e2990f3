#pragma once
// A control connection's encryption and authentication (collectives/control_plane.h). Rank 0
// makes a job key (32 random bytes) and passes it with its port to the other ranks, the way the
// job passes that port: over MPI in a multi-worker job, over the cluster's ZeroMQ links in a
// parameter-server one (under --auth, CurveZMQ: only a task the allowlist admits learns the key).
// Each connection then derives its own pair of keys from the job key and a challenge from each
// end (BLAKE2b), and every message travels sealed with XSalsa20-Poly1305 (libsodium's secretbox)
// under a per-direction counter: a connection that does not know the job key opens nothing, and a
// recorded one cannot be replayed.
#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem::distribute::detail {

constexpr size_t kJobKeyBytes = 32, kChallengeBytes = 24;

std::string random_bytes(size_t n);
std::string to_hex(const std::string& bytes);
std::string from_hex(const std::string& text);  // "" where `text` is not hex

class Channel {
 public:
  Channel() = default;
  // `accepted`: this end took the connection (rank 0), whose challenge is `server_challenge`.
  Channel(const std::string& job_key, const std::string& server_challenge, const std::string& client_challenge,
          bool accepted);
  // A record: the sealed bytes' length (4 bytes), then the sealed bytes.
  std::string seal(const std::string& plain);
  // The whole records at the front of `raw` opened onto `plain` and taken from `raw`; false where
  // one does not open (another key, altered or out of order) or is longer than any of ours.
  bool open(std::string& raw, std::string& plain);
  // The bytes a record of `plain_bytes` takes on the wire.
  static size_t record_bytes(size_t plain_bytes);

 private:
  std::string send_key_, receive_key_;
  uint64_t sent_ = 0, received_ = 0;
};

}  // namespace tandem::distribute::detail
