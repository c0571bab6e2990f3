// The communicator over MPI (tandem/collectives/mpi.h; the process's world and MPI's start and
// end are in mpi_world.cpp, the check of every call across the ranks in mpi_calls.cpp).
// Collectives run with MPI's blocking calls (Open MPI's tuned algorithms; float sums over 3 ranks
// or more, and compressed ones, with the rank-ordered sum of mpi_ordered_sum.cpp) in the order
// submitted: on a thread of the communicator, or on the caller while that thread is idle; callers
// wait with the timeout, watching the control plane. Point to point messages are posted by the
// caller (MPI_THREAD_MULTIPLE) and tested until done.
//
// One idea, kept whole past 500 lines: the communicator class, whose queue, thread, waits and
// calls share its private state; what stands apart already has its own file (the world, the
// ranks' call checks, the ordered sum).
#ifdef TANDEM_WITH_MPI
#include "collectives/mpi_communicator.h"

#include "collectives/mpi_calls.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "core/fault_hooks.h"
#include "tandem/error.h"
#include "tandem/timeline.h"

namespace tandem::distribute::detail {

namespace {

using Clock = std::chrono::steady_clock;

int to_int(int64_t count, const char* what) {
  if (count < 0 || count > INT_MAX) fail("MPI {}: {} values is out of range (0 to {})", what, count, INT_MAX);
  return static_cast<int>(count);
}

struct Op {
  Call call{};
  int64_t seq = 0;
  std::function<void()> run;
  void* data = nullptr;        // an all-reduce's values, an all-gather's output
  const void* send = nullptr;  // an all-gather's values
  bool done = false;
  std::exception_ptr error;
  Clock::time_point start, failure_seen;  // failure_seen: when a caller blocked in it saw the job fail
};

// Set by the synchronous forms: the operation may run on the calling thread.
thread_local bool run_here = false;
struct Here {
  Here() { run_here = true; }
  ~Here() { run_here = false; }
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::shared_ptr<ControlPlane> control, bool is_world)
      : comm_(comm), control_(std::move(control)), is_world_(is_world) {
    check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    check_mpi(MPI_Comm_group(comm_, &group_), "MPI_Comm_group");
    MPI_Comm local;
    check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    int found = 0;
    void* upper = nullptr;
    MPI_Comm_get_attr(comm_, MPI_TAG_UB, &upper, &found);
    tag_limit_ = found != 0 ? *static_cast<int*>(upper) : 32767;
    agreement_ = std::make_unique<CallAgreement>(
        comm_, [this](void* data, int64_t count, DataType dtype, ReduceOp op) { reduce(data, count, dtype, op); },
        [this](int rank) { return control_->who(world_rank(rank)); },
        [this](const std::string& message) { control_->report_failure(message); });
    thread_ = std::thread([this] { serve(); });
  }
  ~MpiCommunicator() override {
    bool in_mpi = false;
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      in_mpi = serving_;
    }
    changed_.notify_all();
    // A thread still inside MPI after a failure never returns: leave it to the process's exit.
    // Out of MPI it enters MPI no more once the job has failed (serve), and ends.
    if (control_->failed() && in_mpi) thread_.detach();
    else thread_.join();
    if (!control_->failed()) {
      MPI_Group_free(&group_);
      MPI_Comm_free(&comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  bool runs_in_background() const override { return true; }
  std::string set_phase(const std::string& phase) override { return control_->set_phase(phase); }
  void set_timeline(Timeline* timeline) override {
    std::lock_guard lock(mutex_);
    timeline_ = timeline;
  }

  // The synchronous forms run on the calling thread when the communication thread has nothing
  // to do (no hand-off to wait for); else they queue behind its work.
  void all_reduce(void* data, int64_t count, DataType dtype, ReduceOp op) override {
    Here here;
    all_reduce_async(data, count, dtype, op)->wait();
  }
  // Packed into a buffer kept from call to call (a fresh one each step would fault its pages in).
  void all_reduce(std::span<const std::span<float> > buffers, ReduceOp op) override {
    size_t total = 0;
    for (std::span<float> b : buffers) total += b.size();
    packed_.resize(total);
    float* at = packed_.data();
    for (std::span<float> b : buffers) at = std::copy(b.begin(), b.end(), at);
    all_reduce(packed_.data(), static_cast<int64_t>(total), DataType::Float32, op);
    at = packed_.data();
    for (std::span<float> b : buffers) {
      std::copy_n(at, b.size(), b.begin());
      at += b.size();
    }
  }
  void all_reduce_compressed(float* data, int64_t count, ReduceOp op, Compression wire) override {
    Here here;
    all_reduce_compressed_async(data, count, op, wire)->wait();
  }
  void reduce_scatter(const void* send, void* recv, int64_t recv_count, DataType dtype, ReduceOp op) override {
    Here here;
    reduce_scatter_async(send, recv, recv_count, dtype, op)->wait();
  }
  void all_gather(const void* send, int64_t count, void* recv, DataType dtype) override {
    Here here;
    all_gather_async(send, count, recv, dtype)->wait();
  }
  void broadcast(void* data, int64_t count, DataType dtype, int root) override {
    Here here;
    broadcast_async(data, count, dtype, root)->wait();
  }
  void barrier() override {
    Here here;
    barrier_async()->wait();
  }
  void send(const void* data, int64_t count, DataType dtype, int peer, int tag) override {
    send_async(data, count, dtype, peer, tag)->wait();
  }
  void recv(void* data, int64_t count, DataType dtype, int peer, int tag) override {
    recv_async(data, count, dtype, peer, tag)->wait();
  }

  std::unique_ptr<Work> all_reduce_async(void* data, int64_t count, DataType dtype, ReduceOp op) override {
    if (dtype == DataType::Int64 && op == ReduceOp::Mean) fail("all_reduce: the mean of int64 values is not defined");
    return submit(
        {int64_t(Kind::AllReduce), int64_t(dtype), count, int64_t(op)},
        [=, this] {
          reduce(data, count, dtype, op);
          if (op == ReduceOp::Mean) divide(data, count, dtype, size_);
        },
        data);
  }
  std::unique_ptr<Work> all_reduce_compressed_async(float* data, int64_t count, ReduceOp op,
                                                    Compression wire) override {
    if (wire == Compression::None) return all_reduce_async(data, count, DataType::Float32, op);
    if (op != ReduceOp::Sum && op != ReduceOp::Mean)
      fail("all_reduce with {} compression: only sum and mean are reduced compressed", compression_name(wire));
    return submit({int64_t(Kind::AllReduce), int64_t(DataType::Float32), count, int64_t(op) + 4 * int64_t(wire)},
                  [=, this] {
                    ordered_sum_.run(comm_, data, count, wire);
                    if (op == ReduceOp::Mean) {
                      divide(data, count, DataType::Float32, size_);
                      round_to_wire(data, count, wire);
                    }
                  });
  }
  std::unique_ptr<Work> reduce_scatter_async(const void* send, void* recv, int64_t recv_count, DataType dtype,
                                             ReduceOp op) override {
    if (dtype == DataType::Int64 && op == ReduceOp::Mean)
      fail("reduce_scatter: the mean of int64 values is not defined");
    to_int(recv_count * size_, "reduce_scatter");
    return submit({int64_t(Kind::ReduceScatter), int64_t(dtype), recv_count, int64_t(op)}, [=, this] {
      check_mpi(MPI_Reduce_scatter_block(send, recv, static_cast<int>(recv_count), mpi_type(dtype), mpi_op(op), comm_),
                "MPI_Reduce_scatter_block");
      if (op == ReduceOp::Mean) divide(recv, recv_count, dtype, size_);
    });
  }
  std::unique_ptr<Work> all_gather_async(const void* send, int64_t count, void* recv, DataType dtype) override {
    to_int(count * size_, "all_gather");
    return submit(
        {int64_t(Kind::AllGather), int64_t(dtype), count, 0},
        [=, this] {
          check_mpi(MPI_Allgather(send, static_cast<int>(count), mpi_type(dtype), recv, static_cast<int>(count),
                                  mpi_type(dtype), comm_),
                    "MPI_Allgather");
        },
        recv, send);
  }
  std::unique_ptr<Work> broadcast_async(void* data, int64_t count, DataType dtype, int root) override {
    if (root < 0 || root >= size_) fail("broadcast: root {} is not a rank of this group (0 to {})", root, size_ - 1);
    return submit({int64_t(Kind::Broadcast), int64_t(dtype), count, root}, [=, this] {
      auto* bytes = static_cast<char*>(data);
      for (int64_t at = 0; at < count;) {
        int n = static_cast<int>(std::min<int64_t>(count - at, 1 << 30));
        check_mpi(MPI_Bcast(bytes + at * static_cast<int64_t>(data_type_size(dtype)), n, mpi_type(dtype), root, comm_),
                  "MPI_Bcast");
        at += n;
      }
    });
  }
  std::unique_ptr<Work> barrier_async() override {
    return submit({int64_t(Kind::Barrier), 0, 0, 0}, [this] { check_mpi(MPI_Barrier(comm_), "MPI_Barrier"); });
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm out = MPI_COMM_NULL;
    submit({int64_t(Kind::Split), 0, 0, 0}, [&, this] {
      check_mpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out), "MPI_Comm_split");
    })->wait();
    if (out == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(out, control_, false);
  }

  void abort(const std::string& reason) override {
    control_->report_failure(fmt::format("{} failed: {}", control_->who(world_rank(rank_)), reason));
  }

  std::unique_ptr<Work> send_async(const void* data, int64_t count, DataType dtype, int peer, int tag) override {
    check_peer(peer, tag, "send");
    auto work = std::make_unique<PointToPoint>(*this, peer, fmt::format("send to rank {} (tag {})", peer, tag));
    work->header[0] = static_cast<int64_t>(dtype);
    work->header[1] = count;
    check_mpi(MPI_Isend(work->header, 2, MPI_INT64_T, peer, 2 * tag, comm_, &work->requests[0]), "MPI_Isend");
    test_fault("send", ++sends_);  // half a send out
    check_mpi(MPI_Isend(data, to_int(count, "send"), mpi_type(dtype), peer, 2 * tag + 1, comm_, &work->requests[1]),
              "MPI_Isend");
    return work;
  }
  std::unique_ptr<Work> recv_async(void* data, int64_t count, DataType dtype, int peer, int tag) override {
    check_peer(peer, tag, "recv");
    auto work = std::make_unique<PointToPoint>(*this, peer, fmt::format("recv from rank {} (tag {})", peer, tag));
    work->expect[0] = static_cast<int64_t>(dtype);
    work->expect[1] = count;
    check_mpi(MPI_Irecv(work->header, 2, MPI_INT64_T, peer, 2 * tag, comm_, &work->requests[0]), "MPI_Irecv");
    check_mpi(MPI_Irecv(data, to_int(count, "recv"), mpi_type(dtype), peer, 2 * tag + 1, comm_, &work->requests[1]),
              "MPI_Irecv");
    return work;
  }

 private:
  // A queued collective's handle.
  class Queued : public Work {
   public:
    Queued(MpiCommunicator& comm, std::shared_ptr<Op> op) : comm_(comm), op_(std::move(op)) {}
    void wait() override { comm_.wait(*op_); }
    bool done() const override {
      std::lock_guard lock(comm_.mutex_);
      return op_->done;
    }

   private:
    MpiCommunicator& comm_;
    std::shared_ptr<Op> op_;
  };

  // A posted send or receive: its header and payload requests, tested until both are done.
  class PointToPoint : public Work {
   public:
    PointToPoint(MpiCommunicator& comm, int peer, std::string what)
        : comm_(comm), peer_(peer), what_(std::move(what)) {}
    ~PointToPoint() override {
      if (!finished_ && !comm_.control_->failed())
        for (MPI_Request& r : requests)
          if (r != MPI_REQUEST_NULL) {
            MPI_Cancel(&r);
            MPI_Request_free(&r);
          }
    }
    void wait() override {
      if (finished_) return;
      auto deadline = Clock::now() + comm_.control_->timeout();
      int complete = 0;
      for (int spins = 0;; ++spins) {
        MPI_Status statuses[2];
        int code = MPI_Testall(2, requests, &complete, statuses);
        if (code != MPI_SUCCESS || complete != 0) break;
        if (comm_.control_->failed()) fail("{}: {}", what_, comm_.control_->failure());
        if (Clock::now() > deadline) comm_.timed_out(what_, -1);
        if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      finished_ = true;
      if (expect[0] >= 0 && (header[0] != expect[0] || header[1] != expect[1])) {
        std::string message =
            fmt::format("{}: expected {} {} values, rank {} sent {} {} values", what_, expect[1],
                        data_type_name(static_cast<DataType>(expect[0])), peer_, header[1],
                        header[0] >= 0 && header[0] <= 2 ? data_type_name(static_cast<DataType>(header[0])) : "?");
        comm_.control_->report_failure(message);
        fail("{}", message);
      }
      if (complete == 0) fail("{}: MPI reported an error", what_);
    }
    bool done() const override { return finished_; }
    int64_t header[2] = {0, 0};
    int64_t expect[2] = {-1, -1};
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};

   private:
    MpiCommunicator& comm_;
    int peer_;
    std::string what_;
    bool finished_ = false;
  };

  void check_peer(int peer, int tag, const char* what) const {
    if (peer < 0 || peer >= size_ || peer == rank_)
      fail("{}: peer {} is not another rank of this group (0 to {}, this is {})", what, peer, size_ - 1, rank_);
    if (tag < 0 || 2 * int64_t{tag} + 1 > tag_limit_)
      fail("{}: tag {} is out of range (0 to {})", what, tag, (tag_limit_ - 1) / 2);
  }

  // The tests' fault hook (core/fault_hooks.h; empty in the release programs).
  void test_fault(const char* kind, int64_t n) const {
    const fault_hooks::Hooks& hooks = fault_hooks::hooks();
    if (!hooks.message_signal) return;
    if (int signal = hooks.message_signal(world_rank(rank_), kind, n)) {
      control_->say_phase_now();  // the phase it dies in, as the others will name it
      raise(signal);
    }
  }
  int world_rank(int rank) const {
    if (is_world_) return rank;
    MPI_Group world_group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    int out = rank;
    MPI_Group_translate_ranks(group_, 1, &rank, world_group, &out);
    MPI_Group_free(&world_group);
    return out;
  }

  // Sums (a mean's too), minima or maxima in place over the ranks. Float sums over 3 ranks or more
  // are taken in rank order; over two (and min, max, int64) every order gives the same bits
  // (x0 + x1 = x1 + x0).
  void reduce(void* data, int64_t count, DataType dtype, ReduceOp op) {
    bool float_sum = dtype != DataType::Int64 && (op == ReduceOp::Sum || op == ReduceOp::Mean);
    if (float_sum && size_ > 2) {
      if (dtype == DataType::Float32) ordered_sum_.run(comm_, static_cast<float*>(data), count, Compression::None);
      else ordered_sum_.run(comm_, static_cast<double*>(data), count);
      return;
    }
    auto* bytes = static_cast<char*>(data);
    for (int64_t at = 0; at < count;) {  // MPI counts are ints: large buffers go in pieces
      int n = static_cast<int>(std::min<int64_t>(count - at, 1 << 30));
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, bytes + at * static_cast<int64_t>(data_type_size(dtype)), n,
                              mpi_type(dtype), mpi_op(op), comm_),
                "MPI_Allreduce");
      at += n;
    }
  }

