// The workers' comparison of their settings before training (check_workers_agree).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "tandem/collectives/mpi.h"
#include "tandem/distribute/strategy.h"
#include "tandem/error.h"

namespace tandem::distribute {

void check_workers_agree(Strategy& strategy, const std::string& what, const std::string& text) {
  Communicator* workers = strategy.extended().worker_communicator();
  if (workers == nullptr || workers->size() == 1) return;
  auto n = static_cast<size_t>(workers->size());
  std::vector<int64_t> lengths(n);
  auto length = static_cast<int64_t>(text.size());
  workers->all_gather(&length, 1, lengths.data(), DataType::Int64);
  int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<int64_t> mine(static_cast<size_t>(longest + 7) / 8, 0), all(mine.size() * n);
  std::memcpy(mine.data(), text.data(), text.size());
  workers->all_gather(mine.data(), static_cast<int64_t>(mine.size()), all.data(), DataType::Int64);
  auto text_of = [&](size_t w) {
    return std::string(reinterpret_cast<const char*>(all.data() + w * mine.size()), static_cast<size_t>(lengths[w]));
  };
  for (size_t w = 1; w < n; ++w)
    if (text_of(w) != text_of(0))
      fail("{}: workers disagree on {}: worker 0 (host {}) has {}, worker {} (host {}) has {}", strategy.name(), what,
           mpi_host_of(0), text_of(0), w, mpi_host_of(static_cast<int>(w)), text_of(w));
}

}  // namespace tandem::distribute
