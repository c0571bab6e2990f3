// The trainable variables' shards (shards.h).
#include "distribute/ps/shards.h"

#include "tandem/error.h"

namespace tandem::distribute::ps {

ShardTable::ShardTable(std::vector<Variable*> variables, int servers, const Partitioner& partitioner)
    : variables_(std::move(variables)), on_server_(static_cast<size_t>(servers)) {
  std::vector<Shape> shapes;
  for (Variable* v : variables_) {
    if (v->value.dtype() != DType::Float32)
      fail("ParameterServerStrategy: variable \"{}\" is {}; the servers hold float32 variables", v->name,
           dtype_name(v->value.dtype()));
    shapes.push_back(v->value.shape());
  }
  placement_ = place_variables(shapes, servers, partitioner);
  for (size_t i = 0; i < placement_.size(); ++i) on_server_[static_cast<size_t>(placement_[i].server)].push_back(i);
}

Tensor ShardTable::rows(const Tensor& t, const ShardPlacement& p) {
  return t.rank() == 0 ? t : t.slice(p.begin, p.end);
}

void ShardTable::write(int s, const Incoming& message, std::vector<Tensor>& values,
                       std::vector<std::vector<Tensor>>* slots) const {
  size_t expected = on_server(s).size() * (slots != nullptr && !slots->empty() ? 1 + slots->front().size() : 1);
  if (message.items.size() != expected)
    fail("ParameterServerStrategy: ps:{} answered with {} tensors, {} expected", s, message.items.size(), expected);
  for (const Item& item : message.items) {
    const ShardPlacement* p = nullptr;
    for (size_t i : on_server(s))
      if (placement_[i].variable == static_cast<int>(item.header.variable) &&
          placement_[i].shard == static_cast<int>(item.header.shard))
        p = &placement_[i];
    if (p == nullptr)
      fail("ParameterServerStrategy: ps:{} sent shard {}/{}, which it does not hold", s, item.header.variable,
           item.header.shard);
    auto v = static_cast<size_t>(p->variable);
    Tensor target;
    if (item.header.aux == 0) target = rows(values[v], *p);
    else if (slots != nullptr && static_cast<size_t>(item.header.aux) <= (*slots)[v].size())
      target = rows((*slots)[v][static_cast<size_t>(item.header.aux - 1)], *p);
    else fail("ParameterServerStrategy: ps:{} sent slot {} of shard {}/{}", s, item.header.aux, p->variable, p->shard);
    if (!(item.header.shape == target.shape()) || item.header.dtype != DType::Float32 || !target.is_contiguous())
      fail("ParameterServerStrategy: ps:{} sent shard {}/{} as {} {}, this task holds it as float32 {}", s, p->variable,
           p->shard, dtype_name(item.header.dtype), item.header.shape.str(), target.shape().str());
    target.copy_from(item.adopt(message.frames));  // in place on the host, through it to a device
  }
}

void ShardTable::request_pull(ClusterLink& link, uint32_t sender) {
  for (auto& socket : link.server_sockets()) Outgoing(MessageType::Pull, sender).send(socket);
}

std::vector<int64_t> ShardTable::receive_pull(ClusterLink& link) {
  auto& sockets = link.server_sockets();
  std::vector<Tensor> values;
  for (Variable* v : variables_) values.push_back(v->value);
  std::vector<int64_t> versions;
  for (size_t s = 0; s < sockets.size(); ++s) {
    Incoming answer = link.await(sockets[s], false, link.describe({"ps", static_cast<int>(s)}));
    if (answer.envelope.type != MessageType::Values)
      fail("ParameterServerStrategy: ps:{} answered a pull with {}: {}", s, message_type_name(answer.envelope.type),
           answer.items.empty() ? "" : std::string(answer.items[0].payload));
    write(static_cast<int>(s), answer, values, nullptr);
    versions.push_back(answer.envelope.step);
  }
  return versions;
}

}  // namespace tandem::distribute::ps
