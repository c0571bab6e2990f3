// The parameter-server wire format (wire.h).
#include "distribute/ps/wire.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "tandem/error.h"

namespace tandem::distribute::ps {
namespace {

// Header layout: magic u32 | version u16 | type u16 | variable u32 | shard u32 | step i64 | aux i64 |
// dtype u8 | rank u8 | 6 reserved bytes | dims i64 × 6 | payload length u64  (= 96 bytes)
template <class T>
void put(char* at, T value) {
  std::memcpy(at, &value, sizeof value);  // little-endian hosts only (checked at build)
}
template <class T>
T get(const char* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}
static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

}  // namespace

const char* message_type_name(MessageType type) {
  switch (type) {
    case MessageType::Pull: return "pull";
    case MessageType::Values: return "values";
    case MessageType::Push: return "push";
    case MessageType::Pushed: return "pushed";
    case MessageType::Init: return "init";
    case MessageType::Ready: return "ready";
    case MessageType::Step: return "step";
    case MessageType::Result: return "result";
    case MessageType::Fetch: return "fetch";
    case MessageType::State: return "state";
    case MessageType::Stop: return "stop";
    case MessageType::Refused: return "refused";
    case MessageType::Abort: return "abort";
    case MessageType::Aborted: return "aborted";
    case MessageType::Journal: return "journal";
    case MessageType::CloseRound: return "close-round";
  }
  return "unknown";
}

std::array<char, kHeaderBytes> encode(const Header& h) {
  if (h.shape.rank() > kMaxRank)
    fail("parameter-server message: a tensor of rank {} (at most {})", h.shape.rank(), kMaxRank);
  std::array<char, kHeaderBytes> out{};
  char* p = out.data();
  put(p, kMagic);
  put(p + 4, kVersion);
  put(p + 6, static_cast<uint16_t>(h.type));
  put(p + 8, h.variable);
  put(p + 12, h.shard);
  put(p + 16, h.step);
  put(p + 24, h.aux);
  put(p + 32, static_cast<uint8_t>(h.dtype));
  put(p + 33, static_cast<uint8_t>(h.shape.rank()));
  for (int d = 0; d < h.shape.rank(); ++d) put(p + 40 + 8 * d, h.shape[d]);
  put(p + 88, static_cast<uint64_t>(h.payload_bytes()));
  return out;
}

Header decode(std::string_view frame, size_t payload_bytes) {
  if (frame.size() != kHeaderBytes)
    fail("parameter-server message: a header of {} bytes (expected {})", frame.size(), kHeaderBytes);
  const char* p = frame.data();
  if (auto magic = get<uint32_t>(p); magic != kMagic)
    fail("parameter-server message: magic 0x{:08x} (expected 0x{:08x}: not a Tandem parameter-server peer)", magic,
         kMagic);
  if (auto version = get<uint16_t>(p + 4); version != kVersion)
    fail("parameter-server message: wire version {} (this build speaks {})", version, kVersion);
  Header h;
  auto type = get<uint16_t>(p + 6);
  if (type < static_cast<uint16_t>(MessageType::Pull) || type > static_cast<uint16_t>(MessageType::CloseRound))
    fail("parameter-server message: unknown message type {}", type);
  h.type = static_cast<MessageType>(type);
  h.variable = get<uint32_t>(p + 8);
  h.shard = get<uint32_t>(p + 12);
  h.step = get<int64_t>(p + 16);
  h.aux = get<int64_t>(p + 24);
  auto dtype = get<uint8_t>(p + 32);
  if (dtype > static_cast<uint8_t>(DType::UInt8)) fail("parameter-server message: unknown dtype {}", dtype);
  h.dtype = static_cast<DType>(dtype);
  auto rank = get<uint8_t>(p + 33);
  if (rank > kMaxRank) fail("parameter-server message: a tensor of rank {} (at most {})", rank, kMaxRank);
  std::vector<int64_t> dims;
  // The elements, and the product of the dimensions but the zero ones (a tensor's strides: bounded
  // too, so that an empty tensor of shape (0, 2^40, 2^40) is refused rather than overflowing them).
  uint64_t elements = 1, extent = 1;
  for (int d = 0; d < rank; ++d) {
    auto n = get<int64_t>(p + 40 + 8 * d);
    if (n < 0 || n > (int64_t{1} << 40)) fail("parameter-server message: dimension {} is {}", d, n);
    dims.push_back(n);
    if (n != 0 && extent > (uint64_t{1} << 40) / static_cast<uint64_t>(n))
      fail("parameter-server message: a tensor whose dimensions multiply past 2^40");
    extent *= static_cast<uint64_t>(std::max<int64_t>(n, 1));
    elements *= static_cast<uint64_t>(n);
  }
  h.shape = Shape(std::span<const int64_t>(dims));
  auto length = get<uint64_t>(p + 88);
  if (length != elements * dtype_size(h.dtype))
    fail("parameter-server message: a {} tensor of shape {} is {} bytes, the header says {}", dtype_name(h.dtype),
         h.shape.str(), elements * dtype_size(h.dtype), length);
  if (length != payload_bytes)
    fail("parameter-server message: the header announces {} payload bytes, {} came", length, payload_bytes);
  return h;
}

Tensor Item::tensor() const {
  Tensor t = Tensor::empty(header.shape, header.dtype);
  if (!payload.empty()) std::memcpy(t.raw(), payload.data(), payload.size());
  return t;
}

Tensor Item::adopt(const std::shared_ptr<void>& owner) const {
  // ZeroMQ gives large frames buffers of their own; small ones may sit at any offset of a shared
  // receive buffer, where a float would be misaligned: those are copied.
  if (reinterpret_cast<uintptr_t>(payload.data()) % 16 != 0) return tensor();
  return Tensor::adopt(const_cast<char*>(payload.data()), header.shape, header.dtype, owner);
}

std::vector<Item> decode_items(std::span<const std::string_view> frames) {
  if (frames.size() % 2 != 0)
    fail("parameter-server message: {} frames (a header and a payload per item: an even count)", frames.size());
  std::vector<Item> items;
  items.reserve(frames.size() / 2);
  for (size_t i = 0; i < frames.size(); i += 2) {
    try {
      items.push_back({decode(frames[i], frames[i + 1].size()), frames[i + 1]});
    } catch (const Error& e) {
      fail("item {}: {}", i / 2, e.what());
    }
  }
  return items;
}

namespace {
// A fixed-size item: its fields as 8 little-endian bytes each, in a uint8 tensor.
Tensor encode_fields(std::initializer_list<int64_t> fields) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(8 * fields.size())}, DType::UInt8);
  char* p = static_cast<char*>(t.raw());
  for (int64_t field : fields) {
    put(p, field);
    p += 8;
  }
  return t;
}
template <size_t N>
std::array<int64_t, N> decode_fields(const Item& item, const char* what) {
  if (item.header.dtype != DType::UInt8 || item.header.shape != Shape{static_cast<int64_t>(8 * N)})
    fail("parameter-server message: {} is a uint8 tensor of shape [{}], got {} {}", what, 8 * N,
         dtype_name(item.header.dtype), item.header.shape.str());
  std::array<int64_t, N> out{};
  for (size_t i = 0; i < N; ++i) out[i] = get<int64_t>(item.payload.data() + 8 * i);
  return out;
}
}  // namespace

