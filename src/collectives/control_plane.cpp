// The control connections beside MPI (control_plane.h): the liveness protocol. Messages are a
// type, a length and a payload (control_wire.h); who may connect is control_plane_joins.cpp's;
// rank 0 relays what any rank reports. Nothing here blocks on a peer: sends that would
// block are dropped (beats are repeated), and reads go through poll().
#include "collectives/control_plane.h"
#include "collectives/control_wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>
#include <utility>

#include <fmt/ranges.h>

#include "core/fault_hooks.h"
#include "tandem/error.h"

namespace tandem::distribute::detail {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

std::string encode(const std::vector<int64_t>& values) {
  return {reinterpret_cast<const char*>(values.data()), values.size() * sizeof(int64_t)};
}

// Rank 0's table: its count of ranks, each rank's progress, then each rank's phase (a line each).
std::string encode_table(const std::vector<int64_t>& progress, const std::vector<std::string>& phases) {
  std::string table = encode({static_cast<int64_t>(progress.size())}) + encode(progress);
  for (const std::string& phase : phases) table += phase + '\n';
  return table;
}

std::string during(const std::string& phase) { return phase.empty() ? std::string() : " during " + phase; }

// A peer's words as this rank prints them: control characters as spaces, at most 2,000 bytes.
std::string cleaned(const std::string& text) {
  constexpr size_t kMost = 2000;
  std::string out = text.substr(0, kMost);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return text.size() > kMost ? out + "... (" + std::to_string(text.size() - kMost) + " bytes more)" : out;
}

}  // namespace

int test_fault_signal(int rank, const std::string& phase) {
  const fault_hooks::Hooks& hooks = fault_hooks::hooks();
  return hooks.phase_signal ? hooks.phase_signal(rank, phase) : 0;
}

