// The gradient reducer: grouped (one in-place all-reduce after backward), bucketed (during
// backward), ordered (an all-gather of every part's gradients, summed in part order) or none.
// Past 500 lines because the four policies share one set of packing and summing helpers and one
// device boundary (host copies in, sums back out), which a split would have to expose.
#include "distribute/gradient_reducer.h"

#include <algorithm>
#include <cstring>

#include "core/device_memory.h"
#include "core/vectorize.h"

namespace tandem::distribute {
namespace {

TANDEM_VECTORIZE void add_in_place_loop(float* out, const float* g, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) out[i] += g[i];
}
void add_in_place(float* out, const float* g, int64_t n) {
  core::vectorized([&] { add_in_place_loop(out, g, n); });
}

// Whether gradient i is contiguous and shares no memory with the others (backward may hand one
// tensor to two sources), so that it can be reduced in place.
bool owns_memory(const std::vector<Tensor>& grads, size_t i) {
  if (!grads[i].is_contiguous()) return false;
  const float* b = grads[i].data<float>();
  const float* e = b + grads[i].numel();
  for (size_t j = 0; j < grads.size(); ++j) {
    if (j == i) continue;
    const float* ob = grads[j].data<float>();
    if (b < ob + grads[j].numel() && ob < e) return false;
  }
  return true;
}

}  // namespace

template <class F>
void GradientReducer::for_each_tile(size_t i, const F& fn) const {
  int64_t in = sources_[i].dim(0), units = sources_[i].dim(1), step = ops::kernel_tile_rows(in, units);
  for (int64_t row = 0; row < in; row += step) fn(row, std::min(step, in - row), offsets_[i] + row * units);
}

GradientReducer::GradientReducer(GradientReduction policy, std::vector<Tensor> sources, std::vector<bool> as_products)
    : policy_(policy), sources_(std::move(sources)), as_products_(std::move(as_products)), sums_(sources_.size()) {
  if (!as_products_.empty() && as_products_.size() != sources_.size())
    fail("GradientReducer: {} flags for products, {} sources", as_products_.size(), sources_.size());
  size_t scratch = 0;
  for (size_t i = 0; i < sources_.size(); ++i) {
    const Tensor& s = sources_[i];
    offsets_.push_back(total_);
    total_ += s.numel();
    if (as_products_.empty() || !as_products_[i]) continue;
    if (policy_.kind != GradientReduction::Kind::Ordered || s.rank() != 2)
      fail("GradientReducer: source {} ({}) taken as products needs the ordered policy and a rank-2 kernel", i,
           s.shape().str());
    scratch = std::max(scratch, static_cast<size_t>(2 * ops::kernel_tile_rows(s.dim(0), s.dim(1)) * s.dim(1)));
  }
  any_products_ = std::find(as_products_.begin(), as_products_.end(), true) != as_products_.end();
  on_device_ = std::any_of(sources_.begin(), sources_.end(), [](const Tensor& s) {
    const core::DeviceMemory* memory = core::device_memory(s.device().kind);  // null: the host's own
    return memory != nullptr && !memory->host_accessible();
  });
  if (on_device_ && any_products_) fail("GradientReducer: products are taken on the host only, not on a device");
  if (as_products_.empty()) as_products_.assign(sources_.size(), false);
  scratch_.resize(scratch);
  constexpr int64_t kChunk = 4096;  // a gradient's values added while they stay in cache
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (as_products_[i]) {
      for_each_tile(i, [&](int64_t row, int64_t rows, int64_t at) { pieces_.push_back({i, row, rows, at}); });
      continue;
    }
    for (int64_t at = 0; at < sources_[i].numel(); at += kChunk)
      pieces_.push_back({i, 0, std::min(kChunk, sources_[i].numel() - at), offsets_[i] + at});
  }
  on_ready_ = [this](size_t i) { bucket_ready(i); };
}

// Part k's gradient i from its products, tile by tile, where pack would copy it.
void GradientReducer::pack_products(int k, size_t i, const ops::KernelProducts& products) {
  float* set = bucket_.data<float>() + k * total_;
  for_each_tile(i, [&](int64_t row, int64_t rows, int64_t at) {
    ops::kernel_products_tile(products, row, rows, sources_[i].dim(1), false, set + at, scratch_.data());
  });
}

