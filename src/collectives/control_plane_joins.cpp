// Who may join the control plane (control_plane.h), on rank 0: connections taken and their
// hellos read as bytes arrive, never holding up the control thread; a rank that was lost coming
// back, or one beyond the job's joining, where the job allows it.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "collectives/control_plane.h"
#include "collectives/control_wire.h"

namespace tandem::distribute::detail {

using Clock = std::chrono::steady_clock;

// Rank 0: a connection taken, its hello awaited without waiting (read_pending).
void ControlPlane::accept_pending() {
  int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  if (pending_.size() >= kMaxPending) {  // a flood: the oldest waiting one goes
    close(pending_.front().fd);
    pending_.erase(pending_.begin());
  }
  pending_.push_back({fd, Clock::now() + std::min(timeout_, std::chrono::milliseconds(2000)), {}});
}

std::vector<std::pair<int, int32_t>> ControlPlane::read_pending(const std::vector<pollfd>& ready) {
  std::vector<std::pair<int, int32_t>> hellos;
  std::vector<Pending> waiting;
  auto now = Clock::now();
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    bool open = true;
    if (i < ready.size() && ready[i].revents != 0) {
      char buffer[12];
      ssize_t n = recv(p.fd, buffer, 12 - p.in.size(), MSG_DONTWAIT);
      if (n > 0) p.in.append(buffer, static_cast<size_t>(n));
      else open = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    }
    if (open && p.in.size() == 12) {  // a hello: kHello, length 4, the rank
      uint32_t type = 0, length = 0;
      int32_t from = -1;
      std::memcpy(&type, p.in.data(), 4);
      std::memcpy(&length, p.in.data() + 4, 4);
      std::memcpy(&from, p.in.data() + 8, 4);
      if (type == kHello && length == 4 && from > 0 && from < kMaxRanks) {
        int one = 1;
        setsockopt(p.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        hellos.emplace_back(p.fd, from);
        continue;
      }
      open = false;
    }
    if (open && now < p.until) waiting.push_back(std::move(p));
    else close(p.fd);
  }
  pending_ = std::move(waiting);
  return hellos;
}

// On the control thread, rank 0: a connection after start-up whose hello came, taken only as a
// lost expendable rank coming back (or one beyond the job's, joining) while this rank has not
// begun to leave.
void ControlPlane::accept_rejoin(int fd, int32_t from) {
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
  p.heard = Clock::now();
  lost_.fetch_sub(1, std::memory_order_release);
  progress_[static_cast<size_t>(from)] = 0;
  phases_[static_cast<size_t>(from)] = "start-up";
  events_.push_back({from, true, {}});
}

}  // namespace tandem::distribute::detail