ControlPlane::ControlPlane(int rank, std::vector<std::string> hosts, std::chrono::milliseconds timeout,
                           std::function<void(const std::string&)> on_failure, const Exchange& exchange,
                           std::vector<std::string> names, bool bind_own_host,
                           const std::function<bool(int rank)>& may_miss_start)
    : rank_(rank),
      hosts_(std::move(hosts)),
      names_(std::move(names)),
      timeout_(timeout),
      interval_(std::clamp(timeout / 8, std::chrono::milliseconds(20), std::chrono::milliseconds(1000))),
      on_failure_(std::move(on_failure)),
      progress_(hosts_.size(), 0),
      phases_(hosts_.size(), "start-up") {
  // A start-up that fails closes what it opened: the others see their connections close at once
  // (not silence), and a process that tries again holds no port.
  struct CloseOnThrow {
    ControlPlane* plane;
    bool armed = true;
    ~CloseOnThrow() {
      if (!armed) return;
      for (Pending& p : plane->pending_) close(p.fd);
      for (Peer& p : plane->peers_)
        if (p.fd >= 0) close(p.fd);
      if (plane->listen_fd_ >= 0) close(plane->listen_fd_);
    }
  } guard{this};
  std::string text;
  if (rank_ == 0) {
    // Where rank 0 listens: loopback when every rank is on its machine; else its own address as
    // the job names it (a cluster spec's host), or, where the job names machines only (MPI's
    // processor names), every interface, its addresses offered in turn.
    std::string own = listen_address(hosts_, bind_own_host);
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in at{};
    at.sin_family = AF_INET;
    if (own.empty()) at.sin_addr.s_addr = htonl(INADDR_ANY);
    else inet_pton(AF_INET, own.c_str(), &at.sin_addr);
    socklen_t length = sizeof at;
    if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 ||
        listen(listen_fd_, 128) != 0 || getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&at), &length) != 0)
      fail("control connection: {} cannot listen on a TCP port{}: {}", who(0),
           own.empty() ? std::string() : " of " + own, std::strerror(errno));
    job_key_ = random_bytes(kJobKeyBytes);
    text = std::to_string(ntohs(at.sin_port)) + " key:" + to_hex(job_key_);
    if (!own.empty()) text += " " + own;
    else
      for (const std::string& a : local_addresses()) text += " " + a;
  }
  if (rank_ == 0) peers_.resize(hosts_.size());
  // Rank 0's start-up: the ranks that have joined hear its beats while it waits for the others.
  int joined = 1;
  auto next_beat = Clock::now();
  auto turn = [&](int wait_ms) {
    if (Clock::now() >= next_beat) {
      beat();
      next_beat = Clock::now() + interval_;
    }
    joined += take_joins(wait_ms);
  };
  exchange(text, [&] {
    if (rank_ == 0) turn(0);
  });
  if (rank_ == 0) {
    auto deadline = Clock::now() + timeout_;
    while (joined < size()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() > 0) {
        turn(static_cast<int>(std::min<int64_t>(left.count(), 50)));
        continue;
      }
      std::string missing;
      for (int r = 1; r < size(); ++r)
        if (peers_[static_cast<size_t>(r)].fd < 0 && !(may_miss_start && may_miss_start(r)))
          missing += (missing.empty() ? "" : ", ") + who(r);
      if (!missing.empty())
        fail("control connections: {} did not connect to {} within {} s", missing, who(0), seconds(timeout_));
      // The ranks that may be missing are lost: named as any lost rank (an event), and taken back
      // when they connect (accept_rejoin).
      for (int r = 1; r < size(); ++r) {
        Peer& p = peers_[static_cast<size_t>(r)];
        if (p.fd >= 0) continue;
        p.lost = true;
        lost_.fetch_add(1, std::memory_order_release);
        events_.push_back({r, false,
                           fmt::format("{} did not join during start-up: no control connection within {} s (the "
                                       "process is stopped, slow to start, or died)",
                                       who(r), seconds(timeout_))});
      }
      break;
    }
  } else {
    std::istringstream in(text);
    int port = 0;
    in >> port;
    std::vector<std::string> addresses, loopback;
    for (std::string a; in >> a;)
      if (a.starts_with("key:")) job_key_ = from_hex(a.substr(4));
      else (a.starts_with("127.") ? loopback : addresses).push_back(a);
    if (job_key_.size() != kJobKeyBytes)
      fail("control connection: {} got no job key from {} (\"{}\"): is every task the same Tandem?", who(rank_), who(0),
           text.substr(0, 80));
    // On rank 0's machine, loopback first; elsewhere only its other addresses.
    if (hosts_[static_cast<size_t>(rank_)] == hosts_[0])
      addresses.insert(addresses.begin(), loopback.begin(), loopback.end());
    peers_.resize(1);
    // Rank 0 speaks first on a connection (its challenge); the hello answers it, sealed.
    std::string challenge;
    for (const std::string& a : addresses) {
      auto limit = std::min(timeout_, std::chrono::milliseconds(3000));
      peers_[0].fd = connect_to(a, port, limit);
      if (peers_[0].fd < 0) continue;
      challenge = read_exactly(peers_[0].fd, kChallengeBytes, limit);
      if (!challenge.empty()) break;
      close(peers_[0].fd);
      peers_[0].fd = -1;
    }
    if (peers_[0].fd < 0)
      fail("control connection: {} cannot reach {} at port {} on any of its addresses ({})", who(rank_), who(0), port,
           fmt::join(addresses, " "));
    std::string mine = random_bytes(kChallengeBytes);
    peers_[0].channel = Channel(job_key_, challenge, mine, false);
    int32_t me = rank_;
    write_all_blocking(
        peers_[0].fd, mine + peers_[0].channel.seal(frame(kHello, std::string(reinterpret_cast<const char*>(&me), 4))));
  }
  guard.armed = false;
  for (Peer& p : peers_) p.heard = Clock::now();
  ranks_.store(size(), std::memory_order_release);
  thread_ = std::thread([this] { run(); });
}

ControlPlane::~ControlPlane() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  // Strangers still waiting for their hello are refused as any other (named, then closed); past
  // the log's rate limit (refuse) the closing count takes in those not named one by one.
  for (Pending& p : pending_) refuse(p, "the job ended before its hello");
  pending_.clear();
  if (refused_ > kNamedRefusals)
    std::fprintf(stderr, "%s: %lld control connections refused in all\n", who(rank_).c_str(),
                 static_cast<long long>(refused_));
  for (Peer& p : peers_)
    if (p.fd >= 0) close(p.fd);
  if (listen_fd_ >= 0) close(listen_fd_);
}

