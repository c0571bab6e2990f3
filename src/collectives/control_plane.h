#pragma once
// The control connections of a job's processes, the one liveness mechanism of the MPI
// communicator (collectives/mpi.h) and of the parameter-server cluster
// (distribute/ps/cluster_link.h): every rank keeps a TCP connection to rank 0, sealed under the
// job's key (control_channel.h: a connection without it is refused, named once in the log), and
// beats on it with how far it has come (the world's collectives it has entered) and
// the phase of the job it is in (training, checkpoint writing, shutdown...); rank 0 answers with
// everyone's. A closed connection, a silent rank, or a failure reported by a rank ends the job on
// every rank: failed() becomes true everywhere with one message naming the rank and its phase.
// The watch lasts until every rank has left (leave_and_wait): a rank that stops during shutdown
// is named like one that stops mid-training.
#include <poll.h>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/control_channel.h"

namespace tandem::distribute::detail {

// The tests' fault hook (core/fault_hooks.h: TANDEM_TEST_FAULT=stop|kill:RANK:PHASE in the test
// programs and build/tandem-test; nothing in the release ones): the signal rank `rank` raises as
// it enters `phase` (0: none).
int test_fault_signal(int rank, const std::string& phase);

// The IPv4 addresses of this machine's interfaces that are up, loopback last.
std::vector<std::string> local_addresses();

// Whether a task's host is this machine's loopback ("localhost", 127.x.y.z, ::1).
bool is_loopback_host(const std::string& host);

// Where rank 0's control port listens, given every rank's host: 127.0.0.1 when every rank is on
// rank 0's host (or a loopback one); else rank 0's host resolved, where `bind_own_host` (a cluster
// spec names each task's address); else "" (every interface: MPI names machines, not addresses).
std::string listen_address(const std::vector<std::string>& hosts, bool bind_own_host);

class ControlPlane {
 public:
  // Broadcasts rank 0's text to all. On rank 0, an exchange that waits on the others calls
  // `meanwhile` between short waits: it takes the connections of the ranks that already have the
  // text, so that none waits on rank 0 for one that is slow (or stopped) to take it.
  using Exchange = std::function<void(std::string& rank0_text, const std::function<void()>& meanwhile)>;
  // Collective: rank 0 listens, `exchange` carries its port, the job's key and its addresses to
  // the others (a secret: carry it only where strangers cannot read), which connect; ranks
  // missing after `timeout` are named in the Error, except those `may_miss_start` names: each of
  // them is lost (an event, as set_expendable says), and may connect later.
  // `names`: how failures name each rank (empty: "rank R (host H)"). Rank 0 listens where
  // listen_address says (`bind_own_host`: the hosts are addresses a cluster spec gives).
  ControlPlane(int rank, std::vector<std::string> hosts, std::chrono::milliseconds timeout,
               std::function<void(const std::string&)> on_failure, const Exchange& exchange,
               std::vector<std::string> names = {}, bool bind_own_host = false,
               const std::function<bool(int rank)>& may_miss_start = {});
  ~ControlPlane();
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(hosts_.size()); }  // the ranks the job started with
  static constexpr int kMaxRanks = 1 << 16;
  const std::string& host(int rank) const { return hosts_[static_cast<size_t>(rank)]; }
  std::string who(int rank) const;  // "rank 2 (host node3)", or the rank's name
  std::chrono::milliseconds timeout() const { return timeout_; }

  // This rank has entered the world's collective number `seq` (1, 2, ...).
  void entered(int64_t seq) { entered_.store(seq, std::memory_order_relaxed); }
  // The latest collective each rank has entered, as last heard (-1: a rank that has left).
  std::vector<int64_t> progress() const;
  // The phase this rank is in (said in every beat, and in failures that name it); also where the
  // test hook (test_fault) stops or kills this rank.
  std::string set_phase(const std::string& phase);  // returns the phase before
  // For the tests' faults: waits (at most 2 s) until this rank's phase has gone out in a beat.
  void say_phase_now();
  std::string phase() const;
  // A rank's phase as last heard ("" when not heard yet).
  std::string phase_of(int rank) const;

  // Rank 0: the ranks `expendable` names may end without failing the job (the workers of an
  // asynchronous parameter-server job): one whose connection closes, or that goes silent past the
  // timeout, is lost (an event; its connection closed), and the same rank may connect again (a
  // restarted task) until this rank leaves. An expendable rank beyond those the job started with
  // may join too (a task added to a running job; ranks below kMaxRanks). The others see nothing
  // of it.
  void set_expendable(std::function<bool(int rank)> expendable);
  struct Event {
    int rank;
    bool joined;       // false: lost
    std::string what;  // a lost rank: how ("died during training: ...")
  };
  std::vector<Event> take_events();  // since the last call
  bool lost(int rank) const;         // rank 0: lost, or beyond every rank that has joined

