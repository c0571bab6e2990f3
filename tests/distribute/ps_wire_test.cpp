// The parameter servers' wire format: headers, a step's info and the servers' update policy each
// way, and anything malformed refused by name.
#include <gtest/gtest.h>

#include "distribute/ps/wire.h"
#include "test_util.h"

namespace tandem::testing {
namespace {

using namespace distribute::ps;

TEST(PsWire, HeadersRoundTripAndBadFramesAreRefusedByName) {
  Header h{.type = MessageType::Push,
           .variable = 3,
           .shard = 1,
           .step = 42,
           .aux = -7,
           .dtype = DType::Float32,
           .shape = Shape{4, 5}};
  auto bytes = encode(h);
  std::string frame(bytes.data(), bytes.size());
  Header back = decode(frame, 80);
  EXPECT_EQ(back.type, MessageType::Push);
  EXPECT_EQ(back.variable, 3u);
  EXPECT_EQ(back.shard, 1u);
  EXPECT_EQ(back.step, 42);
  EXPECT_EQ(back.aux, -7);
  EXPECT_EQ(back.shape, (Shape{4, 5}));
  auto refused = [&](std::string f, size_t payload) { return error_of([&] { decode(f, payload); }); };
  EXPECT_NE(refused(frame.substr(0, 50), 80).find("a header of 50 bytes (expected 96)"), std::string::npos);
  EXPECT_NE(refused(frame, 79).find("announces 80 payload bytes, 79 came"), std::string::npos);
  std::string bad = frame;
  bad[0] = 'X';
  EXPECT_NE(refused(bad, 80).find("magic"), std::string::npos);
  bad = frame;
  bad[4] = 9;
  EXPECT_NE(refused(bad, 80).find(fmt::format("wire version 9 (this build speaks {})", kVersion)), std::string::npos);
  bad = frame;
  bad[6] = 99;
  EXPECT_NE(refused(bad, 80).find("unknown message type 99"), std::string::npos);
  bad = frame;
  bad[32] = 7;
  EXPECT_NE(refused(bad, 80).find("unknown dtype 7"), std::string::npos);
  bad = frame;
  bad[33] = 9;
  EXPECT_NE(refused(bad, 80).find("rank 9"), std::string::npos);
  bad = frame;
  bad[88] = 1;  // the length field no longer matches the shape
  EXPECT_NE(refused(bad, 80).find("a float32 tensor of shape (4, 5) is 80 bytes, the header says 1"),
            std::string::npos);
  std::vector<std::string_view> odd{frame};
  EXPECT_NE(error_of([&] { decode_items(odd); }).find("1 frames"), std::string::npos);
  // An empty tensor whose other dimensions multiply past 2^40 (found by fuzz_ps_wire: its strides
  // overflowed): refused, though it has no bytes.
  Header empty = h;
  empty.shape = Shape{0, int64_t{1} << 30, int64_t{1} << 30};
  auto empty_bytes = encode(empty);
  EXPECT_NE(refused(std::string(empty_bytes.data(), empty_bytes.size()), 0).find("dimensions multiply past 2^40"),
            std::string::npos);
  empty.shape = Shape{0, 1 << 20};  // within the bound: an empty tensor as any other
  empty_bytes = encode(empty);
  EXPECT_EQ(decode(std::string(empty_bytes.data(), empty_bytes.size()), 0).shape, (Shape{0, 1 << 20}));
}

// A step's info travels in 64-bit fields: steps and clocks past 2^31 arrive as sent; anything but
// its bytes with consistent fields is refused by name.
TEST(PsWire, StepInfoRoundTripsWithoutNarrowingAndBadOnesAreRefused) {
  StepInfo sent{.first_row = 25,
                .round_rows = 75,
                .pushes = 3,
                .epoch = 7,
                .step = (int64_t{1} << 33) + 5,
                .clock = (int64_t{1} << 40) + 9};
  Tensor bytes = encode(sent);
  auto item_of = [](const Tensor& t) {
    return Item{
        Header{.type = MessageType::Step, .dtype = t.dtype(), .shape = t.shape()},
        std::string_view(static_cast<const char*>(t.raw()), static_cast<size_t>(t.numel()) * dtype_size(t.dtype()))};
  };
  StepInfo back = decode_step_info(item_of(bytes));
  EXPECT_EQ(back.first_row, 25);
  EXPECT_EQ(back.round_rows, 75);
  EXPECT_EQ(back.pushes, 3);
  EXPECT_EQ(back.epoch, 7);
  EXPECT_EQ(back.step, sent.step);
  EXPECT_EQ(back.clock, sent.clock);
  Tensor old_form = Tensor::from_vector({6}, std::vector<int32_t>{0, 25, 1, 0, 3, 3});
  EXPECT_NE(error_of([&] {
              decode_step_info(item_of(old_form));
            }).find("a step's info is a uint8 tensor of shape [48], got int32"),
            std::string::npos);
  for (StepInfo bad : {StepInfo{.first_row = 75, .round_rows = 75, .pushes = 1}, StepInfo{.round_rows = 0, .pushes = 1},
                       StepInfo{.round_rows = 5, .pushes = 0}, StepInfo{.round_rows = 5, .pushes = 1, .step = -1},
                       StepInfo{.round_rows = 5, .pushes = 1, .epoch = int64_t{1} << 32}})
    EXPECT_NE(error_of([&] { decode_step_info(item_of(encode(bad))); }).find("a step's info is inconsistent"),
              std::string::npos);
  // The servers' update policy: a typed value each way, an inconsistent one named.
  for (PsPolicy policy : {PsPolicy{}, PsPolicy{.kind = PsPolicy::Kind::BoundedStaleness, .max_staleness = 3},
                          PsPolicy{.kind = PsPolicy::Kind::Synchronous, .backup_workers = 2}}) {
    PsPolicy got = decode_policy(item_of(encode(policy)), 3);
    EXPECT_EQ(got.kind, policy.kind);
    EXPECT_EQ(got.max_staleness, policy.max_staleness);
    EXPECT_EQ(got.backup_workers, policy.backup_workers);
  }
  for (PsPolicy bad :
       {PsPolicy{.kind = static_cast<PsPolicy::Kind>(7)}, PsPolicy{.max_staleness = 2},
        PsPolicy{.kind = PsPolicy::Kind::BoundedStaleness, .max_staleness = -1},
        PsPolicy{.kind = PsPolicy::Kind::Synchronous, .backup_workers = 3}, PsPolicy{.backup_workers = 1}})
    EXPECT_NE(error_of([&] { decode_policy(item_of(encode(bad)), 3); }).find("an inconsistent update policy"),
              std::string::npos);
  EXPECT_NE(error_of([&] { decode_policy(item_of(old_form), 3); }).find("an update policy is a uint8 tensor"),
            std::string::npos);
  // A push's named fields: the clock, and a synchronous round's number and pushes, never one field
  // read two ways; an item not tagged as the push's info, or one with inconsistent fields, named.
  auto push_item = [&](const PushInfo& info, int64_t tag = kPushInfoItem) {
    Item item = item_of(encode(info));
    item.header.aux = tag;
    return item;
  };
  for (PushInfo info : {PushInfo{.clock = (int64_t{1} << 35) + 1}, PushInfo{.clock = 4, .round = 9, .round_pushes = 3},
                        PushInfo{.clock = 2, .round = -1, .round_pushes = 2}}) {
    PushInfo got = decode_push_info(push_item(info));
    EXPECT_EQ(got.clock, info.clock);
    EXPECT_EQ(got.round, info.round);
    EXPECT_EQ(got.round_pushes, info.round_pushes);
  }
  for (PushInfo bad : {PushInfo{.clock = -1}, PushInfo{.round = -2}, PushInfo{.round = 3, .round_pushes = 0},
                       PushInfo{.round_pushes = kMaxWorkers + 1}})
    EXPECT_NE(error_of([&] { decode_push_info(push_item(bad)); }).find("a push's info is inconsistent"),
              std::string::npos);
  EXPECT_NE(error_of([&] { decode_push_info(push_item(PushInfo{}, 0)); }).find("a push begins with its push info"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::testing
