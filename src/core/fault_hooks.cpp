// The tests' fault hooks (fault_hooks.h): empty here.
#include "core/fault_hooks.h"

namespace tandem::fault_hooks {

Hooks& hooks() {
  static Hooks installed;
  return installed;
}

}  // namespace tandem::fault_hooks
