// A deterministic split of a run into N shards, so that shards can run on several GPUs or as the
// tasks of a cluster job array and their JSON Lines concatenate into the records of one run.
// Shard I of N (0 <= I < N, as Slurm's SLURM_ARRAY_TASK_ID counts) owns the work items whose index in
// the run's fixed order is I mod N; the order never depends on the shard, so the union of all N shards
// is exactly the unsharded run.
#pragma once

#include <cstddef>
#include <string>

namespace fc::gradcheck {

struct Shard {
  int index = 0;
  int count = 1;
  bool owns(std::size_t item) const { return static_cast<int>(item % static_cast<std::size_t>(count)) == index; }
  bool whole() const { return count == 1; }
  std::string to_string() const { return std::to_string(index) + "/" + std::to_string(count); }
  // "I/N" with 0 <= I < N; throws std::invalid_argument saying what is wrong.
  static Shard parse(const std::string& text);
};

}  // namespace fc::gradcheck
