// The sequential stages of the input pipeline: sources, filter, shuffle, batch, repeat, take,
// skip, shard. (map, prefetch and cache are in dataset_threads.cpp and dataset_cache.cpp.)
#include <algorithm>
#include <cstring>

#include "tandem/data/dataset.h"
#include "tandem/random.h"

namespace tandem::data {
namespace {

template <typename Fn>
class LambdaIterator : public Iterator {
 public:
  explicit LambdaIterator(Fn fn) : fn_(std::move(fn)) {}
  std::optional<Element> next() override { return fn_(); }

 private:
  Fn fn_;
};

template <typename Fn>
std::unique_ptr<Iterator> make_iterator(Fn fn) {
  return std::make_unique<LambdaIterator<Fn>>(std::move(fn));
}

template <typename Iterate, typename Cardinality>
class LambdaNode : public DatasetNode {
 public:
  LambdaNode(Iterate it, Cardinality card) : it_(std::move(it)), card_(std::move(card)) {}
  std::unique_ptr<Iterator> iterate(int epoch) const override { return it_(epoch); }
  int64_t cardinality() const override { return card_(); }

 private:
  Iterate it_;
  Cardinality card_;
};

template <typename Iterate, typename Cardinality>
Dataset make_dataset(Iterate it, Cardinality card) {
  return Dataset(std::make_shared<LambdaNode<Iterate, Cardinality>>(std::move(it), std::move(card)));
}

Tensor row(const Tensor& t, int64_t i) { return t.row(i); }

}  // namespace

Dataset Dataset::from_tensor_slices(std::vector<Tensor> components) {
  if (components.empty()) fail("from_tensor_slices: no tensors given");
  for (size_t c = 0; c < components.size(); ++c) {
    if (!components[c].defined()) fail("from_tensor_slices: component {} is undefined", c);
    if (components[c].rank() < 1)
      fail("from_tensor_slices: component {} is a scalar; it needs a first axis to slice", c);
    components[c] = components[c].contiguous();
    if (components[c].dim(0) != components[0].dim(0))
      fail("from_tensor_slices: component {} has {} rows, component 0 has {}", c, components[c].dim(0),
           components[0].dim(0));
  }
  int64_t n = components[0].dim(0);
  return make_dataset(
      [components, n](int) {
        return make_iterator([components, n, i = int64_t{0}]() mutable -> std::optional<Element> {
          if (i >= n) return std::nullopt;
          Element e;
          e.reserve(components.size());
          for (const Tensor& c : components) e.push_back(row(c, i));
          ++i;
          return e;
        });
      },
      [n] { return n; });
}

Dataset Dataset::from_generator(std::function<Generator()> make_generator) {
  if (!make_generator) fail("from_generator: the generator factory is empty");
  return make_dataset([make_generator](int) { return make_iterator(make_generator()); }, [] { return kUnknown; });
}

Dataset Dataset::filter(std::function<bool(const Element&)> keep) const {
  auto up = node_;
  return make_dataset(
      [up, keep](int epoch) {
        return make_iterator([it = std::shared_ptr<Iterator>(up->iterate(epoch)), keep]() -> std::optional<Element> {
          while (auto e = it->next())
            if (keep(*e)) return e;
          return std::nullopt;
        });
      },
      [up] { return up->cardinality() == kInfinite ? kInfinite : kUnknown; });
}

Dataset Dataset::shuffle(int64_t buffer_size, uint64_t seed, bool reshuffle_each_iteration) const {
  if (buffer_size < 1) fail("shuffle: buffer_size must be at least 1, got {}", buffer_size);
  auto up = node_;
  return make_dataset(
      [up, buffer_size, seed, reshuffle_each_iteration](int epoch) {
        Philox rng(mix_seed(seed, 0x5u), reshuffle_each_iteration ? static_cast<uint64_t>(epoch) : 0);
        return make_iterator([it = std::shared_ptr<Iterator>(up->iterate(epoch)), buffer = std::vector<Element>(),
                              buffer_size, rng, draws = uint64_t{0}, done = false]() mutable -> std::optional<Element> {
          while (!done && static_cast<int64_t>(buffer.size()) < buffer_size) {
            auto e = it->next();
            if (!e) done = true;
            else buffer.push_back(std::move(*e));
          }
          if (buffer.empty()) return std::nullopt;
          uint64_t r = (uint64_t{rng.bits(2 * draws)} << 32) | rng.bits(2 * draws + 1);
          ++draws;
          size_t k = r % buffer.size();
          std::swap(buffer[k], buffer.back());
          Element out = std::move(buffer.back());
          buffer.pop_back();
          return out;
        });
      },
      [up] { return up->cardinality(); });
}

Dataset Dataset::batch(int64_t size, bool drop_remainder) const {
  if (size < 1) fail("batch: size must be at least 1, got {}", size);
  auto up = node_;
  return make_dataset(
      [up, size, drop_remainder](int epoch) {
        return make_iterator([it = std::shared_ptr<Iterator>(up->iterate(epoch)), size, drop_remainder,
                              index = int64_t{0}]() mutable -> std::optional<Element> {
          std::vector<Element> parts;
          while (static_cast<int64_t>(parts.size()) < size) {
            auto e = it->next();
            if (!e) break;
            parts.push_back(std::move(*e));
          }
          if (parts.empty() || (drop_remainder && static_cast<int64_t>(parts.size()) < size)) return std::nullopt;
          Element out;
          for (size_t c = 0; c < parts[0].size(); ++c) {
            const Tensor& first = parts[0][c];
            Shape shape{static_cast<int64_t>(parts.size())};
            for (int64_t d : first.shape()) shape.push_back(d);
            Tensor stacked = Tensor::empty(shape, first.dtype());
            size_t bytes = static_cast<size_t>(first.numel()) * dtype_size(first.dtype());
            auto* dst = static_cast<char*>(stacked.raw());
            for (size_t k = 0; k < parts.size(); ++k) {
              // Shuffled elements sit anywhere in memory: ask for a later one while copying this one.
              if (k + 4 < parts.size() && c < parts[k + 4].size()) {
                const char* ahead = static_cast<const char*>(parts[k + 4][c].raw());
                for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(ahead + off, 0, 1);
              }
              if (parts[k].size() != parts[0].size())
                fail("batch: element {} has {} components, element {} has {}", index + static_cast<int64_t>(k),
                     parts[k].size(), index, parts[0].size());
              const Tensor& t = parts[k][c];
              if (!(t.shape() == first.shape()) || t.dtype() != first.dtype())
                fail("batch: component {} of element {} is {}, element {} has {}; elements of a batch must match", c,
                     index + static_cast<int64_t>(k), to_string(t), index, to_string(first));
              std::memcpy(dst + k * bytes, t.contiguous().raw(), bytes);
            }
            out.push_back(std::move(stacked));
          }
          index += static_cast<int64_t>(parts.size());
          return out;
        });
      },
      [up, size, drop_remainder] {
        int64_t n = up->cardinality();
        if (n < 0) return n;
        return drop_remainder ? n / size : (n + size - 1) / size;
      });
}

Dataset Dataset::repeat(int64_t count) const {
  if (count < kInfinite) fail("repeat: count must be -1 (forever) or at least 0, got {}", count);
  auto up = node_;
  return make_dataset(
      [up, count](int epoch) {
        // Pass k of the repetition is upstream pass epoch·count + k, so shuffles differ per pass.
        return make_iterator([up, count, epoch, k = int64_t{0}, it = std::shared_ptr<Iterator>(),
                              empty_pass = true]() mutable -> std::optional<Element> {
          while (count == kInfinite || k < count) {
            if (!it) {
              it = up->iterate(static_cast<int>(epoch * (count == kInfinite ? 1 : count) + k));
              empty_pass = true;
            }
            if (auto e = it->next()) {
              empty_pass = false;
              return e;
            }
            it.reset();
            ++k;
            if (empty_pass && count == kInfinite) return std::nullopt;  // an empty dataset repeated forever is empty
          }
          return std::nullopt;
        });
      },
      [up, count] {
        int64_t n = up->cardinality();
        if (count == kInfinite) return n == 0 ? int64_t{0} : kInfinite;
        return n < 0 ? n : n * count;
      });
}

Dataset Dataset::take(int64_t count) const {
  if (count < 0) fail("take: count must be non-negative, got {}", count);
  auto up = node_;
  return make_dataset(
      [up, count](int epoch) {
        return make_iterator([it = std::shared_ptr<Iterator>(up->iterate(epoch)), count,
                              i = int64_t{0}]() mutable -> std::optional<Element> {
          if (i >= count) return std::nullopt;
          ++i;
          return it->next();
        });
      },
      [up, count] {
        int64_t n = up->cardinality();
        return n == kInfinite ? count : n == kUnknown ? kUnknown : std::min(n, count);
      });
}

Dataset Dataset::skip(int64_t count) const {
  if (count < 0) fail("skip: count must be non-negative, got {}", count);
  auto up = node_;
  return make_dataset(
      [up, count](int epoch) {
        return make_iterator([it = std::shared_ptr<Iterator>(up->iterate(epoch)), count,
                              skipped = false]() mutable -> std::optional<Element> {
          if (!skipped) {
            skipped = true;
            for (int64_t i = 0; i < count; ++i)
              if (!it->next()) return std::nullopt;
          }
          return it->next();
        });
      },
      [up, count] {
        int64_t n = up->cardinality();
        return n < 0 ? n : std::max<int64_t>(n - count, 0);
      });
}

Dataset Dataset::shard(int64_t num_shards, int64_t index) const {
  if (num_shards < 1) fail("shard: num_shards must be at least 1, got {}", num_shards);
  if (index < 0 || index >= num_shards) fail("shard: index {} out of range [0, {})", index, num_shards);
  auto up = node_;
  return make_dataset(
      [up, num_shards, index](int epoch) {
        return make_iterator([it = std::shared_ptr<Iterator>(up->iterate(epoch)), num_shards, index,
                              position = int64_t{0}]() mutable -> std::optional<Element> {
          while (auto e = it->next())
            if (position++ % num_shards == index) return e;
          return std::nullopt;
        });
      },
      [up, num_shards, index] {
        int64_t n = up->cardinality();
        return n < 0 ? n : (n - index + num_shards - 1) / num_shards;
      });
}

int64_t Dataset::cardinality() const { return node_->cardinality(); }

std::unique_ptr<Iterator> Dataset::iterate(int epoch) const { return node_->iterate(epoch); }

std::vector<Element> Dataset::collect(int epoch) const {
  if (cardinality() == kInfinite) fail("collect: the dataset is infinite (repeat() without a count)");
  std::vector<Element> out;
  auto it = iterate(epoch);
  while (auto e = it->next()) out.push_back(std::move(*e));
  return out;
}

}  // namespace tandem::data
