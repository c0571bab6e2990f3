// The pipeline stages that use threads: map with parallel calls (order kept) and prefetch.
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <utility>

#include "tandem/data/dataset.h"
#include "tandem/runtime.h"

namespace tandem::data {
namespace {

// A fixed set of worker threads taking jobs from a queue.
class WorkerPool {
 public:
  explicit WorkerPool(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~WorkerPool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (auto& w : workers_) w.join();
  }
  void submit(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    ready_.notify_one();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> workers_;
  bool stopping_ = false;
};

class ParallelMapIterator : public Iterator {
 public:
  ParallelMapIterator(std::unique_ptr<Iterator> up, std::function<Element(Element)> fn, int threads)
      : up_(std::move(up)), fn_(std::move(fn)), window_(2 * threads), pool_(threads) {}
  ~ParallelMapIterator() override {
    for (auto& f : pending_) f.wait();  // jobs refer to fn_: finish them before it goes
  }
  std::optional<Element> next() override {
    while (!done_ && static_cast<int>(pending_.size()) < window_) {
      auto e = up_->next();
      if (!e) {
        done_ = true;
        break;
      }
      auto task = std::make_shared<std::packaged_task<Element()>>(
          [this, el = std::move(*e)]() mutable { return fn_(std::move(el)); });
      pending_.push_back(task->get_future());
      pool_.submit([task] { (*task)(); });
    }
    if (pending_.empty()) return std::nullopt;
    std::future<Element> f = std::move(pending_.front());
    pending_.pop_front();
    return f.get();  // rethrows what fn threw, at this element's place
  }

 private:
  std::unique_ptr<Iterator> up_;
  std::function<Element(Element)> fn_;
  int window_;
  std::deque<std::future<Element>> pending_;
  bool done_ = false;
  WorkerPool pool_;
};

class SequentialMapIterator : public Iterator {
 public:
  SequentialMapIterator(std::unique_ptr<Iterator> up, std::function<Element(Element)> fn)
      : up_(std::move(up)), fn_(std::move(fn)) {}
  std::optional<Element> next() override {
    auto e = up_->next();
    if (!e) return std::nullopt;
    return fn_(std::move(*e));
  }

 private:
  std::unique_ptr<Iterator> up_;
  std::function<Element(Element)> fn_;
};

class MapNode : public DatasetNode {
 public:
  MapNode(std::shared_ptr<const DatasetNode> up, std::function<Element(Element)> fn, int threads)
      : up_(std::move(up)), fn_(std::move(fn)), threads_(threads) {}
  std::unique_ptr<Iterator> iterate(int epoch) const override {
    if (threads_ <= 1) return std::make_unique<SequentialMapIterator>(up_->iterate(epoch), fn_);
    return std::make_unique<ParallelMapIterator>(up_->iterate(epoch), fn_, threads_);
  }
  int64_t cardinality() const override { return up_->cardinality(); }

 private:
  std::shared_ptr<const DatasetNode> up_;
  std::function<Element(Element)> fn_;
  int threads_;
};

// Pulls from upstream on its own thread into a bounded queue.
class PrefetchIterator : public Iterator {
 public:
  PrefetchIterator(std::unique_ptr<Iterator> up, int buffer) : up_(std::move(up)), buffer_(buffer) {
    thread_ = std::thread([this] { produce(); });
  }
  ~PrefetchIterator() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  std::optional<Element> next() override {
    std::unique_lock lock(mutex_);
    if (queue_.empty() && !finished_) {
      consumer_waiting_ = true;
      changed_.wait(lock, [&] { return !queue_.empty() || finished_; });
      consumer_waiting_ = false;
    }
    if (queue_.empty()) {
      if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
      return std::nullopt;
    }
    Element e = std::move(queue_.front());
    queue_.pop_front();
    // Wake a producer sleeping on a full queue only once the queue is half empty: a notify is a
    // system call (and on a virtual machine a costly one); one per batch cost more than the work.
    if (producer_waiting_ && static_cast<int>(queue_.size()) <= buffer_ / 2) changed_.notify_all();
    return e;
  }

 private:
  void produce() {
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        if (!stopping_ && static_cast<int>(queue_.size()) >= buffer_) {
          producer_waiting_ = true;
          changed_.wait(lock, [&] { return stopping_ || static_cast<int>(queue_.size()) <= buffer_ / 2; });
          producer_waiting_ = false;
        }
        if (stopping_) break;
      }
      std::optional<Element> e;
      try {
        e = up_->next();
      } catch (...) {
        std::lock_guard lock(mutex_);
        error_ = std::current_exception();
        break;
      }
      std::lock_guard lock(mutex_);
      if (!e) break;
      queue_.push_back(std::move(*e));
      if (consumer_waiting_) changed_.notify_all();
    }
    std::lock_guard lock(mutex_);
    finished_ = true;
    changed_.notify_all();
  }
  std::unique_ptr<Iterator> up_;
  int buffer_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Element> queue_;
  std::exception_ptr error_;
  bool stopping_ = false, finished_ = false, producer_waiting_ = false, consumer_waiting_ = false;
  std::thread thread_;
};

class PrefetchNode : public DatasetNode {
 public:
  PrefetchNode(std::shared_ptr<const DatasetNode> up, int buffer) : up_(std::move(up)), buffer_(buffer) {}
  std::unique_ptr<Iterator> iterate(int epoch) const override {
    return std::make_unique<PrefetchIterator>(up_->iterate(epoch), buffer_);
  }
  int64_t cardinality() const override { return up_->cardinality(); }

 private:
  std::shared_ptr<const DatasetNode> up_;
  int buffer_;
};

}  // namespace

Dataset Dataset::map(std::function<Element(Element)> fn, int parallel_calls) const {
  if (!fn) fail("map: the function is empty");
  if (parallel_calls == kAutotune) parallel_calls = usable_cores();
  if (parallel_calls < 1) fail("map: parallel_calls must be at least 1 or AUTOTUNE (-1), got {}", parallel_calls);
  return Dataset(std::make_shared<MapNode>(node_, std::move(fn), parallel_calls));
}

Dataset Dataset::prefetch(int buffer) const {
  if (buffer == kAutotune) buffer = 8;
  if (buffer < 1) fail("prefetch: buffer must be at least 1 or AUTOTUNE (-1), got {}", buffer);
  return Dataset(std::make_shared<PrefetchNode>(node_, buffer));
}

}  // namespace tandem::data