  bool failed() const { return failed_.load(std::memory_order_acquire); }
  std::string failure() const;
  // A failure seen here: every rank learns it (the first one wins on each rank).
  void report_failure(const std::string& message);
  // Where the job failed here first (this rank's own words): waits, at most `most`, until the
  // other ranks' control connections have closed (rank 0: every other rank's; the others: rank
  // 0's), each having printed the failure as it exits.
  void linger_after_own_failure(std::chrono::milliseconds most);
  // Clean end, collective: says so to the others and waits (at most the timeout of silence from
  // any rank still expected) until every rank has come to it: rank 0 until all others have, the
  // others until rank 0 has. False when the job failed meanwhile (failure() says why).
  bool leave_and_wait();
  // After MPI's end, collective: every rank stays watched until it is out of MPI. Another rank
  // says so to rank 0 and waits for rank 0 to exit (its connection closes); rank 0 waits for every
  // other rank's word, then returns to exit. A rank that stops meanwhile is named as in any phase
  // (the job would otherwise wait on it forever). False when the job failed (failure() says why).
  bool finish_and_wait();

 private:
  struct Peer {
    int fd = -1;
    Channel channel;
    std::string raw;  // bytes received, not yet a whole record
    std::string in;   // records opened, not yet a whole message
    std::string out;  // records not yet sent (the socket was full)
    std::chrono::steady_clock::time_point heard;
    bool left = false;
    bool finished = false;  // said it is past MPI's end (kDone), or its connection closed after it left
    bool counted = false;   // in finished_
    bool lost = false;      // an expendable rank gone (rank 0)
  };
  void run();
  void beat();
  bool read_from(int rank, Peer& peer);
  void handle(int from, uint32_t type, const std::string& payload);
  void send_to(Peer& peer, uint32_t type, const std::string& payload);
  void flush(Peer& peer);
  // `origin`: the rank whose words `message` are (-1: this rank's): another's are shown cleaned
  // and named ("worker:1 (...) reported: ..."), unless they begin with that rank's name.
  void set_failure(const std::string& message, bool tell_others, int origin = -1);
  void check_silence();
  void say_bye_when_due();
  void count_finished();
  bool lose(int rank, const std::string& what);  // an expendable rank: lost, and true
  // Connections whose hello has not come yet (rank 0): each read as bytes arrive, closed past its
  // deadline or past kMaxPending of them, so that no stranger holds the control thread up.
  struct Pending {
    int fd = -1;
    std::chrono::steady_clock::time_point until;
    std::string challenge, in, from;  // from: "HOST:PORT"
  };
  static constexpr size_t kMaxPending = 64;
  void accept_pending();
  // Rank 0's start-up: one wait of at most `wait_ms` for connections and hellos; the ranks whose
  // hello came take their place. Returns how many did.
  int take_joins(int wait_ms);
  struct Hello {
    int fd;
    int32_t rank;
    Channel channel;
  };
  // The pending connections that `ready` (poll's results for them, in order) says have bytes:
  // each whole hello that opens under the job's key; the others closed (and named: refuse) once
  // they fail to open, close or are late.
  std::vector<Hello> read_pending(const std::vector<pollfd>& ready);
  void refuse(Pending& p, const std::string& why);
  // Refusals named one by one in the log: the first ten, then every thousandth (the destructor
  // counts them all when any went unnamed).
  static constexpr int64_t kNamedRefusals = 10;
  void accept_rejoin(Hello hello);
  int rank_;
  std::vector<std::string> hosts_, names_;
  std::chrono::milliseconds timeout_, interval_;
  std::function<void(const std::string&)> on_failure_;
  int listen_fd_ = -1;
  std::string job_key_;
  int64_t refused_ = 0;           // control thread
  std::vector<Pending> pending_;  // rank 0, control thread (start-up: the constructor's)
  std::vector<Peer> peers_;       // rank 0: one per other rank; others: [0] is rank 0
  std::atomic<int64_t> entered_{0};
  std::atomic<int> left_{0};             // peers whose bye has come
  std::atomic<int> finished_{0};         // peers finished (Peer::finished)
  std::atomic<int> lost_{0};             // expendable peers lost and not back (joined ones never there counted)
  std::atomic<int> ranks_{0};            // rank 0: every rank, those joined during the job included
  std::function<bool(int)> expendable_;  // under mutex_
  std::vector<Event> events_;            // under mutex_
  std::atomic<bool> finishing_{false}, said_done_{false};
  std::atomic<int64_t> beats_{0};
  mutable std::mutex mutex_;  // progress_, failure_, sends
  std::vector<int64_t> progress_;
  std::vector<std::string> phases_;  // each rank's, as last heard; this rank's own
  std::string failure_;
  int failure_origin_ = -1;  // the rank whose words failure_ is
  std::atomic<bool> failed_{false}, stop_{false}, leaving_{false}, said_bye_{false}, beat_now_{false};
  std::thread thread_;
};

}  // namespace tandem::distribute::detail
