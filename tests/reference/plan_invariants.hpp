// Independent checkers of the decode and prefill work partitions (decode_plan.hpp,
// prefill_plan.hpp): everything the headers and the kernel contracts (params/batch_decode.h,
// params/batch_prefill.h) promise about a plan, recomputed from the inputs. Each returns "" when
// every promise holds, else the first broken one. No test framework: the fuzz targets
// (tests/fuzz/) use them, and Catch2 tests can (REQUIRE(problem(...) == "")).
//
// The checks follow the brute-force checkers of tests/unit/test_decode_plan.cpp and
// test_prefill_plan.cpp, with costs linear in the plan (the smallest-chunk search is verified at
// the chunk and one KV tile below it: the item count falls monotonically as the chunk grows).
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "aotinfer/decode_plan.hpp"
#include "aotinfer/prefill_plan.hpp"

namespace aotinfer::reference {

namespace plan_detail {

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

inline std::string str(std::int64_t v) { return std::to_string(v); }

}  // namespace plan_detail

// ---- decode ---------------------------------------------------------------------------------

// The first key a request of `len` keys attends to under the plan's window (0 without one).
inline std::int64_t decode_first_key(std::int64_t len, const DecodePlanLimits& l) {
  return l.window_left < 0 ? 0 : std::max<std::int64_t>(0, len - 1 - l.window_left);
}

// Work items for a chunk size, counted from scratch: ceil(keys / chunk), at least 1 per request,
// where a request attends to its keys from decode_first_key on.
inline std::int64_t decode_items_for(std::span<const std::int32_t> lens, const DecodePlanLimits& l, std::int64_t chunk) {
  std::int64_t items = 0;
  for (std::int32_t len : lens) items += std::max<std::int64_t>(1, plan_detail::ceil_div(len - decode_first_key(len, l), chunk));
  return items;
}

// A plan of `lens` (KV lengths, >= 0) under `l`: sizes and CUDA-graph padding, exact coverage of
// every request's [first key, len) by its items in order, chunk layout, merge_indptr, the split decision
// and the smallest chunk, and num_work <= decode_max_work(batch).
inline std::string decode_plan_problem(std::span<const std::int32_t> lens, const DecodePlanLimits& l,
                                       const DecodeWorkPlan& p) {
  using plan_detail::str;
  const std::int64_t batch = std::int64_t(lens.size());
  const std::int64_t wave = decode_wave_items(l);
  const bool graph = l.graph_work > 0;
  const std::int64_t tile = l.tile_tokens;
  const std::int64_t longest = lens.empty() ? 0 : *std::max_element(lens.begin(), lens.end());
  std::int64_t most_keys = 0;  // the most keys a request attends to (its window's)
  for (std::int32_t len : lens) most_keys = std::max(most_keys, len - decode_first_key(len, l));
  const std::string why = "decode plan {split " + str(p.split) + ", num_work " + str(p.num_work) + ", padded_work " +
                          str(p.padded_work) + ", chunk_tokens " + str(p.chunk_tokens) + "}, wave " + str(wave) + ": ";

  if (std::int64_t(p.request.size()) != p.padded_work || std::int64_t(p.kv_begin.size()) != p.padded_work ||
      std::int64_t(p.kv_end.size()) != p.padded_work)
    return why + "request/kv_begin/kv_end do not hold padded_work entries";
  if (p.num_work < batch) return why + "fewer work items than requests";
  if (p.num_work > decode_max_work(std::int32_t(std::max<std::int64_t>(batch, 1)), l, std::max<std::int64_t>(longest, 1)))
    return why + "more work items than decode_max_work(batch, longest)";
  if (graph) {
    if (!p.split) return why + "a CUDA-graph plan is not split";
    if (p.padded_work != l.graph_work) return why + "padded_work differs from graph_work";
    if (p.num_work > l.graph_work) return why + "num_work exceeds graph_work";
  } else if (p.padded_work != p.num_work) {
    return why + "padded_work differs from num_work outside CUDA-graph mode";
  }
  for (std::int64_t x = p.num_work; x < p.padded_work; ++x)
    if (p.request[x] != 0 || p.kv_begin[x] != p.kv_end[x])
      return why + "padding item " + str(x) + " is not (request 0, empty range)";

  // Every request's items, in the order they appear, tile [first key, len) without gap or overlap.
  std::vector<std::int64_t> covered(batch, 0), items(batch, 0);
  for (std::int64_t r = 0; r < batch; ++r) covered[r] = decode_first_key(lens[r], l);
  for (std::int64_t x = 0; x < p.num_work; ++x) {
    const std::int64_t r = p.request[x];
    if (r < 0 || r >= batch) return why + "item " + str(x) + " names request " + str(r);
    if (p.kv_begin[x] != covered[r])
      return why + "item " + str(x) + " of request " + str(r) + " begins at " + str(p.kv_begin[x]) + ", not at " +
             str(covered[r]);
    if (p.kv_end[x] > lens[r] || (lens[r] > 0 && p.kv_end[x] <= p.kv_begin[x]))
      return why + "item " + str(x) + " has range [" + str(p.kv_begin[x]) + ", " + str(p.kv_end[x]) +
             ") for a request of " + str(lens[r]) + " tokens";
    if (p.split && p.chunk_tokens > 0 &&
        ((p.kv_begin[x] - decode_first_key(lens[r], l)) % p.chunk_tokens != 0 ||
         p.kv_end[x] != std::min<std::int64_t>(std::int64_t(p.kv_begin[x]) + p.chunk_tokens, lens[r])))
      return why + "item " + str(x) + " is not a chunk [first + k*chunk, min(first + (k+1)*chunk, len))";
    covered[r] = p.kv_end[x];
    ++items[r];
  }
  for (std::int64_t r = 0; r < batch; ++r) {
    if (covered[r] != lens[r]) return why + "request " + str(r) + " is covered up to " + str(covered[r]);
    if (lens[r] == 0 && items[r] != 1) return why + "zero-length request " + str(r) + " has " + str(items[r]) + " items";
    if (!p.split && items[r] != 1) return why + "unsplit plan has " + str(items[r]) + " items for request " + str(r);
  }

  if (p.split) {
    if (std::int64_t(p.merge_indptr.size()) != batch + 1) return why + "merge_indptr does not hold batch + 1 entries";
    if (p.merge_indptr[0] != 0 || p.merge_indptr[batch] != p.num_work) return why + "merge_indptr does not span [0, num_work]";
    for (std::int64_t r = 0; r < batch; ++r) {
      if (p.merge_indptr[r + 1] - p.merge_indptr[r] != items[r])
        return why + "merge_indptr gives request " + str(r) + " a wrong item count";
      for (std::int64_t x = p.merge_indptr[r]; x < p.merge_indptr[r + 1]; ++x)
        if (p.request[x] != r) return why + "merge_indptr row " + str(r) + " holds item " + str(x) + " of another request";
    }
  } else {
    if (p.chunk_tokens != 0) return why + "an unsplit plan has chunk_tokens != 0";
    if (!p.merge_indptr.empty()) return why + "an unsplit plan has a merge_indptr";
  }

  // Whole requests over more than a wave: longest first (the longest CTAs start in the first
  // wave), equal ones in request order; otherwise request order.
  for (std::int64_t x = 1; x < p.num_work; ++x) {
    const std::int64_t keys = p.kv_end[x] - p.kv_begin[x], before = p.kv_end[x - 1] - p.kv_begin[x - 1];
    const bool in_order = p.request[x] > p.request[x - 1];
    if (!p.split && batch > wave ? keys > before || (keys == before && !in_order) : !in_order && p.request[x] != p.request[x - 1])
      return why + "item " + str(x) + " is out of order (whole requests over more than a wave: longest first; else request order)";
  }
  if (l.kv_split.invariant()) {
    // Batch-invariant: a request's items follow from its length alone, the fixed chunk's
    // multiples or the whole request.
    const std::int64_t fixed = l.kv_split.mode == KvSplit::Mode::fixed ? l.kv_split.chunk_for(l.tile_tokens) : 0;
    const bool cut = fixed > 0 && most_keys > fixed;
    if (p.split != (cut || graph)) return why + "a batch-invariant plan splits exactly when a request is cut (or in graph mode)";
    if (cut && p.chunk_tokens != fixed) return why + "chunk_tokens is not the fixed chunk " + str(fixed);
    if (!cut && p.num_work != batch) return why + "a request shorter than the fixed chunk has more than one item";
    return "";
  }
  // A batch that fills a wave: whole requests, unless one has more than twice a wave slot's share
  // of the batch's keys; then chunks of that share (a tile multiple), if shorter than the longest.
  if (batch >= wave) {
    std::int64_t total = 0;
    for (std::int32_t len : lens) total += len - decode_first_key(len, l);
    const std::int64_t share = plan_detail::ceil_div(total, wave);
    const std::int64_t whole = std::max<std::int64_t>(1, plan_detail::ceil_div(most_keys, tile)) * tile;
    const std::int64_t chunk = most_keys > 2 * share ? std::min(whole, std::max<std::int64_t>(1, plan_detail::ceil_div(share, tile)) * tile) : whole;
    if (p.split != (chunk < whole || graph))
      return why + "a batch that fills a wave splits exactly when a request exceeds twice the share of " + str(share) + " keys";
    if (p.split && p.chunk_tokens != chunk) return why + "chunk_tokens is not the balanced chunk " + str(chunk);
  }
  // The chunk: a tile multiple, the smallest whose item count fits one wave.
  if (p.split) {
    if (p.chunk_tokens <= 0 || p.chunk_tokens % tile != 0) return why + "chunk_tokens is not a positive multiple of tile_tokens";
    if (decode_items_for(lens, l, p.chunk_tokens) != p.num_work) return why + "num_work differs from the recount for chunk_tokens";
    if (batch < wave) {
      if (p.num_work > wave) return why + "more items than one wave";
      if (p.chunk_tokens > tile && decode_items_for(lens, l, p.chunk_tokens - tile) <= wave)
        return why + "chunk_tokens - tile_tokens would fit one wave too (" +
               str(decode_items_for(lens, l, p.chunk_tokens - tile)) + " items)";
    }
  }
  if (!p.split && !graph && batch < wave) {
    // Left unsplit with room on the GPU: only right when no chunk shorter than the longest
    // request's keys fits a wave.
    const std::int64_t shorter = (most_keys - 1) / tile * tile;
    if (shorter > 0 && decode_items_for(lens, l, shorter) <= wave)
      return why + "not split, but chunks of " + str(shorter) + " tokens fit one wave";
  }
  return "";
}

// "" when two plans (say a reused one and a fresh one) are the same plan.
inline std::string decode_plans_differ(const DecodeWorkPlan& a, const DecodeWorkPlan& b) {
  if (a.split != b.split || a.num_work != b.num_work || a.padded_work != b.padded_work || a.chunk_tokens != b.chunk_tokens)
    return "the plans differ in split/num_work/padded_work/chunk_tokens";
  if (a.request != b.request || a.kv_begin != b.kv_begin || a.kv_end != b.kv_end) return "the plans' work items differ";
  if (a.merge_indptr != b.merge_indptr) return "the plans' merge_indptr differ";
  return "";
}

// ---- prefill --------------------------------------------------------------------------------

// A query tile as params/batch_prefill.h describes it, recomputed here.
struct PrefillTileRef {
  std::int32_t request, q_row, rows;
  std::int64_t first;   // the first key its first row sees under a window (0 without one)
  std::int64_t extent;  // keys its rows can see: one past the largest visible key of its last row
  std::int64_t keys() const { return extent - first; }
};

// The tiles of `rows` packed rows each, with their key ranges under the mask (causal: key j is
// visible to token t when j <= kv_len - qo_len + t) and the window (j >= kv_len - qo_len + t -
// window_left).
inline std::vector<PrefillTileRef> prefill_expected_tiles(std::span<const std::int32_t> qo_indptr,
                                                          std::span<const std::int32_t> kv, const PrefillPlanLimits& l,
                                                          int rows) {
  const std::int64_t group = l.num_qo_heads / l.num_kv_heads;
  std::vector<PrefillTileRef> tiles;
  for (std::size_t i = 0; i < kv.size(); ++i) {
    const std::int64_t qo = std::int64_t(qo_indptr[i + 1]) - qo_indptr[i], packed = qo * group;
    for (std::int64_t row = 0; row < packed; row += rows) {
      const std::int64_t valid = std::min<std::int64_t>(rows, packed - row);
      std::int64_t extent = kv[i];
      if (l.causal) {
        const std::int64_t t = (row + valid - 1) / group;  // the tile's latest token
        extent = std::clamp<std::int64_t>(kv[i] - qo + t + 1, 0, kv[i]);  // none before the first key
      }
      std::int64_t first = 0;
      if (l.window_left >= 0) first = std::clamp<std::int64_t>(kv[i] - qo + row / group - l.window_left, 0, extent);
      tiles.push_back({std::int32_t(i), std::int32_t(row), std::int32_t(valid), first, extent});
    }
  }
  return tiles;
}

inline std::int64_t prefill_items_for(const std::vector<PrefillTileRef>& tiles, std::int64_t chunk) {
  std::int64_t items = 0;
  for (const auto& t : tiles) items += std::max<std::int64_t>(1, plan_detail::ceil_div(t.keys(), chunk));
  return items;
}

// A plan of (qo_indptr, kv lengths) under `l`: the tile choice, sizes and CUDA-graph padding,
// every query tile covered exactly once by its items ([first, extent), within the request's KV),
// longest-first order, the split decision and the smallest chunk, every (tile, KV head, row,
// chunk) of a split tile owning one state, and the merge combining each split row's states
// exactly once into its own o row.
inline std::string prefill_plan_problem(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv,
                                        const PrefillPlanLimits& l, const PrefillWorkPlan& p) {
  using plan_detail::ceil_div;
  using plan_detail::str;
  const std::string why = "prefill plan {large_tile " + str(p.large_tile) + ", tile_rows " + str(p.tile_rows) + ", split " +
                          str(p.split) + ", chunk_tokens " + str(p.chunk_tokens) + ", num_work " + str(p.num_work) +
                          ", padded_work " + str(p.padded_work) + ", num_states " + str(p.num_states) + ", num_outputs " +
                          str(p.num_outputs()) + "}: ";
  auto fail = [&](const std::string& what) { return why + what; };
  if (qo_indptr.size() != kv.size() + 1) return fail("the checker needs qo_indptr of batch + 1 entries");
  const std::int64_t batch = std::int64_t(kv.size());
  const std::int64_t group = l.num_qo_heads / l.num_kv_heads;
  const std::int64_t kvh = l.num_kv_heads;
  const bool graph = l.graph_work > 0;
  const std::int64_t total_q = qo_indptr.back();

  // 1. The tile: large in CUDA-graph mode, else large when the average packed length exceeds
  // the small tile.
  if (graph || batch > 0) {
    const bool large = graph || l.kv_split.invariant() || total_q * group > std::int64_t(l.small.rows) * batch;
    if (p.large_tile != large) return fail(std::string("expected the ") + (large ? "large" : "small") + " tile");
  }
  const PrefillTile& tile = p.large_tile ? l.large : l.small;
  if (p.tile_rows != tile.rows) return fail("tile_rows is not the chosen tile's rows");
  const int rows = tile.rows;

  // Sizes and padding.
  if (p.num_work < 0 || p.num_work > p.padded_work) return fail("num_work outside [0, padded_work]");
  if (graph ? p.padded_work != l.graph_work : p.padded_work != p.num_work)
    return fail("padded_work is neither graph_work (graph mode) nor num_work");
  for (const std::vector<std::int32_t>* v : {&p.request, &p.q_row, &p.kv_begin, &p.kv_end, &p.state, &p.state_stride})
    if (std::int64_t(v->size()) != p.padded_work) return fail("a work array does not hold padded_work entries");
  for (std::int64_t x = p.num_work; x < p.padded_work; ++x)
    if (p.kv_begin[x] != p.kv_end[x] || p.state[x] != -1) return fail("padding item " + str(x) + " is not an empty direct item");

  // 2. Tiles, and the items of each.
  const std::vector<PrefillTileRef> tiles = prefill_expected_tiles(qo_indptr, kv, l, rows);
  std::vector<std::int64_t> tile_base(batch + 1, 0);
  for (std::int64_t i = 0; i < batch; ++i)
    tile_base[i + 1] = tile_base[i] + ceil_div((std::int64_t(qo_indptr[i + 1]) - qo_indptr[i]) * group, rows);
  std::vector<std::vector<std::int64_t>> items_of(tiles.size());
  for (std::int64_t x = 0; x < p.num_work; ++x) {
    auto item = [&] {  // for messages only: built when something fails
      return "item " + str(x) + " (request " + str(p.request[x]) + ", q_row " + str(p.q_row[x]) + ", keys [" +
             str(p.kv_begin[x]) + ", " + str(p.kv_end[x]) + "), state " + str(p.state[x]) + "/" + str(p.state_stride[x]) + ")";
    };
    const std::int64_t r = p.request[x];
    if (r < 0 || r >= batch) return fail(item() + " names no request");
    const std::int64_t packed = (std::int64_t(qo_indptr[r + 1]) - qo_indptr[r]) * group;
    if (p.q_row[x] < 0 || p.q_row[x] % rows != 0 || p.q_row[x] >= packed)
      return fail(item() + ": q_row is not a tile_rows multiple inside the request's " + str(packed) + " packed rows");
    const std::int64_t t = tile_base[r] + p.q_row[x] / rows;
    if (p.kv_begin[x] < 0 || p.kv_begin[x] > p.kv_end[x]) return fail(item() + ": bad key range");
    if (p.kv_end[x] > tiles[t].extent) return fail(item() + ": covers keys beyond the tile's extent " + str(tiles[t].extent));
    if (p.kv_end[x] > kv[r]) return fail(item() + ": covers keys beyond the request's " + str(kv[r]));
    items_of[t].push_back(x);
  }
  // Longest first, in sort units of keys (items with as many units cost about the same).
  const std::int64_t unit = l.sort_unit_tokens();
  if (unit < l.kv_tile_tokens || unit % l.kv_tile_tokens != 0) return fail("the sort unit is not a KV-tile multiple");
  auto units = [&](std::int64_t x) { return ceil_div(std::int64_t(p.kv_end[x]) - p.kv_begin[x], unit); };
  for (std::int64_t x = 0; x + 1 < p.num_work; ++x)
    if (units(x) < units(x + 1))
      return fail("items " + str(x) + " and " + str(x + 1) + " are not ordered by descending sort units");

  // Exact coverage of [first, extent) per tile; chunk layout of split tiles.
  const std::int64_t chunk = p.chunk_tokens;
  if (p.split ? (chunk <= 0 || chunk % l.kv_tile_tokens != 0) : chunk != 0)
    return fail("chunk_tokens is not a positive kv_tile_tokens multiple when split, or not 0 when unsplit");
  bool some_split = false;
  for (std::size_t t = 0; t < tiles.size(); ++t) {
    const PrefillTileRef& tl = tiles[t];
    std::vector<std::int64_t>& its = items_of[t];
    auto name = [&] { return "tile (request " + str(tl.request) + ", q_row " + str(tl.q_row) + ", extent " + str(tl.extent) + ")"; };
    if (its.empty()) return fail(name() + " has no work item");
    std::sort(its.begin(), its.end(), [&](std::int64_t a, std::int64_t b) { return p.kv_begin[a] < p.kv_begin[b]; });
    std::int64_t covered = tl.first;
    for (std::int64_t x : its) {
      if (p.kv_begin[x] != covered) return fail(name() + ": an item begins at " + str(p.kv_begin[x]) + ", expected " + str(covered));
      covered = p.kv_end[x];
    }
    if (covered != tl.extent) return fail(name() + " is covered up to " + str(covered));
    if (its.size() == 1) {
      if (p.state[its[0]] != -1) return fail(name() + " has one item, but its state is not -1");
      if (p.split && tl.keys() > chunk) return fail(name() + " is longer than a chunk but not split");
      continue;
    }
    some_split = true;
    if (!p.split) return fail(name() + " has several items in a plan that is not split");
    for (std::size_t c = 0; c < its.size(); ++c) {
      const std::int64_t x = its[c];
      if (p.kv_begin[x] != tl.first + std::int64_t(c) * chunk ||
          p.kv_end[x] != std::min<std::int64_t>(tl.extent, tl.first + (std::int64_t(c) + 1) * chunk))
        return fail(name() + ": chunk " + str(std::int64_t(c)) + " is not [first + c * chunk, min(extent, first + (c + 1) * chunk))");
      if (p.state[x] < 0) return fail(name() + ": split item " + str(x) + " has state -1");
      if (p.state_stride[x] != std::int64_t(its.size()))
        return fail(name() + ": state_stride " + str(p.state_stride[x]) + " differs from its " + str(std::int64_t(its.size())) +
                    " chunks");
    }
  }
  if (p.split && !some_split) return fail("split is set, but no tile is split");

  // 3. The split decision and the chunk: split exactly when the tiles leave a wave unfilled and
  // some KV-tile multiple below the longest extent fits a wave; then the smallest such.
  const std::int64_t wave = std::max<std::int64_t>(1, std::int64_t(l.num_sms) * tile.ctas_per_sm / l.num_kv_heads);
  const std::int64_t num_tiles = std::int64_t(tiles.size());
  std::int64_t longest = 0;
  for (const auto& t : tiles) longest = std::max(longest, t.keys());
  const std::int64_t kv_tile = l.kv_tile_tokens;
  const std::int64_t below_longest = (longest - 1) / kv_tile * kv_tile;  // the largest multiple < longest (0: none)
  if (l.kv_split.invariant()) {
    // Batch-invariant: a tile's items follow from its extent alone.
    const std::int64_t fixed = l.kv_split.mode == KvSplit::Mode::fixed ? l.kv_split.chunk_for(l.kv_tile_tokens) : 0;
    const bool cut = fixed > 0 && longest > fixed;
    if (p.split != cut) return fail("a batch-invariant plan splits exactly when a tile's keys pass the fixed chunk");
    if (cut ? chunk != fixed : p.num_work != num_tiles) return fail("not the fixed chunk, or not one item per tile unsplit");
    if (cut && p.num_work != prefill_items_for(tiles, chunk)) return fail("num_work differs from the recount for the chunk");
  } else if (const bool can_split = num_tiles < wave && below_longest > 0 && prefill_items_for(tiles, below_longest) <= wave;
             !can_split) {
    if (p.split)
      return fail("split although " + std::string(num_tiles >= wave ? "the tiles fill a wave" : "no shorter chunk fits a wave"));
    if (p.num_work != num_tiles) return fail("an unsplit plan does not have one item per tile");
  } else {
    if (!p.split) return fail("not split, but chunks of " + str(below_longest) + " keys fit a wave of " + str(wave));
    if (chunk >= longest) return fail("the chunk is not shorter than the longest extent " + str(longest));
    if (prefill_items_for(tiles, chunk) > wave) return fail("the chunk's items do not fit a wave of " + str(wave));
    if (chunk > kv_tile && prefill_items_for(tiles, chunk - kv_tile) <= wave)
      return fail("a chunk one KV tile shorter fits a wave too: the chunk is not the smallest");
    if (p.num_work > wave) return fail("split plan has more items than a wave of " + str(wave));
    if (p.num_work != prefill_items_for(tiles, chunk)) return fail("num_work differs from the recount for the chunk");
  }

  // 5. States: every (tile, kv_head, row, chunk) of a split tile gets its own state in [0, num_states).
  if (p.num_states < 0) return fail("negative num_states");
  std::vector<std::int64_t> owner(p.num_states, -1);  // state -> (tile, kv_head, row) group
  std::vector<std::int64_t> group_row, group_chunks;   // group -> o row, chunk count
  std::int64_t assigned = 0;
  for (std::size_t t = 0; t < tiles.size(); ++t) {
    const PrefillTileRef& tl = tiles[t];
    const std::vector<std::int64_t>& its = items_of[t];
    if (its.size() == 1) continue;  // written directly: the tiles partition the packed rows
    for (std::int64_t kh = 0; kh < kvh; ++kh)
      for (std::int64_t r = 0; r < tl.rows; ++r) {
        const std::int64_t g = std::int64_t(group_row.size());
        const std::int64_t packed = tl.q_row + r;
        group_row.push_back((qo_indptr[tl.request] + packed / group) * l.num_qo_heads + kh * group + packed % group);
        group_chunks.push_back(std::int64_t(its.size()));
        for (std::int64_t x : its) {
          const std::int64_t s = std::int64_t(p.state[x]) + (kh * tl.rows + r) * p.state_stride[x];
          if (s < 0 || s >= p.num_states)
            return fail("state of item " + str(x) + ", kv_head " + str(kh) + ", row " + str(r) + " is " + str(s) +
                        ", outside [0, num_states)");
          if (owner[s] != -1) return fail("state " + str(s) + " is written twice");
          owner[s] = g;
          ++assigned;
        }
      }
  }
  if (assigned != p.num_states) return fail(str(assigned) + " states are written, num_states says otherwise");

  // The merge: each (tile, kv_head, row) group is exactly one output's state range, into its
  // own row of o viewed as [total_q * num_qo_heads, head_dim].
  if (std::int64_t(p.merge_row.size()) != p.num_outputs() || p.merge_indptr.size() != p.merge_row.size() + 1)
    return fail("merge_row and merge_indptr do not hold num_outputs and num_outputs + 1 entries");
  if (p.merge_indptr.front() != 0 || p.merge_indptr.back() != p.num_states) return fail("merge_indptr does not span [0, num_states]");
  std::vector<bool> merged(group_row.size(), false);
  for (std::int64_t i = 0; i < p.num_outputs(); ++i) {
    const std::int64_t b = p.merge_indptr[i], e = p.merge_indptr[i + 1];
    if (e <= b || e > p.num_states) return fail("merge_indptr is not increasing at " + str(i));
    const std::int64_t g = owner[b];
    for (std::int64_t s = b; s < e; ++s)
      if (owner[s] != g) return fail("merge output " + str(i) + " combines states of different rows");
    if (e - b != group_chunks[g]) return fail("merge output " + str(i) + " misses some chunks of its row");
    if (merged[g]) return fail("a split row is merged twice");
    merged[g] = true;
    if (p.merge_row[i] != group_row[g])
      return fail("merge output " + str(i) + " goes to row " + str(p.merge_row[i]) + ", expected " + str(group_row[g]));
    if (p.merge_row[i] < 0 || p.merge_row[i] >= total_q * l.num_qo_heads)
      return fail("merge output " + str(i) + " goes to row " + str(p.merge_row[i]) + ", outside o");
  }
  if (std::count(merged.begin(), merged.end(), false) != 0) return fail("a split row has no merge output");
  return "";
}

// "" when a plan fits the capacity prefill_capacity promised for it.
inline std::string prefill_capacity_problem(const PrefillWorkPlan& p, const PrefillCapacity& cap) {
  using plan_detail::str;
  if (p.num_work > cap.work || p.padded_work > cap.work)
    return "the plan has " + str(p.num_work) + " (padded " + str(p.padded_work) + ") work items; prefill_capacity promised at most " +
           str(cap.work);
  if (p.num_states > cap.states)
    return "the plan has " + str(p.num_states) + " states; prefill_capacity promised at most " + str(cap.states);
  if (p.num_outputs() > cap.outputs)
    return "the plan has " + str(p.num_outputs()) + " merge outputs; prefill_capacity promised at most " + str(cap.outputs);
  return "";
}

inline std::string prefill_plans_differ(const PrefillWorkPlan& a, const PrefillWorkPlan& b) {
  if (a.large_tile != b.large_tile || a.tile_rows != b.tile_rows || a.split != b.split || a.chunk_tokens != b.chunk_tokens ||
      a.num_work != b.num_work || a.padded_work != b.padded_work || a.num_states != b.num_states ||
      a.num_outputs() != b.num_outputs())
    return "the plans differ in their scalars";
  if (a.request != b.request || a.q_row != b.q_row || a.kv_begin != b.kv_begin || a.kv_end != b.kv_end || a.state != b.state ||
      a.state_stride != b.state_stride)
    return "the plans' work items differ";
  if (a.merge_indptr != b.merge_indptr || a.merge_row != b.merge_row) return "the plans' merges differ";
  return "";
}

}  // namespace aotinfer::reference