std::string ControlPlane::who(int rank) const {
  if (rank >= size()) return fmt::format("rank {} (joined during the job)", rank);
  if (!names_.empty()) return names_[static_cast<size_t>(rank)];
  return fmt::format("rank {} (host {})", rank, host(rank));
}

std::string ControlPlane::set_phase(const std::string& phase) {
  std::string before;
  {
    std::lock_guard lock(mutex_);
    before = std::exchange(phases_[static_cast<size_t>(rank_)], phase);
  }
  beat_now_.store(true, std::memory_order_release);
  if (int signal = test_fault_signal(rank_, phase)) {
    say_phase_now();  // so that the others can name it
    raise(signal);
  }
  return before;
}

void ControlPlane::say_phase_now() {
  beat_now_.store(true, std::memory_order_release);
  int64_t beats = beats_.load(std::memory_order_acquire);
  for (int i = 0; i < 400 && beats_.load(std::memory_order_acquire) < beats + 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

std::string ControlPlane::phase() const { return phase_of(rank_); }

std::string ControlPlane::phase_of(int rank) const {
  std::lock_guard lock(mutex_);
  return rank >= 0 && rank < static_cast<int>(phases_.size()) ? phases_[static_cast<size_t>(rank)] : std::string();
}

std::vector<int64_t> ControlPlane::progress() const {
  std::lock_guard lock(mutex_);
  std::vector<int64_t> out = progress_;
  out[static_cast<size_t>(rank_)] = entered_.load(std::memory_order_relaxed);
  return out;
}

std::string ControlPlane::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void ControlPlane::report_failure(const std::string& message) { set_failure(message, true); }

void ControlPlane::set_failure(const std::string& message, bool tell_others, int origin) {
  if (origin < 0) origin = rank_;
  std::string shown = message;
  if (origin != rank_) {  // a peer's words: named as its, never as this rank's own
    shown = cleaned(message);
    if (!shown.starts_with(who(origin))) shown = fmt::format("{} reported: {}", who(origin), shown);
  }
  {
    std::lock_guard lock(mutex_);
    if (failed_) return;
    failure_ = shown;
    failure_origin_ = origin;
    failed_.store(true, std::memory_order_release);
    // Rank 0 relays to every rank, naming the rank whose words they are; another rank tells rank 0.
    auto origin_bytes = static_cast<int32_t>(origin);
    std::string payload = std::string(reinterpret_cast<const char*>(&origin_bytes), 4) + message;
    if (tell_others || rank_ == 0)
      for (Peer& p : peers_)
        if (p.fd >= 0) send_to(p, kFail, payload);
  }
  if (on_failure_) on_failure_(shown);
}

// Under mutex_. Records wait whole while the socket is full; past a bound (a peer that reads
// nothing, stopped) new ones are dropped whole: a beat or a table is sent again soon.
void ControlPlane::send_to(Peer& peer, uint32_t type, const std::string& payload) {
  constexpr size_t kMostQueued = 1 << 16;
  if (peer.out.size() > kMostQueued) return;
  peer.out += peer.channel.seal(frame(type, payload));
  flush(peer);
}

void ControlPlane::flush(Peer& peer) {
  while (!peer.out.empty() && peer.fd >= 0) {
    ssize_t n = ::send(peer.fd, peer.out.data(), peer.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) return;
    peer.out.erase(0, static_cast<size_t>(n));
  }
}

void ControlPlane::set_expendable(std::function<bool(int rank)> expendable) {
  std::lock_guard lock(mutex_);
  expendable_ = std::move(expendable);
}

std::vector<ControlPlane::Event> ControlPlane::take_events() {
  std::lock_guard lock(mutex_);
  return std::exchange(events_, {});
}

bool ControlPlane::lost(int rank) const {
  std::lock_guard lock(mutex_);
  if (rank_ != 0 || rank <= 0) return false;
  return rank >= static_cast<int>(peers_.size()) || peers_[static_cast<size_t>(rank)].lost;  // or never there
}

// On the control thread, rank 0: an expendable rank's connection closed or went silent.
bool ControlPlane::lose(int rank, const std::string& what) {
  std::lock_guard lock(mutex_);
  if (rank_ != 0 || !expendable_ || !expendable_(rank)) return false;
  Peer& p = peers_[static_cast<size_t>(rank)];
  if (p.fd >= 0) {
    // Told why first: a rank that goes on without having seen its own stop (one continued just
    // as it was named) reads this before the closed connection, and says so rather than take
    // the close for rank 0's death. (One that sees its stop says "was stopped for" first.)
    int32_t origin = 0;
    send_to(p, kFail, std::string(reinterpret_cast<const char*>(&origin), 4) + what + "; the job goes on without it");
    flush(p);
    close(p.fd);
  }
  p.fd = -1;
  p.raw.clear();
  p.in.clear();
  p.out.clear();
  p.lost = true;
  lost_.fetch_add(1, std::memory_order_release);
  events_.push_back({rank, false, what});
  return true;
}

void ControlPlane::run() {
  auto next_beat = Clock::now(), last_turn = Clock::now();
  std::vector<pollfd> fds;
  while (!stop_) {
    if (Clock::now() >= next_beat || beat_now_.exchange(false, std::memory_order_acq_rel)) {
      beat();
      next_beat = Clock::now() + interval_;
    }
    {
      std::lock_guard lock(mutex_);
      for (Peer& p : peers_) flush(p);
    }
    fds.clear();
    for (Peer& p : peers_) fds.push_back({p.fd, static_cast<short>(p.fd >= 0 ? POLLIN : 0), 0});
    // Rank 0 takes every connection, so that a stranger's is refused and named (only an expendable
    // rank may join after start-up: accept_rejoin).
    size_t listening = fds.size();
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const Pending& p : pending_) fds.push_back({p.fd, POLLIN, 0});
    int wait = static_cast<int>(
        std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - Clock::now()).count()));
    int ready = poll(fds.data(), fds.size(), std::min(wait, 50));
    // This process was stopped (SIGSTOP, a debugger) past the timeout: the others have ended the
    // job meanwhile; say so rather than blame them as their connections close.
    if (auto now = Clock::now(); now - last_turn > timeout_ && !failed())
      set_failure(fmt::format("{} was stopped for {:.1f} s{}: past the timeout, the others went on or ended without it",
                              who(rank_), std::chrono::duration<double>(now - last_turn).count(), during(phase())),
                  false);
    last_turn = Clock::now();
    if (ready > 0) {
      for (size_t i = 0; i < peers_.size(); ++i)
        if (fds[i].revents != 0 && !read_from(rank_ == 0 ? static_cast<int>(i) : 0, peers_[i])) {
          Peer& p = peers_[i];
          int from = rank_ == 0 ? static_cast<int>(i) : 0;
          {
            std::lock_guard lock(mutex_);
            close(p.fd);
            p.fd = -1;
          }
          if (p.left || stop_) continue;
          std::string what = fmt::format("{} died{}: its control connection closed (the process exited or was killed)",
                                         who(from), during(phase_of(from)));
          if (!lose(from, what)) set_failure(what, true);
        }
    }
    // Hellos first (pending_ as fds lists them), then the connection that came.
    if (!pending_.empty())
      for (Hello& hello : read_pending({fds.begin() + static_cast<std::ptrdiff_t>(listening) + 1, fds.end()}))
        accept_rejoin(std::move(hello));
    if (ready > 0 && fds[listening].revents != 0) accept_pending();
    check_silence();
    say_bye_when_due();
    count_finished();
  }
}