void GradientReducer::reserve_sets(int sets) {
  if (sets == sets_) return;
  sets_ = sets;
  bucket_ = Tensor::empty({total_ * sets});
  reduced_.clear();
  for (size_t i = 0; i < sources_.size(); ++i)
    reduced_.push_back(bucket_.slice(offsets_[i], offsets_[i] + sources_[i].numel()).reshape(sources_[i].shape()));
}

void GradientReducer::begin(Communicator* comm, const BatchSplit& split, int replica, Timeline* timeline) {
  comm_ = comm;
  timeline_ = timeline;
  split_ = &split;
  replica_ = replica;
  added_ = 0;
  for (Tensor& sum : sums_) sum = Tensor();  // the last step's gradients go before backward makes new ones
  auto replicas = static_cast<int>(split.first_part.size()) - 1;
  if (policy_.kind == GradientReduction::Kind::Ordered) {
    int most = 1;
    for (int q = 0; q < replicas; ++q)
      most = std::max(most, split.first_part[static_cast<size_t>(q) + 1] - split.first_part[static_cast<size_t>(q)]);
    shared_ = comm != nullptr && comm->shares_memory();
    chained_ = !shared_ && comm != nullptr && comm->size() > 1 && comm->sends_to_every_rank();
    if (shared_) {
      parts_.resize(static_cast<size_t>(most));  // each part's list keeps its room from step to step
      products_.resize(static_cast<size_t>(most));
      for (std::vector<Tensor>& part : parts_) part.clear();
      std::vector<float>().swap(gathered_);
      sets_ = 0;  // no bucket: the sums are replica 0's buffer
      bucket_ = Tensor();
      return;
    }
    reserve_sets(most);
    if (chained_) std::vector<float>().swap(gathered_);  // the running sum travels instead
    else gathered_.resize(static_cast<size_t>(total_ * sets_ * replicas));
  }
  overlap_ = false;
  if (policy_.kind != GradientReduction::Kind::Bucketed) return;
  reserve_sets(1);  // the gradients are packed into buckets, during backward or after
  // Reducing during backward needs every replica to run backward on one part with rows; the
  // collectives then come in the same order on all of them.
  can_overlap_ = comm_ != nullptr && comm_->size() > 1 && split.parts() == replicas && !on_device_;
  for (int p = 0; can_overlap_ && p < split.parts(); ++p)
    can_overlap_ = split.begin(p) < split.end(p) && split.first_part[static_cast<size_t>(p)] == p;
}

const std::function<void(size_t)>* GradientReducer::ready(std::span<Tensor> out) {
  out_ = out;
  if (!can_overlap_) return nullptr;
  if (!overlap_) {
    overlap_ = true;
    done_.assign(sources_.size(), false);
    frontier_ = sources_.size();
    reduced_from_ = total_;
    if (policy_.cycle_time.count() > 0 && cuts_.empty()) {  // the first step: times taken for the cuts
      calibrating_ = true;
      cuts_.assign(sources_.size(), 0);
      ready_at_.resize(sources_.size());
    }
  }
  return &on_ready_;
}

void GradientReducer::pack(int k, size_t i, const Tensor& gradient) {
  Tensor c = gradient.contiguous();
  std::memcpy(bucket_.data<float>() + k * total_ + offsets_[i], c.data<float>(),
              static_cast<size_t>(c.numel()) * sizeof(float));
}

// Gradient i is final: into the bucket; every bucket_bytes completed from the end (the last
// layers finish first) are all-reduced while backward goes on with the earlier layers.
void GradientReducer::bucket_ready(size_t i) {
  pack(0, i, out_[i]);
  done_[i] = true;
  while (frontier_ > 0 && done_[frontier_ - 1]) --frontier_;
  int64_t from = frontier_ < sources_.size() ? offsets_[frontier_] : total_;
  int64_t bucket_floats = policy_.bucket_bytes / static_cast<int64_t>(sizeof(float));
  if (calibrating_) ready_at_[i] = std::chrono::steady_clock::now();
  if (reduced_from_ == from) return;  // nothing final next to what was sent
  bool cut = reduced_from_ - from >= bucket_floats || frontier_ == 0;
  for (size_t k = frontier_; !cut && k < cuts_.size() && offsets_[k] < reduced_from_; ++k) cut = cuts_[k] != 0;
  if (cut) {
    // Asynchronous where the communicator has a thread of its own (MPI): backward goes on.
    std::unique_ptr<Work> work = reduce_async(bucket_.data<float>() + from, reduced_from_ - from);
    if (comm_->runs_in_background()) in_flight_.push_back(std::move(work));
    else work->wait();
    reduced_from_ = from;
  }
}

