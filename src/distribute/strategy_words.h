#pragma once
// What the rooms' registry entries share to read a strategy's name (strategy_registry.h) and the
// list of rooms that register entries, in the grammar's order.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/distribute/strategy_registry.h"

namespace tandem::distribute {

// A count in a strategy's name: a number from 1 to `most`, else nullopt.
std::optional<int> count_in_name(const std::string& word, int most);
// Refused past kMostPerCore thread groups (replicas, devices or stages in this process) per usable
// core: beyond, they only take turns, and a step's hand-offs between them outweigh its work.
inline constexpr int kMostPerCore = 64;
void refuse_past_cores(const std::string& spec, int groups, const char* what);
// "a:b:c" -> {"a", "b", "c"}.
std::vector<std::string> words_of(const std::string& spec);
// The processes a launcher started (a model split over them, one device each).
std::shared_ptr<Communicator> launched_world(const std::string& spec, const StrategySettings& settings);

void add_data_parallel_strategies(std::vector<StrategyEntry>& entries);     // data_parallel/registry.cpp
void add_parameter_server_strategies(std::vector<StrategyEntry>& entries);  // ps/registry.cpp
void add_model_parallel_strategies(std::vector<StrategyEntry>& entries);    // model_parallel/registry.cpp
void add_pipeline_strategies(std::vector<StrategyEntry>& entries);          // pipeline/registry.cpp

}  // namespace tandem::distribute
