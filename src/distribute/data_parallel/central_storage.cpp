// CentralStorageStrategy: MirroredStrategy's replicas computing on one copy of the trainable
// variables, updated once.
#include "distribute/update_rules.h"
#include "tandem/distribute/strategy.h"

namespace tandem::distribute {

// The trainable variables shared; each replica updates its own copy of the moving statistics
// (to the same values, from the replicas' common statistics).
std::shared_ptr<layers::Layer> CentralStorageStrategy::replica_layer(const layers::Layer& layer, int) const {
  std::shared_ptr<layers::Layer> copy = layer.clone();
  for (Variable& v : copy->variables())
    if (!v.trainable) v.value = v.value.clone();
  return copy;
}

UpdateRule& CentralStorageStrategy::update_rule() const { return central_update_rule(); }

std::string CentralStorageStrategy::name() const {
  return fmt::format("central:{}{}", num_replicas_in_sync(), options().deterministic ? ":deterministic" : "");
}

}  // namespace tandem::distribute
