// Who may join the control plane (control_plane.h), on rank 0: connections taken and their
// hellos read as bytes arrive, never holding up the control thread; a rank that was lost coming
// back, or one beyond the job's joining, where the job allows it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "collectives/control_plane.h"
#include "collectives/control_wire.h"
#include "tandem/error.h"

namespace tandem::distribute::detail {

using Clock = std::chrono::steady_clock;

// Rank 0: a connection taken and challenged, its hello awaited without waiting (read_pending).
void ControlPlane::accept_pending() {
  sockaddr_in from{};
  socklen_t length = sizeof from;
  int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &length, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  if (pending_.size() >= kMaxPending) {  // a flood: the oldest waiting one goes
    refuse(pending_.front(), fmt::format("more than {} connections waited for their hello", kMaxPending));
    pending_.erase(pending_.begin());
  }
  char host[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &from.sin_addr, host, sizeof host);
  Pending p{fd,
            Clock::now() + std::min(timeout_, std::chrono::milliseconds(2000)),
            random_bytes(kChallengeBytes),
            {},
            fmt::format("{}:{}", host, ntohs(from.sin_port))};
  // A fresh connection's buffer takes the challenge whole.
  if (::send(fd, p.challenge.data(), p.challenge.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
      static_cast<ssize_t>(p.challenge.size())) {
    close(fd);
    return;
  }
  pending_.push_back(std::move(p));
}

int ControlPlane::take_joins(int wait_ms) {
  std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
  for (const Pending& p : pending_) fds.push_back({p.fd, POLLIN, 0});
  if (poll(fds.data(), fds.size(), wait_ms) < 0) return 0;
  int joined = 0;
  for (Hello& hello : read_pending({fds.begin() + 1, fds.end()})) {
    Peer& p = peers_[static_cast<size_t>(std::min(hello.rank, size() - 1))];
    if (hello.rank >= size() || p.fd >= 0) {
      close(hello.fd);  // not one of ours, or a second copy of a rank
      continue;
    }
    p.fd = hello.fd;
    p.channel = std::move(hello.channel);
    ++joined;
  }
  if (fds[0].revents != 0) accept_pending();
  return joined;
}

// Named in the log, the first ten and then every thousandth: a flood of strangers does not flood it.
void ControlPlane::refuse(Pending& p, const std::string& why) {
  int64_t n = ++refused_;
  // Named before it is closed: whoever sees the close finds the line written (stderr is unbuffered).
  if (n <= kNamedRefusals || n % 1000 == 0)
    std::fprintf(stderr, "%s: refused a control connection from %s: %s (refusal %lld)\n", who(rank_).c_str(),
                 p.from.c_str(), why.c_str(), static_cast<long long>(n));
  close(p.fd);
}

std::vector<ControlPlane::Hello> ControlPlane::read_pending(const std::vector<pollfd>& ready) {
  // A hello: this end's challenge answered with the other's, then kHello and the rank, sealed.
  const size_t whole = kChallengeBytes + Channel::record_bytes(12);
  std::vector<Hello> hellos;
  std::vector<Pending> waiting;
  auto now = Clock::now();
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    if (i < ready.size() && ready[i].revents != 0) {
      char buffer[128];
      ssize_t n = recv(p.fd, buffer, whole - p.in.size(), MSG_DONTWAIT);
      if (n > 0) p.in.append(buffer, static_cast<size_t>(n));
      else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        refuse(p, fmt::format("closed after {} bytes, before a hello", p.in.size()));
        continue;
      }
    }
    if (p.in.size() == whole) {
      Channel channel(job_key_, p.challenge, p.in.substr(0, kChallengeBytes), true);
      std::string raw = p.in.substr(kChallengeBytes), plain;
      uint32_t type = 0, length = 0;
      int32_t from = -1;
      if (channel.open(raw, plain) && plain.size() == 12) {
        std::memcpy(&type, plain.data(), 4);
        std::memcpy(&length, plain.data() + 4, 4);
        std::memcpy(&from, plain.data() + 8, 4);
      }
      if (type == kHello && length == 4 && from > 0 && from < kMaxRanks) {
        int one = 1;
        setsockopt(p.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        hellos.push_back({p.fd, from, std::move(channel)});
      } else {
        refuse(p, "no valid key");
      }
      continue;
    }
    if (now < p.until) waiting.push_back(std::move(p));
    else
      refuse(p,
             fmt::format("no hello within {} s",
                         std::chrono::duration<double>(std::min(timeout_, std::chrono::milliseconds(2000))).count()));
  }
  pending_ = std::move(waiting);
  return hellos;
}

// On the control thread, rank 0: a connection after start-up whose hello came, taken only as a
// lost expendable rank coming back (or one beyond the job's, joining) while this rank has not
// begun to leave.
void ControlPlane::accept_rejoin(Hello hello) {
  int fd = hello.fd;
  int32_t from = hello.rank;
  std::lock_guard lock(mutex_);
  // A rank beyond those the job has: joined, if expendable (the ranks between stay absent: lost).
  if (!leaving_.load(std::memory_order_acquire) && from >= static_cast<int>(peers_.size()) && expendable_ &&
      expendable_(from)) {
    auto before = static_cast<int>(peers_.size());
    peers_.resize(static_cast<size_t>(from) + 1);
    progress_.resize(peers_.size(), 0);
    phases_.resize(peers_.size(), "start-up");
    for (int r = before; r <= from; ++r) peers_[static_cast<size_t>(r)].lost = true;
    lost_.fetch_add(from + 1 - before, std::memory_order_release);
    ranks_.store(from + 1, std::memory_order_release);
  }
  if (leaving_.load(std::memory_order_acquire) || from >= static_cast<int>(peers_.size()) ||
      !peers_[static_cast<size_t>(from)].lost) {
    close(fd);  // not one of ours, or a rank that is not lost (a second copy of a running task)
    return;
  }
  Peer& p = peers_[static_cast<size_t>(from)];
  if (p.counted) finished_.fetch_sub(1, std::memory_order_release);
  p = Peer{};
  p.fd = fd;
  p.channel = std::move(hello.channel);
  p.heard = Clock::now();
  lost_.fetch_sub(1, std::memory_order_release);
  progress_[static_cast<size_t>(from)] = 0;
  phases_[static_cast<size_t>(from)] = "start-up";
  events_.push_back({from, true, {}});
}

}  // namespace tandem::distribute::detail