Tensor encode(const StepInfo& info) {
  return encode_fields({info.first_row, info.round_rows, info.pushes, info.epoch, info.step, info.clock});
}

StepInfo decode_step_info(const Item& item) {
  auto f = decode_fields<6>(item, "a step's info");
  StepInfo info{f[0], f[1], f[2], f[3], f[4], f[5]};
  if (info.round_rows < 1 || info.first_row < 0 || info.first_row >= info.round_rows || info.pushes < 1 ||
      info.epoch < 0 || info.epoch > std::numeric_limits<int32_t>::max() || info.step < 0 || info.clock < 0)
    fail(
        "parameter-server message: a step's info is inconsistent: first row {} of a round of {} rows, {} pushes, "
        "epoch {}, step {}, clock {}",
        info.first_row, info.round_rows, info.pushes, info.epoch, info.step, info.clock);
  return info;
}

Tensor encode(const PushInfo& info) { return encode_fields({info.clock, info.round, info.round_pushes}); }

PushInfo decode_push_info(const Item& item) {
  if (item.header.aux != kPushInfoItem)
    fail("parameter-server message: a push begins with its push info (item tag {}), got an item tagged {}",
         kPushInfoItem, item.header.aux);
  auto f = decode_fields<3>(item, "a push's info");
  PushInfo info{f[0], f[1], f[2]};
  if (info.clock < 0 || info.round < -1 || info.round_pushes < 0 || info.round_pushes > kMaxWorkers ||
      (info.round >= 0 && info.round_pushes == 0))
    fail(
        "parameter-server message: a push's info is inconsistent: clock {}, round {} (-1: none), {} pushes a round "
        "(0: not synchronous)",
        info.clock, info.round, info.round_pushes);
  return info;
}

Tensor encode(const PsPolicy& policy) {
  return encode_fields({static_cast<int64_t>(policy.kind), policy.max_staleness, policy.backup_workers});
}

PsPolicy decode_policy(const Item& item, int workers) {
  auto f = decode_fields<3>(item, "an update policy");
  int64_t kind = f[0];
  PsPolicy policy{static_cast<PsPolicy::Kind>(kind), f[1], f[2]};
  bool known = kind >= 0 && kind <= 2;
  bool staleness =
      policy.kind == PsPolicy::Kind::BoundedStaleness ? policy.max_staleness >= 0 : policy.max_staleness == 0;
  bool backups = policy.kind == PsPolicy::Kind::Synchronous
                     ? policy.backup_workers >= 0 && policy.backup_workers < workers
                     : policy.backup_workers == 0;
  if (!known || !staleness || !backups)
    fail(
        "parameter-server message: an inconsistent update policy: kind {} (0 asynchronous, 1 bounded staleness, 2 "
        "synchronous), staleness bound {}, {} backup workers of {} workers",
        kind, policy.max_staleness, policy.backup_workers, workers);
  return policy;
}

}  // namespace tandem::distribute::ps
