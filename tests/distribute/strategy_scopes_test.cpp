// The strategies' scopes: one stack per thread, shared by C++'s Scope objects and a binding's
// enter and exit (Python's `with strategy.scope()`).
#include <gtest/gtest.h>

#include <thread>

#include "tandem/distribute/strategy.h"
#include "test_util.h"

namespace tandem {
namespace {

// One stack of scopes per thread: C++'s Scope objects and a binding's enter/exit share it; a
// scope closed out of order is refused by name, and another thread sees none of this one's.
TEST(StrategyScopes, NestOnOneStackPerThreadAndCloseInnermostFirst) {
  distribute::OneDeviceStrategy outer;
  distribute::MirroredStrategy inner(2, 1);
  {
    auto scope = outer.scope();
    distribute::enter_scope(&inner);
    EXPECT_EQ(distribute::current_strategy(), &inner);
    distribute::Strategy* elsewhere = &outer;
    std::thread([&] { elsewhere = distribute::current_strategy(); }).join();
    EXPECT_EQ(elsewhere, nullptr);
    try {
      distribute::exit_scope(&outer);
      ADD_FAILURE() << "closing the outer scope first was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the scope of one_device is not the innermost open on this thread (the "
                                           "innermost is mirrored:2)"),
                std::string::npos)
          << e.what();
    }
    distribute::exit_scope(&inner);
    EXPECT_EQ(distribute::current_strategy(), &outer);
  }
  EXPECT_EQ(distribute::current_strategy(), nullptr);
  EXPECT_THROW(distribute::exit_scope(&inner), Error);
  {
    auto scope = outer.scope();
    distribute::enter_scope(&inner);  // left open, as an exception between enter and exit leaves it
  }
  EXPECT_EQ(distribute::current_strategy(), nullptr) << "a scope closes what opened after it and stayed open";
}

}  // namespace
}  // namespace tandem