  std::unique_ptr<Work> submit(Call call, std::function<void()> run, void* data = nullptr, const void* send = nullptr) {
    bool here = std::exchange(run_here, false);
    if (control_->failed()) fail("{}: {}", kind_name(static_cast<Kind>(call.kind)), control_->failure());
    auto op = std::make_shared<Op>();
    op->call = call;
    op->run = std::move(run);
    op->data = data;
    op->send = send;
    op->start = Clock::now();
    std::unique_lock lock(mutex_);
    op->seq = ++submitted_;
    test_fault("collective", op->seq);  // about to enter it
    if (is_world_) control_->entered(op->seq);
    test_fault("entered", op->seq);  // in it, the others told
    if (!here || !queue_.empty() || serving_) {
      queue_.push_back(op);
      lock.unlock();
      changed_.notify_all();
      return std::make_unique<Queued>(*this, std::move(op));
    }
    // On this thread, blocking in MPI: the communication thread watches the time meanwhile (it
    // looks at least once a second: no wake-up is paid per call).
    caller_op_ = op;
    Timeline* timeline = timeline_;
    lock.unlock();
    std::exception_ptr error;
    try {
      Timeline::Span span(timeline, kind_name(static_cast<Kind>(call.kind)), nullptr, bytes_of(call));
      agreement_->run(op->call, op->seq, op->data, op->send, op->run);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    caller_op_ = nullptr;
    op->done = true;
    op->error = error;
    bool queued = !queue_.empty();  // work submitted meanwhile waits for the communication thread
    lock.unlock();
    if (queued) changed_.notify_all();
    return std::make_unique<Queued>(*this, std::move(op));
  }

  // The communication thread: each collective after the exchange of what every rank passes.
  void serve() {
    for (;;) {
      std::shared_ptr<Op> op;
      Timeline* timeline = nullptr;
      {
        std::unique_lock lock(mutex_);
        for (;;) {
          if (caller_op_ == nullptr && (stop_ || !queue_.empty())) break;
          // While a caller blocks in MPI, watch its time: a collective that cannot complete is
          // reported to every rank, and a caller still inside MPI then can only be ended.
          if (caller_op_ != nullptr) watch_caller(lock);
          changed_.wait_for(lock, std::chrono::milliseconds(caller_op_ != nullptr ? 20 : 1000));
        }
        if (queue_.empty()) return;
        op = queue_.front();
        queue_.pop_front();
        serving_ = true;
        timeline = timeline_;
      }
      std::exception_ptr error;
      try {
        if (control_->failed())  // the other ranks may be gone: MPI would not return
          fail("{} #{}: {}", kind_name(static_cast<Kind>(op->call.kind)), op->seq, control_->failure());
        Timeline::Span span(timeline, kind_name(static_cast<Kind>(op->call.kind)), "communication", bytes_of(op->call));
        agreement_->run(op->call, op->seq, op->data, op->send, op->run);
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        op->done = true;
        op->error = error;
        op->run = nullptr;
        serving_ = false;
      }
      changed_.notify_all();
    }
  }

  // Under mutex_ (released meanwhile), while a caller blocks in MPI: past the timeout its
  // collective is reported to every rank (naming who has not entered it). Once the job has failed
  // (this or any cause) MPI cannot return from the call: after on_failure has had a second (the
  // CLI's ends the process), the job is ended with the message, rather than hang.
  void watch_caller(std::unique_lock<std::mutex>& lock) {
    std::shared_ptr<Op> op = caller_op_;
    auto now = Clock::now();
    if (!control_->failed()) {
      if (!past_deadline(*op)) return;
      lock.unlock();
      control_->report_failure(late_message(describe(op->call), op->seq));
      lock.lock();
      return;
    }
    if (op->failure_seen == Clock::time_point{}) {
      op->failure_seen = now;
    } else if (now > op->failure_seen + std::chrono::seconds(1)) {
      lock.unlock();
      std::fprintf(stderr, "error: %s\n", control_->failure().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  void wait(Op& op) {
    std::unique_lock lock(mutex_);
    while (!op.done) {
      if (control_->failed()) {
        lock.unlock();
        fail("{} #{}: {}", kind_name(static_cast<Kind>(op.call.kind)), op.seq, control_->failure());
      }
      if (past_deadline(op)) {
        lock.unlock();
        timed_out(describe(op.call), op.seq);
      }
      changed_.wait_for(lock, std::chrono::milliseconds(10));
    }
    if (op.error) std::rethrow_exception(op.error);
  }

  // Whether a collective has waited too long: the timeout, or where every rank has entered it
  // (one stopped inside it, which the control plane names within the timeout of its stop) twice
  // that, so that the stopped rank is named rather than MPI blamed.
  bool past_deadline(const Op& op) const {
    auto waited = Clock::now() - op.start;
    if (waited <= control_->timeout()) return false;
    if (waited > 2 * control_->timeout() || !is_world_ || op.seq <= 0) return true;
    std::vector<int64_t> progress = control_->progress();
    return std::any_of(progress.begin(), progress.end(), [&](int64_t at) { return at < op.seq; });
  }

  // Names the ranks that have not entered collective `seq` (the world's; -1: a message).
  [[noreturn]] void timed_out(const std::string& what, int64_t seq) {
    std::string message = late_message(what, seq);
    control_->report_failure(message);
    fail("{}", message);
  }
  std::string late_message(const std::string& what, int64_t seq) const {
    std::string late;
    if (is_world_ && seq > 0) {
      std::vector<int64_t> progress = control_->progress();
      for (int r = 0; r < size_; ++r) {
        int64_t at = progress[static_cast<size_t>(r)];
        if (at >= seq) continue;
        late += fmt::format(
            "{}{} {}", late.empty() ? "" : "; ", control_->who(r),
            at < 0 ? std::string("has finished")
                   : fmt::format("has not entered it (its last: #{}, during {})", at, control_->phase_of(r)));
      }
    }
    bool every_rank_in = is_world_ && seq > 0 && late.empty();  // then it waited twice the timeout (past_deadline)
    if (late.empty() && seq > 0) late = "every rank has entered it; MPI has not completed it";
    return fmt::format("{} waited {} s in {}{}: {}", control_->who(world_rank(rank_)),
                       static_cast<double>(control_->timeout().count()) / 1000.0 * (every_rank_in ? 2 : 1), what,
                       seq > 0 ? fmt::format(" (collective #{})", seq) : "",
                       late.empty() ? "the peer did not answer" : late);
  }

  MPI_Comm comm_;
  MPI_Group group_;
  std::shared_ptr<ControlPlane> control_;
  bool is_world_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, tag_limit_ = 32767;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Op> > queue_;
  int64_t submitted_ = 0;
  std::atomic<int64_t> sends_{0};             // point-to-point sends begun (the fault hook counts them)
  bool stop_ = false, serving_ = false;       // serving_: the communication thread is in an operation
  std::shared_ptr<Op> caller_op_;             // a synchronous one running on its caller's thread
  std::vector<float> packed_;                 // grouped all-reduces
  OrderedSum ordered_sum_;                    // float sums over 3 ranks or more, compressed sums
  std::unique_ptr<CallAgreement> agreement_;  // every call checked across the ranks (mpi_calls.h)
  Timeline* timeline_ = nullptr;              // under mutex_
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, std::shared_ptr<ControlPlane> control, bool world) {
  return std::make_unique<MpiCommunicator>(comm, std::move(control), world);
}

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail("MPI: {} failed: {}", what, std::string(text, static_cast<size_t>(length)));
}

}  // namespace tandem::distribute::detail

#endif
