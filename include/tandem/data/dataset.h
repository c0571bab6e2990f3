#pragma once
// Dataset: a tf.data-style input pipeline. Each stage wraps the one before; iterating pulls
// elements through the stages. Everything random is keyed by (seed, epoch), so a pipeline gives
// the same elements in the same order every time it is run with the same seed.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/tensor.h"

namespace tandem::data {

// One element: its components, e.g. {features, label}.
using Element = std::vector<Tensor>;

class Iterator {
 public:
  virtual ~Iterator() = default;
  virtual std::optional<Element> next() = 0;  // nullopt at the end
};

class DatasetNode;

class Dataset {
 public:
  static constexpr int64_t kInfinite = -1;
  static constexpr int64_t kUnknown = -2;
  static constexpr int kAutotune = -1;

  // Element i is component[i] for each component: views, not copies.
  static Dataset from_tensor_slices(std::vector<Tensor> components);
  // `make_generator` is called at the start of every pass; its result yields elements until nullopt.
  using Generator = std::function<std::optional<Element>()>;
  static Dataset from_generator(std::function<Generator()> make_generator);

  // fn on every element; with parallel_calls > 1 (or kAutotune: one per core) on that many
  // threads, the output order still that of the input.
  Dataset map(std::function<Element(Element)> fn, int parallel_calls = 1) const;
  Dataset filter(std::function<bool(const Element&)> keep) const;
  // Keras/tf.data buffered shuffle: a buffer of `buffer_size` elements, each output drawn from it
  // at random. reshuffle_each_iteration: a new order each pass (keyed by seed and pass).
  Dataset shuffle(int64_t buffer_size, uint64_t seed = 0, bool reshuffle_each_iteration = true) const;
  // Stacks `size` elements along a new first axis; the last short batch is dropped or kept.
  Dataset batch(int64_t size, bool drop_remainder = false) const;
  Dataset repeat(int64_t count = kInfinite) const;
  Dataset take(int64_t count) const;
  Dataset skip(int64_t count) const;
  // Keeps the elements of the first full pass in memory (path "") or in a file that later passes,
  // and later processes, read instead of running the stages before it.
  Dataset cache(const std::string& path = "") const;
  // A background thread keeps up to `buffer` elements ready (kAutotune: 8).
  Dataset prefetch(int buffer = kAutotune) const;
  // Every num_shards-th element, starting at index.
  Dataset shard(int64_t num_shards, int64_t index) const;

  // Elements in one pass, kInfinite, or kUnknown (after filter or from_generator).
  int64_t cardinality() const;
  // Iterator over pass `epoch` (shuffles that reshuffle use it).
  std::unique_ptr<Iterator> iterate(int epoch = 0) const;
  // Every element of one pass, for tests and small data.
  std::vector<Element> collect(int epoch = 0) const;

  explicit Dataset(std::shared_ptr<const DatasetNode> node) : node_(std::move(node)) {}
  const std::shared_ptr<const DatasetNode>& node() const { return node_; }

 private:
  std::shared_ptr<const DatasetNode> node_;
};

class DatasetNode {
 public:
  virtual ~DatasetNode() = default;
  virtual std::unique_ptr<Iterator> iterate(int epoch) const = 0;
  virtual int64_t cardinality() const = 0;
};

}  // namespace tandem::data
