#include "tandem/collectives/replica_context.h"

#include <algorithm>

#include "tandem/error.h"

namespace tandem::distribute {
namespace {
thread_local const ReplicaContext* running_replica = nullptr;
}  // namespace

const ReplicaContext* replica_context() { return running_replica; }

AsReplica::AsReplica(const ReplicaContext& context) : saved_(running_replica) { running_replica = &context; }
AsReplica::~AsReplica() { running_replica = saved_; }

std::vector<Tensor> ReplicaContext::all_reduce(ReduceOp op, std::span<const Tensor> values) const {
  int64_t total = 0;
  for (const Tensor& t : values) {
    if (t.dtype() != DType::Float32)
      fail("all_reduce: tensor of dtype {} (only float32 is reduced)", dtype_name(t.dtype()));
    total += t.numel();
  }
  Tensor fused = Tensor::empty({total});
  float* at = fused.data<float>();
  for (const Tensor& t : values) {
    Tensor c = t.contiguous();
    std::copy_n(c.data<float>(), c.numel(), at);
    at += c.numel();
  }
  // A mean is a sum scaled once here, the same bits as summing then scaling by hand.
  communicator->all_reduce(fused.data<float>(), total, DataType::Float32, op == ReduceOp::Mean ? ReduceOp::Sum : op);
  float scale = op == ReduceOp::Mean ? 1.0f / static_cast<float>(num_replicas) : 1.0f;
  std::vector<Tensor> out;
  int64_t offset = 0;
  for (const Tensor& t : values) {
    Tensor r = Tensor::empty(t.shape());
    const float* from = fused.data<float>() + offset;
    float* to = r.data<float>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) to[i] = from[i] * scale;  // × 1 is exact for Sum
    offset += t.numel();
    out.push_back(r);
  }
  return out;
}

}  // namespace tandem::distribute
