// What every communicator shares: the data types, the packing grouped all-reduce and the
// asynchronous forms run through the synchronous ones.
#include "tandem/collectives/communicator.h"

#include <bit>
#include <cmath>
#include <exception>
#include <functional>
#include <utility>

#include "tandem/error.h"

namespace tandem::distribute {
namespace {

// An operation already run: wait() rethrows what it threw.
class Finished : public Work {
 public:
  explicit Finished(const std::function<void()>& run) {
    try {
      run();
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  void wait() override {
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  bool done() const override { return true; }

 private:
  std::exception_ptr error_;
};

// An operation run by the first wait() (a receive, which must not block the caller before it).
class Deferred : public Work {
 public:
  explicit Deferred(std::function<void()> run) : run_(std::move(run)) {}
  void wait() override {
    if (run_) std::exchange(run_, nullptr)();
  }
  bool done() const override { return !run_; }

 private:
  std::function<void()> run_;
};

}  // namespace

size_t data_type_size(DataType dtype) { return dtype == DataType::Float32 ? 4 : 8; }

const char* data_type_name(DataType dtype) {
  switch (dtype) {
    case DataType::Float32: return "float32";
    case DataType::Float64: return "float64";
    case DataType::Int64: return "int64";
  }
  return "unknown";
}

namespace {

// IEEE half from float32, rounding to nearest, ties to even.
uint16_t half_of(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;                    // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;                   // 65520 and above (and inf): inf
  if (a < 0x38800000u) {                                         // below 2^-14: a subnormal half, in units of 2^-24
    float units = std::bit_cast<float>(a) * 16777216.0f;         // exact
    return sign | static_cast<uint16_t>(std::nearbyint(units));  // 1024 is the smallest normal: right too
  }
  a += 0xfffu + ((a >> 13) & 1u);  // round the 13 dropped bits; a carry moves into the exponent
  return sign | static_cast<uint16_t>((a - 0x38000000u) >> 13);
}

float float_of_half(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m × 2^-24
    return sign != 0 ? -v : v;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t bfloat_of(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN stays NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace

const char* compression_name(Compression wire) {
  switch (wire) {
    case Compression::None: return "none";
    case Compression::Float16: return "fp16";
    case Compression::BFloat16: return "bf16";
  }
  return "unknown";
}

void to_wire(const float* data, int64_t n, Compression wire, uint16_t* codes) {
  if (wire == Compression::Float16)
    for (int64_t i = 0; i < n; ++i) codes[i] = half_of(data[i]);
  else
    for (int64_t i = 0; i < n; ++i) codes[i] = bfloat_of(data[i]);
}

void from_wire(const uint16_t* codes, int64_t n, Compression wire, float* data) {
  if (wire == Compression::Float16)
    for (int64_t i = 0; i < n; ++i) data[i] = float_of_half(codes[i]);
  else
    for (int64_t i = 0; i < n; ++i) data[i] = std::bit_cast<float>(static_cast<uint32_t>(codes[i]) << 16);
}

void round_to_wire(float* data, int64_t n, Compression wire) {
  if (wire == Compression::Float16)
    for (int64_t i = 0; i < n; ++i) data[i] = float_of_half(half_of(data[i]));
  else if (wire == Compression::BFloat16)
    for (int64_t i = 0; i < n; ++i) data[i] = std::bit_cast<float>(static_cast<uint32_t>(bfloat_of(data[i])) << 16);
}

std::unique_ptr<Work> Communicator::all_reduce_compressed_async(float* data, int64_t count, ReduceOp op,
                                                                Compression wire) {
  if (wire != Compression::None && op != ReduceOp::Sum && op != ReduceOp::Mean)
    fail("all_reduce with {} compression: only sum and mean are reduced compressed", compression_name(wire));
  return std::make_unique<Finished>([=, this] {
    round_to_wire(data, count, wire);
    all_reduce(data, count, DataType::Float32, op);
    round_to_wire(data, count, wire);
  });
}

void Communicator::all_reduce(std::span<const std::span<float>> buffers, ReduceOp op) {
  std::vector<float> packed;
  for (std::span<float> b : buffers) packed.insert(packed.end(), b.begin(), b.end());
  all_reduce(packed.data(), static_cast<int64_t>(packed.size()), DataType::Float32, op);
  size_t at = 0;
  for (std::span<float> b : buffers) {
    std::copy_n(packed.begin() + static_cast<std::ptrdiff_t>(at), b.size(), b.begin());
    at += b.size();
  }
}

std::unique_ptr<Work> Communicator::all_reduce_async(void* data, int64_t count, DataType dtype, ReduceOp op) {
  return std::make_unique<Finished>([&] { all_reduce(data, count, dtype, op); });
}
std::unique_ptr<Work> Communicator::reduce_scatter_async(const void* send, void* recv, int64_t recv_count,
                                                         DataType dtype, ReduceOp op) {
  return std::make_unique<Finished>([&] { reduce_scatter(send, recv, recv_count, dtype, op); });
}
std::unique_ptr<Work> Communicator::all_gather_async(const void* send, int64_t count, void* recv, DataType dtype) {
  return std::make_unique<Finished>([&] { all_gather(send, count, recv, dtype); });
}
std::unique_ptr<Work> Communicator::broadcast_async(void* data, int64_t count, DataType dtype, int root) {
  return std::make_unique<Finished>([&] { broadcast(data, count, dtype, root); });
}
std::unique_ptr<Work> Communicator::send_async(const void* data, int64_t count, DataType dtype, int peer, int tag) {
  return std::make_unique<Finished>([&] { send(data, count, dtype, peer, tag); });
}
std::unique_ptr<Work> Communicator::recv_async(void* data, int64_t count, DataType dtype, int peer, int tag) {
  return std::make_unique<Deferred>([=, this] { recv(data, count, dtype, peer, tag); });
}
std::unique_ptr<Work> Communicator::barrier_async() {
  return std::make_unique<Finished>([&] { barrier(); });
}

}  // namespace tandem::distribute