// The cycle time's cuts, from the first step's times (rank 0's, so that every rank cuts the same
// buckets): walking the gradients in the order backward finished them, a bucket ends where it is
// full or where the next gradient came cycle_time or more after the bucket's first.
void GradientReducer::calibrate() {
  calibrating_ = false;
  if (sources_.empty()) return;  // nothing to cut (on every rank: the same model)
  std::vector<int64_t> cuts(sources_.size(), 0);
  int64_t bucket_floats = policy_.bucket_bytes / static_cast<int64_t>(sizeof(float)), filled = 0;
  auto opened = ready_at_.back();
  for (size_t k = sources_.size(); k-- > 0;) {
    if (filled == 0) opened = ready_at_[k];
    filled += sources_[k].numel();
    if (filled >= bucket_floats || (k > 0 && ready_at_[k - 1] - opened >= policy_.cycle_time)) {
      cuts[k] = 1;
      filled = 0;
    }
  }
  comm_->broadcast(std::span<int64_t>(cuts), 0);
  cuts_.assign(cuts.begin(), cuts.end());
}

std::unique_ptr<Work> GradientReducer::reduce_async(float* data, int64_t count) {
  if (policy_.compression != Compression::None)
    return comm_->all_reduce_compressed_async(data, count, ReduceOp::Sum, policy_.compression);
  return comm_->all_reduce_async(data, count, DataType::Float32, ReduceOp::Sum);
}

void GradientReducer::reduce_now(float* data, int64_t count) {
  if (policy_.compression != Compression::None)
    return comm_->all_reduce_compressed(data, count, ReduceOp::Sum, policy_.compression);
  comm_->all_reduce(data, count, DataType::Float32, ReduceOp::Sum);
}

void GradientReducer::add(int k, std::span<Tensor> grads, std::span<ops::KernelProducts> products) {
  ++added_;
  if (on_device_) {  // reduced on the host: the caller's tensors stay where backward wrote them
    staged_.resize(grads.size());
    for (size_t i = 0; i < grads.size(); ++i) staged_[i] = grads[i].defined() ? grads[i].to(Device::cpu()) : Tensor();
    grads = staged_;
  }
  if (policy_.kind == GradientReduction::Kind::Ordered) {
    if (any_products_ && products.size() != sources_.size())
      fail("GradientReducer: part {} came with {} products for {} sources", k, products.size(), sources_.size());
    if (shared_) {
      std::vector<Tensor>& part = parts_[static_cast<size_t>(k)];
      part.clear();
      for (size_t i = 0; i < grads.size(); ++i) part.push_back(as_products_[i] ? Tensor() : grads[i].contiguous());
      std::vector<ops::KernelProducts>& kept = products_[static_cast<size_t>(k)];
      kept.resize(sources_.size());
      for (size_t i = 0; i < sources_.size(); ++i)
        if (as_products_[i]) kept[i] = std::move(products[i]);
      return;
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      if (as_products_[i]) pack_products(k, i, products[i]);
      else pack(k, i, grads[i]);
    }
    return;
  }
  if (overlap_) return;                                     // packed during backward
  if (policy_.kind == GradientReduction::Kind::Bucketed) {  // packed now, parts summed
    float* set = bucket_.data<float>();
    for (size_t i = 0; i < grads.size(); ++i) {
      if (added_ == 1) {
        pack(0, i, grads[i]);
        continue;
      }
      Tensor g = grads[i].contiguous();
      add_in_place(set + offsets_[i], g.data<float>(), g.numel());
    }
    return;
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    if (added_ == 1) {
      sums_[i] = grads[i];
      continue;
    }
    if (!owns_memory(sums_, i)) sums_[i] = sums_[i].clone();
    Tensor g = grads[i].contiguous();
    add_in_place(sums_[i].data<float>(), g.data<float>(), g.numel());
  }
}