void ControlPlane::beat() {
  std::lock_guard lock(mutex_);
  beats_.fetch_add(1, std::memory_order_release);
  if (rank_ == 0) {
    progress_[0] = entered_.load(std::memory_order_relaxed);
    std::string table = encode_table(progress_, phases_);
    for (Peer& p : peers_)
      if (p.fd >= 0) send_to(p, kTable, table);
  } else if (peers_[0].fd >= 0) {
    send_to(peers_[0], kBeat, encode({entered_.load(std::memory_order_relaxed)}) + phases_[static_cast<size_t>(rank_)]);
  }
}

void ControlPlane::check_silence() {
  if (failed_) return;
  auto now = Clock::now();
  for (size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    // After MPI's end a peer that has left is still watched until it has finished.
    bool watched = !p.left || (finishing_.load(std::memory_order_acquire) && !p.finished);
    if (p.fd < 0 || !watched || now - p.heard <= timeout_) continue;
    int from = rank_ == 0 ? static_cast<int>(i) : 0;
    std::string what = fmt::format(
        "{} stopped answering{}: no beat on its control connection for {} s (the process is stopped, or its machine "
        "or network is down)",
        who(from), during(phase_of(from)), seconds(timeout_));
    if (lose(from, what)) continue;
    set_failure(what, true);
    return;
  }
}

