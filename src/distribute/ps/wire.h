#pragma once
// The parameter-server wire format. A message is a list of items, each two ZeroMQ frames: a
// fixed 96-byte header (magic, version, message type, variable and shard, step, an auxiliary
// integer, the payload's dtype and shape) and the payload's bytes, sent as they lie in the
// tensor (no copy on the sending side). Integers are little-endian. Every frame is validated
// where it arrives (decode_items): a wrong size, magic or version, an unknown type or dtype, a
// shape whose bytes are not the payload's length is an Error naming what was expected, never a
// crash.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/tensor.h"

namespace tandem::distribute::ps {

inline constexpr uint32_t kMagic = 0x31535054;  // "TPS1"
inline constexpr uint16_t kVersion = 5;         // 5: a result carries batch normalization's statistics
inline constexpr size_t kHeaderBytes = 96;
inline constexpr int kMaxRank = 6;
inline constexpr int64_t kMaxWorkers = 4096;  // in one job, as `tandem launch --workers` allows

enum class MessageType : uint16_t {
  Pull = 1,         // worker → server: every shard it holds, at its current version (no payload)
  Values = 2,       // server → worker: one item per shard; step = the server's version
  Push = 3,         // worker → server: its PushInfo (below; item aux kPushInfoItem), then one item per
                    // shard, its gradient; step = the version it was computed on
  Pushed = 4,       // server → worker: step = the version after; aux = the staleness it was applied with,
                    // or -1: dropped, its round applied without it (synchronous, backup workers)
  Init = 5,         // chief → server: the update policy (item aux kPolicyItem: a PsPolicy, below), one item
                    // per shard, its value (item aux 0), then the optimizer's state items (aux k: slot
                    // k - 1), and on a restore the workers' clocks (aux -1, int32 [W])
  Ready = 6,        // server → chief: initialized; worker → chief: ready for a step (aux = the worker's index)
  Step = 7,         // chief → worker: its StepInfo (below: first row in the round, the round's rows, its
                    // pushes, epoch, step in the epoch, the worker's clock), then y (and x when not read by position);
                    // step = the step's number, aux = the dropout key (synchronous rounds: the round's number)
  Result = 8,       // worker → chief: loss sum, predictions, and where the model has batch normalization its
                    // batch's statistics (moving_statistics.h); step = the step's number; aux = staleness (-1: dropped)
  Fetch = 9,        // chief → server: every shard's value and optimizer state
  State = 10,       // server → chief: the answer to Fetch
  Stop = 11,        // chief → any task: end
  Refused = 12,     // any → sender: the request was refused; the payload is the reason (text)
  Abort = 13,       // chief → worker: drop the step in hand (a server is being restored)
  Aborted = 14,     // worker → chief: dropped (or had none); free for the next step
  Journal = 15,     // chief → server: the pulls and pushes handled since the last ask (--record);
                    // server → chief: int32 [n, 4] (record.h's events)
  CloseRound = 16,  // chief → server (synchronous): step = a round a worker of which died: apply the
                    // pushes in; a push for it or an earlier round that comes later is dropped (answered
                    // Ready, step = the version after, aux = the pushes the round was applied with; -1:
                    // the server holds no shard)
};
const char* message_type_name(MessageType type);

struct Header {
  MessageType type = MessageType::Pull;
  uint32_t variable = 0;
  uint32_t shard = 0;
  int64_t step = 0;
  int64_t aux = 0;
  DType dtype = DType::UInt8;
  Shape shape = Shape{0};
  size_t payload_bytes() const { return static_cast<size_t>(shape.numel()) * dtype_size(dtype); }
};

std::array<char, kHeaderBytes> encode(const Header& header);
// One header frame, with the length of the payload frame that came with it.
Header decode(std::string_view header, size_t payload_bytes);

// An item as received: its header and a view of its payload.
struct Item {
  Header header;
  std::string_view payload;
  Tensor tensor() const;  // a copy of the payload as a tensor of the header's dtype and shape
  // The payload itself as that tensor, without a copy (`owner` keeps its memory alive), where it
  // is aligned; else a copy.
  Tensor adopt(const std::shared_ptr<void>& owner) const;
};
// Frames (header, payload, header, payload, ...) → items; an Error for an odd count or a bad frame
// (naming the item).
std::vector<Item> decode_items(std::span<const std::string_view> frames);

// What a Step message's first item tells the worker it is handed to: where its rows start in the
// round and the round's rows (a synchronous round is cut over its workers), the pushes that
// complete the round, the batch (its epoch and step: a worker reading the data itself reads it by
// position), and the worker's clock (its steps handed out before this one). Travels as 8
// little-endian bytes a field (a UInt8 tensor), so no step or clock is narrowed.
struct StepInfo {
  int64_t first_row = 0, round_rows = 0, pushes = 0, epoch = 0, step = 0, clock = 0;
};
Tensor encode(const StepInfo& info);
// An Error naming what is wrong for anything but a StepInfo's bytes with consistent fields.
StepInfo decode_step_info(const Item& item);

// What a Push message's first item tells the server (tagged kPushInfoItem; 8 little-endian bytes a
// field): the worker's clock (its steps handed out before this one), and for a synchronous round
// its number (-1: none, as with backup workers, whose rounds are the server's versions) and the
// pushes that complete it (0: not synchronous).
struct PushInfo {
  int64_t clock = 0, round = -1, round_pushes = 0;
};
inline constexpr int64_t kPushInfoItem = -5;
Tensor encode(const PushInfo& info);
// An Error naming what is wrong for anything but a push info item with consistent fields.
PushInfo decode_push_info(const Item& item);

// How a server applies the workers' pushes, made from the strategy's options once (policy_of) and
// given to each server in its Init message (an item tagged kPolicyItem: 8 little-endian bytes a
// field): every push at once (asynchronous), or so that no push is computed more than
// `max_staleness` updates behind (bounded staleness), or in rounds of the workers' pushes, the
// last `backup_workers` of a round dropped (synchronous).
struct PsPolicy {
  enum class Kind : int64_t { Asynchronous = 0, BoundedStaleness = 1, Synchronous = 2 };
  Kind kind = Kind::Asynchronous;
  int64_t max_staleness = 0;   // bounded staleness: 0 or more
  int64_t backup_workers = 0;  // synchronous: 0 or more, fewer than the workers
};
inline constexpr int64_t kPolicyItem = -4;
Tensor encode(const PsPolicy& policy);
// An Error naming what is wrong for anything but a policy's bytes with consistent fields (for
// `workers` workers).
PsPolicy decode_policy(const Item& item, int workers);

}  // namespace tandem::distribute::ps
