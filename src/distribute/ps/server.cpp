// A parameter server (server.h).
#include "distribute/ps/server.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "core/tensor_impl.h"

#include "tandem/error.h"

namespace tandem::distribute::ps {

ParameterServer::ParameterServer(std::string name, std::unique_ptr<Optimizer> optimizer, int workers)
    : name_(std::move(name)), optimizer_(std::move(optimizer)), workers_(std::max(workers, 1)) {}

void ParameterServer::serve(zmq::socket_t& socket, const std::function<bool()>& stop, std::chrono::milliseconds poll) {
  while (!stop()) {
    std::optional<Incoming> request = receive(socket, poll, /*router=*/true);  // what does not decode: dropped there
    if (!request) continue;
    MessageType type = request->envelope.type;
    if (replay_at_ < replay_.size() && (type == MessageType::Pull || type == MessageType::Push)) {
      try {
        check_replayed(*request);
      } catch (const Error& e) {  // told to its worker, which ends the job; the rest answered as they come
        log_refusal(e.what());
        Outgoing refused(MessageType::Refused, 0);
        refused.add_text(e.what());
        refused.send(socket, &request->route);
        replay_.clear();
        answer_in_recorded_order(socket);
        continue;
      }
      held_[request->envelope.variable].push_back(std::move(*request));
      answer_in_recorded_order(socket);
    } else {
      answer(socket, *request);
    }
    if (!going_on_) {
      if (std::string line = updates_ ? updates_->describe(name_) : ""; !line.empty())
        std::fprintf(stderr, "%s\n", line.c_str());
      return;
    }
  }
}

void ParameterServer::answer(zmq::socket_t& socket, const Incoming& request) {
  Outgoing answer(MessageType::Refused, 0);
  try {
    going_on_ = handle(request, answer);
  } catch (const Error& e) {
    log_refusal(fmt::format("a {} message: {}", message_type_name(request.envelope.type), e.what()));
    answer = Outgoing(MessageType::Refused, 0);
    answer.add_text(e.what());
  }
  try {
    answer.send(socket, &request.route);
  } catch (const std::exception& e) {  // its asker is gone (a worker that died): the others go on
    std::fprintf(stderr, "%s: the answer to a %s message could not be sent (its sender is gone?): %s\n", name_.c_str(),
                 message_type_name(request.envelope.type), e.what());
  }
}

void ParameterServer::check_replayed(const Incoming& request) {
  auto& mine = expected_[request.envelope.variable];
  if (mine.empty()) return;  // past its record (a last prefetched pull): answered after the record's end
  PsRecord::Event next = mine.front(), got = event_of(request);
  mine.pop_front();
  auto kind = [](int32_t k) { return k == PsRecord::kPush ? "push" : "pull"; };
  // A pull's version is the one it will be answered at: checked when its turn comes.
  if (got[0] != next[0] || got[2] != next[2] || (got[0] == PsRecord::kPush && got[3] != next[3]))
    fail(
        "--replay: worker {}'s next event here in the record is a {} (its clock {}, version {}); the run brought a {} "
        "(clock {}, version {}): this run is not the recorded one (another model, data, seed, flags or build?)",
        next[1], kind(next[0]), next[2], next[3], kind(got[0]), got[2], got[3]);
}

PsRecord::Event ParameterServer::event_of(const Incoming& request) const {
  bool push = request.envelope.type == MessageType::Push;
  return {push ? PsRecord::kPush : PsRecord::kPull, record_field(request.envelope.variable, "worker"),
          record_field(push && !request.items.empty() ? decode_push_info(request.items[0]).clock : 0, "clock"),
          record_field(push ? request.envelope.step : version_, "version")};
}

void ParameterServer::answer_in_recorded_order(zmq::socket_t& socket) {
  while (replay_at_ < replay_.size()) {
    const PsRecord::Event& next = replay_[replay_at_];
    auto& queue = held_[static_cast<uint32_t>(next[1])];
    if (queue.empty()) return;  // not here yet
    Incoming request = std::move(queue.front());
    queue.pop_front();
    PsRecord::Event got = event_of(request);
    if (got != next) {  // the run is no longer the recorded one: say so to the worker, which ends the job
      std::string what = fmt::format(
          "--replay: event {} of this server's record is a {} of worker {} (its clock {}, version {}); the run "
          "brought a {} of worker {} (clock {}, version {}): this run is not the recorded one (another model, data, "
          "seed or build?)",
          replay_at_, next[0] == PsRecord::kPush ? "push" : "pull", next[1], next[2], next[3],
          got[0] == PsRecord::kPush ? "push" : "pull", got[1], got[2], got[3]);
      log_refusal(what);
      Outgoing refused(MessageType::Refused, 0);
      refused.add_text(what);
      refused.send(socket, &request.route);
      replay_.clear();
      return;
    }
    ++replay_at_;
    answer(socket, request);
  }
  for (auto& [worker, queue] : held_)  // past the record: in arrival order
    while (!queue.empty()) {
      answer(socket, queue.front());
      queue.pop_front();
    }
}

const std::map<int64_t, int64_t>& ParameterServer::ahead_counts() const {
  static const std::map<int64_t, int64_t> none;
  return updates_ ? updates_->ahead_counts() : none;
}

// The first ten refusals and then every thousandth are logged: a flood of garbage does not flood the log.
void ParameterServer::log_refusal(const std::string& what) {
  int64_t count = ++refused_;
  if (count <= 10 || count % 1000 == 0)
    std::fprintf(stderr, "%s: refused %s (%lld refused so far)\n", name_.c_str(), what.c_str(),
                 static_cast<long long>(count));
}

bool ParameterServer::handle(const Incoming& request, Outgoing& answer) {
  MessageType type = request.envelope.type;
  if (!initialized_ && (type == MessageType::Pull || type == MessageType::Push || type == MessageType::Fetch))
    fail("{} before init: the chief has not given this server its variables yet", message_type_name(type));
  bool journals = journaling_ && updates_ && updates_->journals();
  if (journals && (type == MessageType::Pull || type == MessageType::Push))
    journal_.push_back(event_of(request));  // a push that fails below is not applied: taken back there
  switch (type) {
    case MessageType::Init:
      init(request);
      answer = Outgoing(MessageType::Ready, 0, version_);
      return true;
    case MessageType::Journal:
      answer = Outgoing(MessageType::Journal, 0, version_);
      hand_journal(answer);
      return true;
    case MessageType::Pull: {
      // Sent from the shards' own memory; an update while a reply still holds it writes a copy.
      answer = Outgoing(MessageType::Values, 0, version_);
      for (const Shard& s : shards_) answer.add(s.variable, s.shard, s.value.value);
      return true;
    }
    case MessageType::Push: {
      try {
        push(request, answer);
      } catch (const Error&) {
        if (journals) journal_.pop_back();
        throw;
      }
      return true;
    }
    case MessageType::CloseRound: {
      int64_t pushes = updates_ ? updates_->close_round(request.envelope.step) : 0;
      answer = Outgoing(MessageType::Ready, 0, version_, pushes);
      return true;
    }
    case MessageType::Fetch: {
      std::string before = set_phase ? set_phase("serving a read") : std::string();
      state(answer);
      if (set_phase) set_phase(before);
      return true;
    }
    case MessageType::Stop:
      // Journalling, the answer holds what was applied since the chief last asked (a late push of
      // a worker lost and continued), so that the record has every push this server applied.
      answer = Outgoing(MessageType::Stop, 0, version_);
      if (journals) hand_journal(answer);
      return false;
    default:
      fail("a parameter server answers init, pull, push, fetch and stop, not {}",
           message_type_name(request.envelope.type));
  }
}

void ParameterServer::hand_journal(Outgoing& answer) {
  std::vector<int32_t> flat;
  for (const auto& e : journal_) flat.insert(flat.end(), e.begin(), e.end());
  answer.add(0, 0, Tensor::from_vector({static_cast<int64_t>(journal_.size()), 4}, flat));
  journal_.clear();
}

// Init: the update policy (aux kPolicyItem), the shards' values (aux 0) then their optimizer slots
// (aux k + 1, slot k); the envelope's step is the optimizer's iteration count.
void ParameterServer::init(const Incoming& request) {
  initialized_ = false;  // until this init is through
  shards_.clear();
  index_.clear();
  updates_.reset();
  std::vector<const Item*> slots;
  const Item* clocks = nullptr;
  std::optional<PsPolicy> policy;
  journaling_ = false;
  journal_.clear();
  replay_.clear();
  replay_at_ = 0;
  held_.clear();
  expected_.clear();
  for (const Item& item : request.items) {
    if (item.header.aux == kPolicyItem) {
      policy = decode_policy(item, workers_);
      continue;
    }
    if (item.header.aux == -1) {  // a restore: the workers' clocks so far
      clocks = &item;
      continue;
    }
    if (item.header.aux == -3) {  // --record: keep a journal
      journaling_ = true;
      continue;
    }
    if (item.header.aux == -2) {  // --replay: this server's order, int32 [n, 4]
      if (item.header.dtype != DType::Int32 || item.header.shape.rank() != 2 || item.header.shape[1] != 4)
        fail("init: a replay's order is int32 [n, 4], got {} {}", dtype_name(item.header.dtype),
             item.header.shape.str());
      Tensor order = item.tensor();
      const int32_t* e = order.data<int32_t>();
      for (int64_t i = 0; i < order.dim(0); ++i) {
        replay_.push_back({e[4 * i], e[4 * i + 1], e[4 * i + 2], e[4 * i + 3]});
        expected_[static_cast<uint32_t>(e[4 * i + 1])].push_back(replay_.back());
      }
      continue;
    }
    if (item.header.aux != 0) {
      slots.push_back(&item);
      continue;
    }
    if (item.header.dtype != DType::Float32)
      fail("init: shard {}/{} is {}, not float32", item.header.variable, item.header.shard,
           dtype_name(item.header.dtype));
    auto key = std::make_pair(item.header.variable, item.header.shard);
    if (index_.count(key)) fail("init: shard {}/{} given twice", key.first, key.second);
    index_[key] = shards_.size();
    shards_.push_back({key.first, key.second,
                       Variable{.name = fmt::format("v{}s{}", key.first, key.second), .value = item.tensor()}});
  }
  variables_.clear();
  for (Shard& s : shards_) variables_.push_back(&s.value);
  optimizer_ = optimizer_->clone();  // slots made afresh for these shards
  optimizer_->build(variables_);
  std::vector<std::pair<std::string, Tensor>> state = optimizer_->state();
  size_t per = shards_.empty() ? 0 : (state.size() - 1) / shards_.size();
  if (slots.size() != per * shards_.size())
    fail("init: {} optimizer slots for {} shards of an optimizer with {} per variable", slots.size(), shards_.size(),
         per);
  for (const Item* slot : slots) {
    auto it = index_.find({slot->header.variable, slot->header.shard});
    auto k = static_cast<size_t>(slot->header.aux - 1);
    if (it == index_.end() || k >= per)
      fail("init: a slot of shard {}/{} (slot {})", slot->header.variable, slot->header.shard, slot->header.aux - 1);
    auto& [name, tensor] = state[1 + it->second * per + k];
    if (!(slot->header.shape == tensor.shape()) || slot->header.dtype != DType::Float32)
      fail("init: slot {} of shard {}/{} has shape {}, the shard {}", k, slot->header.variable, slot->header.shard,
           slot->header.shape.str(), tensor.shape().str());
    tensor = slot->tensor();
  }
  state[0].second = Tensor::from_vector({1}, std::vector<int32_t>{static_cast<int32_t>(request.envelope.step)});
  optimizer_->load_state(state, variables_);
  std::vector<int64_t> given;  // a restore's clocks
  if (clocks != nullptr) {
    if (clocks->header.dtype != DType::Int32 || clocks->header.shape.numel() != workers_)
      fail("init: the workers' clocks are {} {}, expected int32 [{}]", dtype_name(clocks->header.dtype),
           clocks->header.shape.str(), workers_);
    Tensor t = clocks->tensor();
    given.assign(t.data<int32_t>(), t.data<int32_t>() + workers_);
  }
  if (!policy) fail("init: the chief gave no update policy");
  updates_ =
      make_update_policy(*policy, *optimizer_, variables_, workers_, std::move(given),
                         [this](Optimizer& optimizer, std::vector<Tensor>& gradients) { apply(optimizer, gradients); });
  version_ = 0;
  initialized_ = true;
}

std::vector<Tensor> ParameterServer::gradients_of(const Incoming& request) const {
  if (request.items.size() != shards_.size() + 1)
    fail("push: its info and {} gradients for the {} shards held here", request.items.size() - 1, shards_.size());
  std::vector<Tensor> out(shards_.size());
  for (const Item& item : std::span(request.items).subspan(1)) {
    auto it = index_.find({item.header.variable, item.header.shard});
    if (it == index_.end()) fail("push: shard {}/{} is not held here", item.header.variable, item.header.shard);
    const Shard& s = shards_[it->second];
    if (item.header.dtype != DType::Float32 || !(item.header.shape == s.value.value.shape()))
      fail("push: the gradient of shard {}/{} is {} {}, the shard float32 {}", s.variable, s.shard,
           dtype_name(item.header.dtype), item.header.shape.str(), s.value.value.shape().str());
    if (out[it->second].defined()) fail("push: shard {}/{} given twice", s.variable, s.shard);
    out[it->second] = item.adopt(request.frames);  // the frame's memory, kept while the tensor is
  }
  return out;
}

void ParameterServer::apply(Optimizer& optimizer, std::vector<Tensor>& gradients) {
  for (Shard& s : shards_)  // copy on write: a pull's reply still on its way keeps the old values
    if (s.value.value.impl()->refs.load(std::memory_order_acquire) > 1) s.value.value = s.value.value.clone();
  optimizer.apply_here(variables_, gradients);
  ++version_;
}

void ParameterServer::push(const Incoming& request, Outgoing& answer) {
  if (request.items.empty()) fail("push: no items (its info first)");
  PushInfo info = decode_push_info(request.items[0]);
  std::vector<Tensor> gradients = gradients_of(request);
  int64_t computed_on = request.envelope.step;
  if (computed_on < 0 || computed_on > version_)
    fail("push: computed on version {}, this server is at {}", computed_on, version_);
  int64_t said = updates_->push({request.envelope.variable, info, computed_on, version_, std::move(gradients)});
  answer = Outgoing(MessageType::Pushed, 0, version_, said);
}

void ParameterServer::state(Outgoing& answer) {
  std::vector<std::pair<std::string, Tensor>> state = updates_->saved().state();
  answer = Outgoing(MessageType::State, 0, updates_->iterations(), version_);
  size_t per = shards_.empty() ? 0 : (state.size() - 1) / shards_.size();
  for (size_t i = 0; i < shards_.size(); ++i) {
    answer.add(shards_[i].variable, shards_[i].shard, shards_[i].value.value.clone());
    for (size_t k = 0; k < per; ++k)
      answer.add(shards_[i].variable, shards_[i].shard, state[1 + i * per + k].second.clone(),
                 static_cast<int64_t>(k) + 1);
  }
}

}  // namespace tandem::distribute::ps
