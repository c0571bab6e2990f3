#pragma once
// Shared test helpers: seeded random tensors and llm.c-style comparison that reports the max
// difference and the first index outside atol + rtol·|reference|.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tandem/error.h"
#include "tandem/random.h"
#include "tandem/tensor.h"

namespace tandem::testing {

// What `f` throws as a tandem::Error, or "(no error)".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// That `f` throws a tandem::Error whose message holds `part`.
inline void expect_error(const std::function<void()>& f, const std::string& part) {
  std::string message = error_of(f);
  EXPECT_NE(message.find(part), std::string::npos) << message;
}

inline Tensor random_tensor(const Shape& shape, uint64_t seed, float low = -1.0f, float high = 1.0f) {
  Tensor t = Tensor::empty(shape);
  Philox rng(seed, 7);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = low + (high - low) * rng.uniform(static_cast<uint64_t>(i));
  return t;
}

// n rows of `features` random values, labelled i % classes in turn (int32).
struct LabelledRows {
  Tensor x, y;
};
inline LabelledRows labelled_rows(int64_t n, int64_t features, int32_t classes, uint64_t seed) {
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % classes);
  return {random_tensor({n, features}, seed), Tensor::from_vector({n}, std::span<const int32_t>(labels))};
}

// An IDX file's bytes (big-endian dims after the magic 0, 0, type, rank), as MNIST ships them.
inline std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& payload,
                                      uint8_t type = 0x08) {
  std::vector<uint8_t> b{0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

inline std::vector<double> to_double(const Tensor& t) {
  std::vector<float> f = t.to_vector();
  return std::vector<double>(f.begin(), f.end());
}

inline ::testing::AssertionResult all_close(const std::vector<double>& actual, const std::vector<double>& expected,
                                            double atol, double rtol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs expected " << expected.size();
  double max_diff = 0.0;
  long first_bad = -1;
  for (size_t i = 0; i < actual.size(); ++i) {
    double d = std::fabs(actual[i] - expected[i]);
    if (!(d <= atol + rtol * std::fabs(expected[i])) && first_bad < 0) first_bad = static_cast<long>(i);
    if (!(d <= max_diff)) max_diff = d;
  }
  if (first_bad >= 0)
    return ::testing::AssertionFailure() << "maxdiff = " << max_diff << ", first bad index " << first_bad << ": got "
                                         << actual[static_cast<size_t>(first_bad)] << ", expected "
                                         << expected[static_cast<size_t>(first_bad)];
  return ::testing::AssertionSuccess() << "OK, maxdiff = " << max_diff;
}

inline ::testing::AssertionResult all_close(const Tensor& actual, const std::vector<double>& expected, double atol,
                                            double rtol) {
  return all_close(to_double(actual), expected, atol, rtol);
}

// Expects `fn` to throw tandem::Error whose message contains every fragment.
template <typename Fn>
::testing::AssertionResult throws_error(Fn&& fn, std::vector<std::string> fragments) {
  try {
    fn();
  } catch (const tandem::Error& e) {
    std::string msg = e.what();
    for (const auto& f : fragments)
      if (msg.find(f) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << msg << "\" lacks \"" << f << "\"";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-tandem exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// A scratch directory removed at the end of the test.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline TempDir::TempDir() {
  char tmpl[] = "/tmp/tandem_test_XXXXXX";
  path_ = mkdtemp(tmpl);
}

inline TempDir::~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }

}  // namespace tandem::testing