std::span<const Tensor> GradientReducer::finish() {
  std::span<const Tensor> sums = finish_on_host();
  if (!on_device_) return sums;
  placed_.clear();
  for (size_t i = 0; i < sums.size(); ++i) placed_.push_back(sums[i].to(sources_[i].device()));
  return placed_;
}

std::span<const Tensor> GradientReducer::finish_on_host() {
  if (policy_.kind == GradientReduction::Kind::Ordered) {
    ordered_finish();
    return reduced_;
  }
  if (overlap_) {
    {
      Timeline::Span span(in_flight_.empty() ? nullptr : timeline_, "wait");
      for (auto& work : in_flight_) work->wait();
      in_flight_.clear();
    }
    if (calibrating_) calibrate();
    return reduced_;
  }
  if (policy_.kind == GradientReduction::Kind::Bucketed) {
    bucketed_finish();
    return reduced_;
  }
  grouped_finish();
  return sums_;
}

// Bucketed, after backward: the packed set cut into buckets of bucket_bytes (whole gradients),
// each all-reduced (on the communicator's thread, where it has one) while the next is sent.
void GradientReducer::bucketed_finish() {
  float* set = bucket_.data<float>();
  if (added_ == 0) std::fill_n(set, total_, 0.0f);
  if (comm_ == nullptr || comm_->size() == 1) return;
  int64_t from = 0;
  for (size_t i = 0; i < offsets_.size(); ++i) {
    int64_t end = i + 1 < offsets_.size() ? offsets_[i + 1] : total_;
    if (end == total_ || (end - from) * static_cast<int64_t>(sizeof(float)) >= policy_.bucket_bytes) {
      if (from == 0 && end == total_) {  // one bucket: on this thread, no hand-off to wait for
        Timeline::Span span(timeline_, "wait");
        return reduce_now(set, total_);
      }
      in_flight_.push_back(reduce_async(set + from, end - from));
      from = end;
    }
  }
  Timeline::Span span(timeline_, "wait");
  for (auto& work : in_flight_) work->wait();
  in_flight_.clear();
}

// One collective over the gradients where backward left them (a replica with no rows: zeros).
void GradientReducer::grouped_finish() {
  if (added_ == 0)
    for (size_t i = 0; i < sources_.size(); ++i) sums_[i] = Tensor::zeros(sources_[i].shape());
  if (policy_.kind == GradientReduction::Kind::None || comm_ == nullptr || comm_->size() == 1) return;
  buffers_.clear();
  for (size_t i = 0; i < sums_.size(); ++i) {
    if (!owns_memory(sums_, i)) sums_[i] = sums_[i].clone();
    buffers_.emplace_back(sums_[i].data<float>(), static_cast<size_t>(sums_[i].numel()));
  }
  Timeline::Span span(timeline_, "wait");  // the training thread waits through the whole reduction
  if (policy_.compression == Compression::None) return comm_->all_reduce(buffers_, ReduceOp::Sum);
  packed_.resize(static_cast<size_t>(total_));
  float* at = packed_.data();
  for (std::span<float> b : buffers_) at = std::copy(b.begin(), b.end(), at);
  reduce_now(packed_.data(), total_);
  at = packed_.data();
  for (std::span<float> b : buffers_) {
    std::copy_n(at, b.size(), b.begin());
    at += b.size();
  }
}

// Every replica gets every part's gradients and sums them in part order into its first set.
void GradientReducer::ordered_finish() {
  if (shared_) return shared_finish();
  if (chained_) return chained_finish();
  const BatchSplit& split = *split_;
  float* bucket = bucket_.data<float>();
  auto replicas = static_cast<int>(split.first_part.size()) - 1;
  if (comm_ != nullptr) comm_->all_gather(bucket, sets_ * total_, gathered_.data(), DataType::Float32);
  else std::copy_n(bucket, sets_ * total_, gathered_.data());
  bool started = false;
  for (int q = 0; q < replicas; ++q) {
    int first = split.first_part[static_cast<size_t>(q)];
    for (int p = first; p < split.first_part[static_cast<size_t>(q) + 1]; ++p) {
      if (split.begin(p) == split.end(p)) continue;
      const float* g = gathered_.data() + (static_cast<int64_t>(q) * sets_ + (p - first)) * total_;
      if (!started) std::memcpy(bucket, g, static_cast<size_t>(total_) * sizeof(float));
      else add_in_place(bucket, g, total_);
      started = true;
    }
  }
  if (!started) std::fill_n(bucket, total_, 0.0f);
}

