#pragma once
// One replica's gradients through a training step, reduced over the replicas by the strategy's
// policy (GradientReduction): the step hands it each of the replica's parts' gradients (and, for
// the bucketed policy, each gradient as backward finishes it); finish() gives the reduced sums.
#include <atomic>
#include <chrono>
#include <functional>
#include <span>
#include <vector>

#include "tandem/autograd.h"
#include "tandem/distribute/strategy.h"
#include "tandem/ops.h"
#include "tandem/timeline.h"

namespace tandem::distribute {

class GradientReducer {
 public:
  // `sources`: the replica's trainable variables' tensors, in order. `as_products` (ordered
  // policy; empty: none): the sources whose gradients add() is given as dense's deferred products
  // instead (rank-2 kernels), summed over the parts tile by tile (ops::kernel_products_tile).
  GradientReducer(GradientReduction policy, std::vector<Tensor> sources, std::vector<bool> as_products = {});
  // A step starts: this replica (of `comm`'s group; null: the only one) computes its parts of
  // `split`; time spent waiting for reductions is recorded in `timeline` (null: nowhere).
  void begin(Communicator* comm, const BatchSplit& split, int replica, Timeline* timeline = nullptr);
  // For backward (GradientTape::gradient's `ready`, writing into `out`): packs and reduces
  // gradients as they are finished while backward goes on; null when they are reduced after
  // backward (the policy, or a step where the replicas' parts do not allow it). Not asked: the
  // gradients add() is given are packed and reduced after backward.
  const std::function<void(size_t)>* ready(std::span<Tensor> out);
  // The gradients of the replica's k-th part (one per source; the reducer may keep the tensors);
  // for the sources taken as products, their products instead (`products`, one per source, kept
  // until finish).
  void add(int k, std::span<Tensor> grads, std::span<ops::KernelProducts> products = {});
  // Every part added: the gradients summed over every part of every replica (None: this
  // replica's own), one per source, on its source's device.
  std::span<const Tensor> finish();

 private:
  std::span<const Tensor> finish_on_host();
  void reserve_sets(int sets);
  std::unique_ptr<Work> reduce_async(float* data, int64_t count);
  void reduce_now(float* data, int64_t count);
  void calibrate();
  void pack(int k, size_t i, const Tensor& gradient);
  void pack_products(int k, size_t i, const ops::KernelProducts& products);
  // Source i's tiles (ops::kernel_tile_rows) in order: fn(first row, rows, first element).
  template <class F>
  void for_each_tile(size_t i, const F& fn) const;
  void bucket_ready(size_t i);
  void grouped_finish();
  void bucketed_finish();
  void ordered_finish();
  // The same sum handed along the replicas: each folds its parts onto the running sum the one
  // before sends it, the last gives the total to all.
  void chained_finish();
  // The same sum where the replicas share memory: each sums pieces of the elements (those of its
  // slice, then any left in the others') over every replica's parts, read where backward left
  // them, into one buffer every replica reads.
  void shared_finish();
  GradientReduction policy_;
  std::vector<Tensor> sources_;
  // Sources off the host (a replica on a device): its gradients are copied to the host as add()
  // takes them (staged_), reduced there after backward, and the sums copied back (placed_).
  bool on_device_ = false;
  std::vector<Tensor> staged_, placed_;
  std::vector<bool> as_products_;  // per source
  bool any_products_ = false;
  std::vector<float> scratch_;    // kernel_products_tile's
  std::vector<int64_t> offsets_;  // of each gradient in a set
  int64_t total_ = 0;             // floats of one set
  Communicator* comm_ = nullptr;
  const BatchSplit* split_ = nullptr;
  int replica_ = 0, sets_ = 0;
  bool can_overlap_ = false;     // bucketed, and every replica runs backward on one part with rows
  bool overlap_ = false;         // reducing during backward this step (ready() was asked)
  int added_ = 0;                // parts with rows added this step
  Tensor bucket_;                // sets_ sets of every gradient back to back (ordered, bucketed)
  std::vector<Tensor> reduced_;  // views of the bucket's first set
  std::vector<Tensor> sums_;     // grouped, none: the gradients where backward left them
  std::vector<float> gathered_;  // ordered: every replica's sets
  std::vector<float> running_;   // chained: the running sum, then whether it has begun
  bool chained_ = false;         // ordered, on a group whose send reaches every rank
  bool shared_ = false;          // ordered, on a group in this process (shared_finish)
  // Shared: this replica's parts' gradients (kept, not packed), and what it publishes of them.
  std::vector<std::vector<Tensor>> parts_;
  std::vector<std::vector<ops::KernelProducts>> products_;  // per part, per source (as_products_)
  struct Published {
    std::vector<const float*> grads;                   // [k · sources + i]: part k's gradient i, null without rows
    std::vector<const ops::KernelProducts*> products;  // [k · sources + i], for the sources taken so
    Tensor out;                                        // replica 0's: the sums, each replica summing pieces into it
    // The next piece of this replica's slice to sum, taken by any replica; on a cache line of its
    // own (the other fields are read for every piece; the alignment pads the struct's end too).
    alignas(64) mutable std::atomic<int64_t> next{0};
  };
  // Shared: the pieces of the sums the replicas take in turn, in order of the sources: a kernel's
  // tiles (count rows from row) and the other gradients' chunks (count elements), each at element at.
  struct Piece {
    size_t source;
    int64_t row, count, at;
  };
  std::vector<Piece> pieces_;
  Published published_;
  std::vector<int64_t> tables_;  // every replica's Published, by address
  std::vector<std::span<float>> buffers_;
  // Bucketed: sources [frontier_, n) packed; bucket [reduced_from_, total_) all-reduced.
  std::vector<bool> done_;
  size_t frontier_ = 0;
  int64_t reduced_from_ = 0;
  std::vector<std::unique_ptr<Work>> in_flight_;  // bucket all-reduces not yet waited for
  // The cycle time: cuts_[k] = 1 ends a bucket at source k (set after the first step, which
  // times when backward finished each gradient, ready_at_).
  std::vector<char> cuts_;
  std::vector<std::chrono::steady_clock::time_point> ready_at_;
  bool calibrating_ = false;   // when the bucket being filled got its first gradient
  std::vector<float> packed_;  // grouped, compressed: every gradient
  Timeline* timeline_ = nullptr;
  std::span<Tensor> out_;
  std::function<void(size_t)> on_ready_;
};

// The gradients a custom loop hands to Optimizer::apply on one replica (the caller's tensors:
// reduced on copies), reduced over the replicas by `policy` as a step of one part per replica.
std::vector<Tensor> reduce_replica_gradients(const ReplicaContext& replica, GradientReduction policy,
                                             std::span<const Tensor> gradients);

}  // namespace tandem::distribute
