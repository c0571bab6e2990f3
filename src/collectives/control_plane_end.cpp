// How a job's ranks end on the control plane (control_plane.h): leaving together, staying watched
// past MPI's end, and a rank whose own failure ends the job waiting for the others to print theirs.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "collectives/control_plane.h"
#include "collectives/control_wire.h"

namespace tandem::distribute::detail {

using Clock = std::chrono::steady_clock;

void ControlPlane::linger_after_own_failure(std::chrono::milliseconds most) {
  auto until = Clock::now() + most;
  std::vector<pollfd> open;
  {
    std::lock_guard lock(mutex_);
    if (!failed_ || failure_origin_ != rank_) return;
    for (const Peer& p : peers_)
      if (p.fd >= 0) open.push_back({p.fd, POLLIN, 0});
  }
  if (std::this_thread::get_id() != thread_.get_id()) {  // the control thread sees the connections close
    while (Clock::now() < until) {
      {
        std::lock_guard lock(mutex_);
        if (std::none_of(peers_.begin(), peers_.end(), [](const Peer& p) { return p.fd >= 0; })) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return;
  }
  // On the control thread (a death it saw): it watches them close itself; what they say is moot.
  while (!open.empty() && Clock::now() < until) {
    if (poll(open.data(), open.size(), 5) <= 0) continue;
    std::erase_if(open, [](const pollfd& p) {
      char buffer[4096];
      ssize_t n = p.revents != 0 ? recv(p.fd, buffer, sizeof buffer, MSG_DONTWAIT) : -1;
      return n == 0 || (n < 0 && p.revents != 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    });
  }
}

// The control thread sends the byes (run()); silence and closed connections are watched meanwhile,
// so a rank that never comes fails the job.
bool ControlPlane::leave_and_wait() {
  leaving_.store(true, std::memory_order_release);
  while (!failed() && !(said_bye_.load(std::memory_order_acquire) &&
                        left_.load(std::memory_order_acquire) + lost_.load(std::memory_order_acquire) >=
                            (rank_ == 0 ? ranks_.load(std::memory_order_acquire) - 1 : 1)))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return !failed();
}

bool ControlPlane::finish_and_wait() {
  finishing_.store(true, std::memory_order_release);
  // Rank 0: every other rank's word; the others: rank 0's exit.
  int expected = rank_ == 0 ? ranks_.load(std::memory_order_acquire) - 1 : 1;
  while (!failed() && finished_.load(std::memory_order_acquire) < expected)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return !failed();
}

// On the control thread: peers finished, each counted once. For another rank, rank 0 has finished
// when its connection closes (it exited); for rank 0, another rank when its kDone came or its
// connection closed after it left.
void ControlPlane::count_finished() {
  for (Peer& p : peers_) {
    bool done = rank_ == 0 ? p.finished || (p.fd < 0 && p.left) || p.lost : p.fd < 0 && p.left;
    if (done && !p.counted) {
      p.counted = true;
      finished_.fetch_add(1, std::memory_order_release);
    }
  }
  if (rank_ != 0 && finishing_.load(std::memory_order_acquire) && !said_done_.load(std::memory_order_relaxed)) {
    std::lock_guard lock(mutex_);
    if (peers_[0].fd >= 0) send_to(peers_[0], kDone, {});
    said_done_.store(true, std::memory_order_release);
  }
}

// On the control thread: another rank says bye as soon as it leaves; rank 0 once every other has
// (its bye lets them go).
void ControlPlane::say_bye_when_due() {
  if (!leaving_.load(std::memory_order_acquire) || said_bye_.load(std::memory_order_relaxed) || failed()) return;
  if (rank_ == 0 && left_.load(std::memory_order_acquire) + lost_.load(std::memory_order_acquire) <
                        ranks_.load(std::memory_order_acquire) - 1)
    return;
  std::lock_guard lock(mutex_);
  for (Peer& p : peers_)
    if (p.fd >= 0) send_to(p, kBye, {});
  said_bye_.store(true, std::memory_order_release);
}

}  // namespace tandem::distribute::detail