// Replica q receives the sum of every part before its own (in part order) from replica q - 1,
// adds its parts to it one by one, and hands it on; the last broadcasts the total. Each element is
// the same sequence of additions as ordered_finish's, so the bits are the same, but every replica
// reads only its own parts, and nothing is summed twice. The sum travels in chunks, so that the
// replicas fold one chunk while the next is on its way.
void GradientReducer::chained_finish() {
  const BatchSplit& split = *split_;
  float* bucket = bucket_.data<float>();
  int q = comm_->rank(), replicas = comm_->size();
  constexpr int kTag = 30001;
  constexpr int64_t kChunk = int64_t{1} << 16;
  running_.resize(static_cast<size_t>(total_) + 1);
  float* sum = running_.data();
  int first = split.first_part[static_cast<size_t>(q)], last = split.first_part[static_cast<size_t>(q) + 1];
  Timeline::Span span(timeline_, "wait");
  float begun = 0.0f;  // whether a part before (or of) this replica had rows: the same for every chunk
  for (int64_t from = 0; from < total_; from += kChunk) {
    int64_t n = std::min(kChunk, total_ - from);
    float* chunk = sum + from;
    if (q > 0) {
      comm_->recv(chunk, n, DataType::Float32, q - 1, kTag);
      if (from == 0) comm_->recv(&begun, 1, DataType::Float32, q - 1, kTag);
    }
    float now = begun;
    for (int p = first; p < last; ++p) {
      if (split.begin(p) == split.end(p)) continue;
      const float* g = bucket + static_cast<int64_t>(p - first) * total_ + from;
      if (now == 0.0f) std::memcpy(chunk, g, static_cast<size_t>(n) * sizeof(float));
      else add_in_place(chunk, g, n);
      now = 1.0f;
    }
    if (q + 1 < replicas) {
      comm_->send(chunk, n, DataType::Float32, q + 1, kTag);
      if (from == 0) comm_->send(&now, 1, DataType::Float32, q + 1, kTag);
    }
    if (from + n >= total_) begun = now;
  }
  running_[static_cast<size_t>(total_)] = begun;
  comm_->broadcast(running_.data(), total_ + 1, DataType::Float32, replicas - 1);
  if (running_[static_cast<size_t>(total_)] != 0.0f)
    std::memcpy(bucket, sum, static_cast<size_t>(total_) * sizeof(float));
  else std::fill_n(bucket, total_, 0.0f);
}