// Reads what is there; false when the connection is closed.
bool ControlPlane::read_from(int from, Peer& peer) {
  char buffer[4096];
  bool open = true;
  for (;;) {
    ssize_t n = recv(peer.fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      open = false;  // closed: what it said before closing is read first (a failure it reported, its bye)
      break;
    }
    if (n < 0) break;
    peer.raw.append(buffer, static_cast<size_t>(n));
  }
  peer.heard = Clock::now();
  if (!peer.channel.open(peer.raw, peer.in)) open = false;  // not sealed under this job's key: closed
  while (peer.in.size() >= 8) {
    uint32_t type = 0, length = 0;
    std::memcpy(&type, peer.in.data(), 4);
    std::memcpy(&length, peer.in.data() + 4, 4);
    if (length > (1u << 20)) return false;  // not our protocol
    if (peer.in.size() < 8 + length) break;
    std::string payload = peer.in.substr(8, length);
    peer.in.erase(0, 8 + length);
    if (type == kBye && !peer.left) {
      peer.left = true;
      left_.fetch_add(1, std::memory_order_release);
    }
    if (type == kDone) peer.finished = true;
    handle(from, type, payload);
  }
  return open;
}

void ControlPlane::handle(int from, uint32_t type, const std::string& payload) {
  if (type == kFail && payload.size() >= 4) {
    // Rank 0 names the rank a report came from by its connection, whatever the report says; the
    // others take rank 0's word for whose words it relays.
    int32_t origin = from;
    if (rank_ != 0) std::memcpy(&origin, payload.data(), 4);
    if (origin < 0 || origin >= kMaxRanks) origin = from;
    set_failure(payload.substr(4), false, origin);
  } else if (type == kBeat && rank_ == 0 && payload.size() >= sizeof(int64_t)) {
    std::lock_guard lock(mutex_);
    std::memcpy(&progress_[static_cast<size_t>(from)], payload.data(), sizeof(int64_t));
    phases_[static_cast<size_t>(from)] = payload.substr(sizeof(int64_t), 64);
  } else if (type == kTable && payload.size() >= sizeof(int64_t)) {
    // Rank 0's count of ranks may be more than this rank's (ranks joined during the job).
    int64_t ranks = 0;
    std::memcpy(&ranks, payload.data(), sizeof ranks);
    if (ranks < 0 || ranks > kMaxRanks || payload.size() < (1 + static_cast<size_t>(ranks)) * sizeof(int64_t)) return;
    std::lock_guard lock(mutex_);
    size_t shared = std::min(progress_.size(), static_cast<size_t>(ranks));
    std::memcpy(progress_.data(), payload.data() + sizeof(int64_t), shared * sizeof(int64_t));
    std::istringstream phases(payload.substr((1 + static_cast<size_t>(ranks)) * sizeof(int64_t)));
    std::string phase;
    for (size_t r = 0; r < phases_.size() && std::getline(phases, phase); ++r)
      if (static_cast<int>(r) != rank_) phases_[r] = phase.substr(0, 64);
  } else if (type == kBye && rank_ == 0) {
    std::lock_guard lock(mutex_);
    progress_[static_cast<size_t>(from)] = -1;
  }
}

}  // namespace tandem::distribute::detail
