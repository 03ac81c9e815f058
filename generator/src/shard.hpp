// Sharded builds: a deterministic, compile-cost-balanced subset of a spec's variants per shard,
// and the merge of sealed shards into the package an unsharded build would have produced.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "aotinfer/manifest.hpp"
#include "aotinfer/variant.hpp"

namespace aotinfer::gen {

struct Shard {
  int index = 1;  // 1..count
  int count = 1;
  static Shard parse(const std::string& text);  // "2/5"; throws std::invalid_argument
};

// Relative nvcc time of a variant for one arch (unit: a merge_state variant). A model, refined
// from build reports: attention kernels cost more, grow with head_dim, RoPE adds math.
double estimated_compile_cost(const VariantKey& key);

// The variants of shard `s`, in spec order. Longest-processing-time-first assignment (by
// estimated cost, ties by URI) gives every variant to exactly one shard and keeps the largest
// shard within one variant's cost of the smallest.
std::vector<VariantKey> shard_variants(const std::vector<VariantKey>& variants, Shard s);

// shard.json, written beside a shard's build: which spec and which part of it the shard holds.
struct ShardInfo {
  Shard shard;
  std::string spec_sha256;
  std::string generator;
  std::vector<std::string> all_uris;  // every variant of the spec, in spec order
};
std::string shard_info_json(const ShardInfo& info);

// Joins sealed shard builds into out_dir/package. Refuses shards of different specs or
// generator versions, a missing or repeated shard, and variants that do not add up to the spec.
// The result is byte-identical to an unsharded build of the same spec.
Manifest merge_shards(const std::vector<std::filesystem::path>& shard_dirs, const std::filesystem::path& out_dir);

}  // namespace aotinfer::gen