// Each element gets the additions ordered_finish gives it, in the same order (the first part with
// rows copied, the next ones added), so the bits are the same; but nothing is packed, sent or
// summed twice. The sums come in pieces (a kernel's tiles, a gradient's chunks of 4,096), each
// summed over every replica's parts, read in place, into replica 0's buffer, which every replica
// then reads. Replica r takes in turn the pieces that start in its slice of the elements, then
// those left in the other replicas' slices: a piece's bits do not depend on who sums it, and a
// replica that is slower (the small layers, or more of its reads from another core's cache) is
// helped at the end.
void GradientReducer::shared_finish() {
  const BatchSplit& split = *split_;
  int q = comm_->rank(), replicas = comm_->size();
  size_t sources = sources_.size();
  published_.grads.assign(parts_.size() * sources, nullptr);
  published_.products.assign(parts_.size() * sources, nullptr);
  for (size_t k = 0; k < parts_.size(); ++k)
    for (size_t i = 0; i < parts_[k].size(); ++i) {
      if (as_products_[i]) published_.products[k * sources + i] = &products_[k][i];
      else published_.grads[k * sources + i] = parts_[k][i].data<float>();
    }
  // A new buffer each step (the allocator's pool keeps it cheap): the replicas' views of the last
  // one may outlive the step.
  if (q == 0) published_.out = Tensor::empty({total_});
  published_.next.store(0, std::memory_order_relaxed);  // published by the all-gather's barrier
  Timeline::Span span(timeline_, "wait");
  auto mine = reinterpret_cast<int64_t>(&published_);
  tables_.resize(static_cast<size_t>(replicas));
  comm_->all_gather(&mine, 1, tables_.data(), DataType::Int64);  // after it every replica's parts are readable
  auto table = [&](int r) { return reinterpret_cast<const Published*>(tables_[static_cast<size_t>(r)]); };
  Tensor sums = table(0)->out;  // a replica's own handle, taken before the barrier
  float* out = sums.data<float>();
  // Replica r's parts p in part order, those with rows: fn(r, index of p among r's parts).
  auto for_each_part = [&](const auto& fn) {
    for (int r = 0; r < replicas; ++r) {
      int first = split.first_part[static_cast<size_t>(r)];
      for (int p = first; p < split.first_part[static_cast<size_t>(r) + 1]; ++p)
        if (split.begin(p) != split.end(p)) fn(r, static_cast<size_t>(p - first));
    }
  };
  auto sum_piece = [&](const Piece& piece) {
    // Named copies, not a structured binding: clang 14's lambdas cannot capture one.
    size_t i = piece.source;
    int64_t row = piece.row, count = piece.count, at = piece.at;
    bool started = false;
    if (as_products_[i]) {  // a tile, summed from the products
      int64_t units = sources_[i].dim(1);
      for_each_part([&](int r, size_t k) {
        ops::kernel_products_tile(*table(r)->products[k * sources + i], row, count, units, started, out + at,
                                  scratch_.data());
        started = true;
      });
      if (!started) std::fill_n(out + at, count * units, 0.0f);
      return;
    }
    int64_t within = at - offsets_[i];  // a chunk of `count` elements
    for_each_part([&](int r, size_t k) {
      const float* g = table(r)->grads[k * sources + i] + within;
      if (!started) std::memcpy(out + at, g, static_cast<size_t>(count) * sizeof(float));
      else add_in_place(out + at, g, count);
      started = true;
    });
    if (!started) std::fill_n(out + at, count, 0.0f);
  };
  // The first piece of replica r's slice.
  auto slice = [&](int r) {
    int64_t from = total_ * r / replicas;
    return std::partition_point(pieces_.begin(), pieces_.end(), [&](const Piece& p) { return p.at < from; }) -
           pieces_.begin();
  };
  for (int turn = 0; turn < replicas; ++turn) {
    int r = (q + turn) % replicas;
    int64_t first = slice(r), end = slice(r + 1);
    for (int64_t piece; (piece = first + table(r)->next.fetch_add(1, std::memory_order_relaxed)) < end;)
      sum_piece(pieces_[static_cast<size_t>(piece)]);
  }
  comm_->barrier();  // every piece summed; the parts may go
  for (std::vector<Tensor>& part : parts_) part.clear();
  for (std::vector<ops::KernelProducts>& kept : products_)
    for (ops::KernelProducts& p : kept) p = {};
  if (q == 0) published_.out = Tensor();
  reduced_.clear();
  for (size_t i = 0; i < sources; ++i)
    reduced_.push_back(sums.slice(offsets_[i], offsets_[i] + sources_[i].numel()).reshape(sources_[i].shape()));
}

std::vector<Tensor> reduce_replica_gradients(const ReplicaContext& replica, GradientReduction policy,
                                             std::span<const Tensor> gradients) {
  std::vector<Tensor> copies;
  for (size_t i = 0; i < gradients.size(); ++i) {
    if (gradients[i].dtype() != DType::Float32)
      fail("Optimizer::apply: gradient {} is {}; only float32 gradients are reduced over replicas", i,
           dtype_name(gradients[i].dtype()));
    copies.push_back(gradients[i].clone());
  }
  GradientReducer reducer(policy, copies);
  BatchSplit split;
  split.even(replica.num_replicas, replica.num_replicas, replica.num_replicas);
  reducer.begin(replica.communicator, split, replica.replica_id);
  reducer.add(0, copies);
  std::span<const Tensor> reduced = reducer.finish();
  return {reduced.begin(), reduced.end()};
}

}  // namespace tandem::distribute
