#include "aotinfer/prefill_plan.hpp"

#include <algorithm>
#include <string>

#include "aotinfer/error.hpp"

namespace aotinfer {
namespace {

[[noreturn]] void invalid(const std::string& what) { throw Error(ErrorCode::invalid_argument, what); }

void check_limits(const PrefillPlanLimits& l) {
  if (l.num_sms < 1 || l.num_kv_heads < 1 || l.num_qo_heads < l.num_kv_heads || l.num_qo_heads % l.num_kv_heads != 0 ||
      l.large.rows < 1 || l.large.ctas_per_sm < 1 || l.small.rows < 1 || l.small.ctas_per_sm < 1 || l.kv_tile_tokens < 1)
    invalid("prefill plan limits must be positive, with num_qo_heads a multiple of num_kv_heads (num_sms " +
            std::to_string(l.num_sms) + ", heads " + std::to_string(l.num_qo_heads) + "/" + std::to_string(l.num_kv_heads) +
            ", tiles " + std::to_string(l.large.rows) + "x" + std::to_string(l.large.ctas_per_sm) + " and " +
            std::to_string(l.small.rows) + "x" + std::to_string(l.small.ctas_per_sm) + ", kv_tile_tokens " +
            std::to_string(l.kv_tile_tokens) + ")");
  if (l.kv_split.mode == KvSplit::Mode::fixed && l.kv_split.tokens < 1)
    invalid("a fixed KV split needs a chunk of >= 1 tokens, got " + std::to_string(l.kv_split.tokens));
}

// Work items that fill the GPU once with `tile`'s kernel.
std::int64_t wave_items(const PrefillPlanLimits& l, const PrefillTile& tile) {
  return std::max<std::int64_t>(1, std::int64_t(l.num_sms) * tile.ctas_per_sm / l.num_kv_heads);
}

// A tile of packed rows of one request with the keys it can see, [first, extent).
struct QueryTile {
  std::int32_t request, q_row, rows, first, extent;
  std::int32_t keys() const { return extent - first; }
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// n / d as a multiplication, for the divisors fixed per plan (the GQA group, the tile sizes): a
// hardware division takes 10-40 cycles, about what all the other work of a tile costs, and a
// large batch has thousands of tiles. With m = floor((2^64 - 1) / d), floor(m * (n + 1) / 2^64)
// is exact for every 32-bit n and d: m * (n + 1) / 2^64 = (n + 1) / d - e with
// 0 < e <= 2^-32 < 1 / d, which lies in [floor(n / d), floor(n / d) + 1).
class Divider {
 public:
  explicit Divider(std::uint32_t d) : m_(UINT64_MAX / d) {}
  std::uint32_t operator()(std::uint32_t n) const {
    return std::uint32_t((static_cast<unsigned __int128>(m_) * (std::uint64_t(n) + 1)) >> 64);
  }

 private:
  std::uint64_t m_;
};

// The keys of the tile of packed rows [row, row + tile_rows) of a request with qo queries (packed
// rows in all) and kv keys: all of them, or under a causal mask those its last token t =
// (last row) / group sees, 0 .. kv - qo + t (never beyond the request's keys: t < qo; none when
// kv - qo + t < 0, a query placed before the request's first key).
//
// Under a sliding window the tile's keys start where its first token's window does, kv - qo + t
// - window_left (first(); 0 without a window), which never passes the extent.
struct TileExtent {
  bool causal;
  std::int32_t window_left;
  std::uint32_t tile_rows;
  Divider by_group;
  std::int32_t operator()(std::int32_t qo, std::int32_t kv, std::uint32_t packed, std::uint32_t row) const {
    return causal ? std::max(0, kv - qo + std::int32_t(by_group(std::min(row + tile_rows, packed) - 1)) + 1) : kv;
  }
  std::int32_t first(std::int32_t qo, std::int32_t kv, std::uint32_t row) const {
    return window_left < 0 ? 0 : std::max(0, kv - qo + std::int32_t(by_group(row)) - window_left);
  }
};

// lengths_from_indptr's checks: [batch + 1] entries, starting at 0, not decreasing.
void check_indptr(std::span<const std::int32_t> indptr, const char* what) {
  if (indptr.empty()) invalid(std::string(what) + " must have batch + 1 entries, got an empty array");
  if (indptr[0] != 0) invalid(std::string(what) + "[0] must be 0, got " + std::to_string(indptr[0]));
  for (std::size_t i = 0; i + 1 < indptr.size(); ++i)
    if (indptr[i + 1] < indptr[i])
      invalid(std::string(what) + " must not decrease: " + what + "[" + std::to_string(i + 1) + "] = " +
              std::to_string(indptr[i + 1]) + " < " + what + "[" + std::to_string(i) + "] = " + std::to_string(indptr[i]));
}

void plan_work(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_lengths, const PrefillPlanLimits& l,
               PrefillWorkPlan& plan, const PrefillArrayPlacer& place);
void whole_tile_items(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_lengths,
                      const PrefillPlanLimits& l, PrefillWorkPlan& plan);

}  // namespace

PrefillCapacity prefill_capacity(std::int64_t max_total_q, std::int32_t max_batch, const PrefillPlanLimits& l,
                                 std::int64_t max_kv_len) {
  check_limits(l);
  // No plan holds 2^31 query tokens (or a negative count); beyond that the sizes below overflow.
  if (max_total_q < 0 || max_total_q > INT32_MAX || max_batch < 0)
    invalid("prefill capacity: max_total_q must be in 0..2^31-1 and max_batch >= 0 (got max_total_q " +
            std::to_string(max_total_q) + ", max_batch " + std::to_string(max_batch) + ")");
  const bool fixed = l.kv_split.mode == KvSplit::Mode::fixed;
  if (fixed && max_kv_len < 1)
    invalid("prefill capacity: a fixed KV split sizes its workspace by the longest request: give max_kv_len >= 1, got " +
            std::to_string(max_kv_len));
  const std::int64_t group = l.num_qo_heads / l.num_kv_heads;
  PrefillCapacity c;
  const bool graph = l.graph_work > 0;
  for (const PrefillTile* tile : {&l.large, &l.small}) {
    if ((graph || l.kv_split.invariant()) && tile == &l.small) break;  // these plans use the large tile only
    const std::int64_t wave = wave_items(l, *tile);
    // Unsplit: a request's last tile may be partial, so one extra tile per request.
    const std::int64_t unsplit = ceil_div(max_total_q * group, tile->rows) + max_batch;
    if (fixed) {
      // Every tile in up to `chunks` items; a split tile's rows take a state per chunk and KV
      // head, and the rows of all tiles are max_total_q * group per KV head.
      const std::int64_t chunks = std::max<std::int64_t>(1, ceil_div(max_kv_len, l.kv_split.chunk_for(l.kv_tile_tokens)));
      c.work = std::max(c.work, unsplit * chunks);
      c.states = std::max(c.states, chunks > 1 ? max_total_q * l.num_qo_heads * chunks : 0);
    } else if (l.kv_split.mode == KvSplit::Mode::none) {
      c.work = std::max(c.work, unsplit);
    } else {
      // Split plans exist only when the tiles fit in a wave, and each item holds at most `rows`
      // rows per head.
      c.work = std::max({c.work, unsplit, wave});
      c.states = std::max(c.states, wave * tile->rows * l.num_kv_heads);
    }
  }
  if (c.work > INT32_MAX) invalid("prefill capacity: more than 2^31 work items");
  c.outputs = std::min(c.states, max_total_q * l.num_qo_heads);
  return c;
}

void lengths_from_indptr(std::span<const std::int32_t> indptr, const char* what, std::vector<std::int32_t>& lengths) {
  check_indptr(indptr, what);
  lengths.resize(indptr.size() - 1);
  for (std::size_t i = 0; i < lengths.size(); ++i) lengths[i] = indptr[i + 1] - indptr[i];
}

std::vector<std::int32_t> lengths_from_indptr(std::span<const std::int32_t> indptr, const char* what) {
  std::vector<std::int32_t> lengths;
  lengths_from_indptr(indptr, what, lengths);
  return lengths;
}

void plan_prefill_work(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_lengths,
                       const PrefillPlanLimits& l, PrefillWorkPlan& plan) {
  // Into the plan's own vectors: resizing to the size they had is free, and every entry is
  // written, so a reused plan keeps nothing stale.
  plan_work(qo_indptr, kv_lengths, l, plan, [&plan](const PrefillWorkPlan&) {
    for (std::vector<std::int32_t>* v : {&plan.request, &plan.q_row, &plan.kv_begin, &plan.kv_end, &plan.state, &plan.state_stride})
      v->resize(std::size_t(plan.padded_work));
    plan.merge_indptr.resize(std::size_t(plan.num_outputs()) + 1);
    plan.merge_row.resize(std::size_t(plan.num_outputs()));
    return PrefillWorkArrays{plan.request.data(), plan.q_row.data(),        plan.kv_begin.data(),     plan.kv_end.data(),
                             plan.state.data(),   plan.state_stride.data(), plan.merge_indptr.data(), plan.merge_row.data()};
  });
  if (!plan.split) whole_tile_items(qo_indptr, kv_lengths, l, plan);
}

void plan_prefill_work(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_lengths,
                       const PrefillPlanLimits& l, PrefillWorkPlan& plan, const PrefillArrayPlacer& place) {
  for (std::vector<std::int32_t>* v : {&plan.request, &plan.q_row, &plan.kv_begin, &plan.kv_end, &plan.state, &plan.state_stride,
                                       &plan.merge_indptr, &plan.merge_row})
    v->clear();
  plan_work(qo_indptr, kv_lengths, l, plan, place);
}

void copy_work_arrays(const PrefillWorkArrays& a, std::span<const std::int32_t> qo_indptr,
                      std::span<const std::int32_t> kv_lengths, const PrefillPlanLimits& limits, PrefillWorkPlan& plan) {
  const std::size_t work = std::size_t(plan.padded_work), outputs = std::size_t(plan.num_outputs());
  plan.request.assign(a.request, a.request + work);
  plan.q_row.assign(a.q_row, a.q_row + work);
  if (plan.split) {
    plan.kv_begin.assign(a.kv_begin, a.kv_begin + work);
    plan.kv_end.assign(a.kv_end, a.kv_end + work);
    plan.state.assign(a.state, a.state + work);
    plan.state_stride.assign(a.state_stride, a.state_stride + work);
  } else {
    for (std::vector<std::int32_t>* v : {&plan.kv_begin, &plan.kv_end, &plan.state, &plan.state_stride}) v->resize(work);
    whole_tile_items(qo_indptr, kv_lengths, limits, plan);
  }
  plan.merge_indptr.assign(a.merge_indptr, a.merge_indptr + outputs + 1);
  plan.merge_row.assign(a.merge_row, a.merge_row + outputs);
}

namespace {

void plan_work(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_lengths, const PrefillPlanLimits& l,
               PrefillWorkPlan& plan, const PrefillArrayPlacer& place) {
  check_limits(l);
  check_indptr(qo_indptr, "qo_indptr");
  const std::int32_t batch = std::int32_t(qo_indptr.size() - 1);
  if (kv_lengths.size() != qo_indptr.size() - 1)
    invalid("qo_indptr describes " + std::to_string(batch) + " requests, the KV " + std::to_string(kv_lengths.size()));
  const std::int32_t group = l.num_qo_heads / l.num_kv_heads;
  std::int64_t packed_total = 0;
  std::int32_t longest = 0;  // the longest key extent of a tile: a request's last tile sees all its keys
  for (std::int32_t i = 0; i < batch; ++i) {
    const std::int32_t qo = qo_indptr[i + 1] - qo_indptr[i], kv = kv_lengths[i];
    if (kv < 0) invalid("request " + std::to_string(i) + " has a negative KV length, " + std::to_string(kv));
    packed_total += std::int64_t(qo) * group;
    if (qo > 0) longest = std::max(longest, kv);
  }
  if (packed_total > INT32_MAX) invalid("the batch has more than 2^31 packed query rows");

  // 1. The tile.
  const bool graph = l.graph_work > 0;
  // (Batch-invariant plans: the tile's kernel decides a row's arithmetic, so it must not follow
  // the batch.)
  plan.large_tile = graph || l.kv_split.invariant() || batch == 0 || packed_total > std::int64_t(l.small.rows) * batch;
  const PrefillTile& tile = plan.large_tile ? l.large : l.small;
  plan.tile_rows = tile.rows;
  const std::uint32_t tile_rows = std::uint32_t(tile.rows);

  // 2. Tiles and their key extents, generated on demand (a plan may have thousands: no
  // per-call allocations beyond the plan's own reused vectors). Tile j of a request holds its
  // packed rows [j * tile_rows, (j + 1) * tile_rows) (fewer in the last). Unsigned 32-bit rows:
  // a request has fewer than 2^31 packed rows (checked above), so row + tile_rows cannot wrap.
  const Divider by_group{std::uint32_t(group)}, by_tile_rows{tile_rows};
  auto tiles_of = [&](std::uint32_t packed) { return by_tile_rows(packed + tile_rows - 1); };
  const TileExtent extent_of{l.causal, l.window_left, tile_rows, by_group};
  auto for_each_tile = [&](auto&& visit) {
    for (std::int32_t i = 0; i < batch; ++i) {
      const std::int32_t qo = qo_indptr[i + 1] - qo_indptr[i], kv = kv_lengths[i];
      const std::uint32_t packed = std::uint32_t(qo) * std::uint32_t(group);
      for (std::uint32_t row = 0; row < packed; row += tile_rows)
        visit(QueryTile{i, std::int32_t(row), std::int32_t(std::min(tile_rows, packed - row)), extent_of.first(qo, kv, row),
                        extent_of(qo, kv, packed, row)});
    }
  };
  std::int64_t num_tiles = 0;
  for (std::int32_t i = 0; i < batch; ++i) num_tiles += tiles_of(std::uint32_t(qo_indptr[i + 1] - qo_indptr[i]) * std::uint32_t(group));

  // 3. The chunk: the smallest multiple of the KV tile whose items fit in a wave. Only when the
  // tiles are fewer than a wave, so these passes are short.
  const std::int64_t wave = wave_items(l, tile);
  std::int32_t most_keys = longest;  // of a tile: under a window, fewer than the longest request's
  if (l.window_left >= 0) {
    most_keys = 0;
    for_each_tile([&](const QueryTile& t) { most_keys = std::max(most_keys, t.keys()); });
  }
  const std::int64_t max_chunk_tiles = std::max<std::int64_t>(1, ceil_div(most_keys, l.kv_tile_tokens));
  auto items_for_chunk = [&](std::int64_t chunk) {
    std::int64_t items = 0;
    for_each_tile([&](const QueryTile& t) { items += std::max<std::int64_t>(1, ceil_div(t.keys(), chunk)); });
    return items;
  };
  std::int64_t chunk_tiles = max_chunk_tiles;
  if (l.kv_split.mode == KvSplit::Mode::fixed) {
    // The same chunk edges for every request whatever the batch (past every extent: no split).
    chunk_tiles = std::min(max_chunk_tiles, l.kv_split.chunk_for(l.kv_tile_tokens) / l.kv_tile_tokens);
  } else if (l.kv_split.mode == KvSplit::Mode::adaptive && num_tiles < wave) {
    std::int64_t lo = 1, hi = max_chunk_tiles;
    while (lo < hi) {
      const std::int64_t mid = (lo + hi) / 2;
      if (items_for_chunk(mid * l.kv_tile_tokens) <= wave) hi = mid;
      else lo = mid + 1;
    }
    chunk_tiles = lo;
  }
  const std::int64_t chunk = chunk_tiles * l.kv_tile_tokens;
  const bool split = chunk_tiles < max_chunk_tiles;
  plan.split = split;
  plan.chunk_tokens = split ? std::int32_t(chunk) : 0;
  auto chunks_of = [&](const QueryTile& t) { return std::int32_t(std::max<std::int64_t>(1, ceil_div(t.keys(), chunk))); };
  // Chunk c of a split tile: keys [first + c * chunk, min(extent, first + (c + 1) * chunk)).
  auto chunk_begin = [&](const QueryTile& t, std::int32_t c) { return std::int32_t(t.first + c * chunk); };
  auto chunk_end = [&](const QueryTile& t, std::int32_t c) {
    return std::int32_t(std::min<std::int64_t>(t.extent, t.first + (c + 1) * chunk));
  };

  // 4. Longest first: a stable counting sort on the number of sort units of each item, 0 ..
  // ceil(longest / unit) (PrefillPlanLimits::sort_unit_tokens: items with as many units cost
  // about the same). Unsigned 32-bit: the rounding sum passes INT32_MAX for keys near 2^31.
  const std::uint32_t unit = std::uint32_t(l.sort_unit_tokens());
  const Divider by_unit{unit};
  auto units = [&](std::int32_t keys) { return std::size_t(by_unit(std::uint32_t(keys) + unit - 1)); };
  // Per number of units: how many (runs unsplit, items split), then the first slot of each.
  std::vector<std::int32_t>& bucket = plan.scratch;
  bucket.assign(std::size_t(ceil_div(longest, unit)) + 1, 0);

  // Unsplit plans (every large batch): an item is a tile, and along a request the tiles' units
  // never decrease, so they come in runs of equal cost. The sort orders the runs (a few
  // per request), and step 5 writes the items in slot order. Scattering the items over the
  // buckets instead costs more than all the rest: consecutive items go to different regions of
  // each array, which in a batch of equal requests lie a multiple of 4 KiB apart and evict each
  // other from the cache.
  //
  // A causal request's run of k units: token t sees kv - qo + t + 1 keys, so its first
  // unit * k - kv + qo tokens see at most k units (fewer than qo below the request's last k),
  // and a tile j other than the last has its last token among them when (j + 1) * tile_rows
  // <= that many tokens * group. The last tile sees every key. Each k's run end is computed on
  // its own, not from the previous run's: that would chain three multiplications run to run.
  //
  // plan.runs: (request, first tile, end tile, units) per run, then the runs in sorted
  // order; room for as many runs as tiles.
  std::int32_t* run = nullptr;
  std::size_t num_runs = 0;
  std::int64_t num_work = num_tiles, num_states = 0, num_outputs = 0;
  if (!split && l.window_left >= 0) {
    // Under a window a tile's keys do not grow along its request (they stay near the window's
    // length): every tile is a run of its own.
    plan.runs.resize(5 * std::size_t(num_tiles));
    run = plan.runs.data();
    std::int32_t j = 0, request = -1;
    for_each_tile([&](const QueryTile& t) {
      j = t.request == request ? j + 1 : 0;
      request = t.request;
      const std::size_t k = units(t.keys());
      std::int32_t* const r = run + 4 * num_runs++;
      r[0] = t.request, r[1] = j, r[2] = j + 1, r[3] = std::int32_t(k);
      ++bucket[k];
    });
  } else if (!split) {
    plan.runs.resize(5 * std::size_t(num_tiles));
    run = plan.runs.data();
    for (std::int32_t i = 0; i < batch; ++i) {
      const std::int32_t qo = qo_indptr[i + 1] - qo_indptr[i], kv = kv_lengths[i];
      const std::uint32_t packed = std::uint32_t(qo) * std::uint32_t(group), tiles = tiles_of(packed);
      if (tiles == 0) continue;
      const std::size_t last = units(kv);
      std::uint32_t first = 0;
      for (std::size_t k = units(extent_of(qo, kv, packed, 0)); k <= last; ++k) {
        const std::uint32_t tokens = std::uint32_t(std::int64_t(k) * unit - kv + qo);
        const std::uint32_t end = k == last ? tiles : std::min(tiles - 1, by_tile_rows(tokens * std::uint32_t(group)));
        if (end == first) continue;  // no tile has k units
        std::int32_t* const r = run + 4 * num_runs++;
        r[0] = i, r[1] = std::int32_t(first), r[2] = std::int32_t(end), r[3] = std::int32_t(k);
        ++bucket[k];
        first = end;
      }
    }
  } else {
    // Split tiles also count their merge outputs (kv_heads * rows) and states (one per output
    // and chunk).
    num_work = 0;
    for_each_tile([&](const QueryTile& t) {
      const std::int32_t chunks = chunks_of(t);
      for (std::int32_t c = 0; c < chunks; ++c) ++bucket[units(chunk_end(t, c) - chunk_begin(t, c))];
      num_work += chunks;
      if (chunks > 1) {
        num_outputs += std::int64_t(l.num_kv_heads) * t.rows;
        num_states += std::int64_t(l.num_kv_heads) * t.rows * chunks;
      }
    });
  }
  if (num_work > INT32_MAX) invalid("the batch needs more than 2^31 work items");
  plan.num_work = std::int32_t(num_work);
  if (graph && plan.num_work > l.graph_work)
    invalid("this batch needs " + std::to_string(plan.num_work) + " work items; the CUDA-graph grid holds " +
            std::to_string(l.graph_work) + " (raise max_total_q or max_batch; with a fixed KV split, max_kv_len)");
  if (num_states > INT32_MAX) invalid("the batch needs more than 2^31 split states");
  plan.padded_work = graph ? l.graph_work : plan.num_work;
  plan.num_states = std::int32_t(num_states);
  plan.merge_outputs = std::int32_t(num_outputs);
  // Counts to first slots, the most units first.
  std::int32_t first_slot = 0;
  for (std::size_t k = bucket.size(); k-- > 0;) {
    const std::int32_t count = bucket[k];
    bucket[k] = first_slot;
    first_slot += count;
  }

  // 5. Items, the states of split tiles and the merge outputs, straight into the caller's arrays.
  const PrefillWorkArrays out = place(plan);
  std::int32_t *const request = out.request, *const q_row = out.q_row, *const kv_begin = out.kv_begin,
                      *const kv_end = out.kv_end, *const state = out.state, *const state_stride = out.state_stride;
  out.merge_indptr[0] = 0;
  if (!split) {
    // The runs in sorted order, then their tiles in consecutive slots, each a whole tile
    // written directly to o. Only request and q_row: without split tiles the kernels take an
    // item's keys from its request (the causal cut gives the tile's extent), so the rest is left
    // to whole_tile_items(); computing the extents here cost a third of the plan's time.
    std::int32_t* const order = run + 4 * num_tiles;
    for (std::size_t r = 0; r < num_runs; ++r) order[bucket[std::size_t(run[4 * r + 3])]++] = std::int32_t(r);
    std::int32_t x = 0;
    for (std::size_t s = 0; s < num_runs; ++s) {
      const std::int32_t* const r = run + 4 * std::size_t(order[s]);
      const std::uint32_t row_end = std::uint32_t(r[2]) * tile_rows;
      for (std::uint32_t row = std::uint32_t(r[1]) * tile_rows; row < row_end; row += tile_rows, ++x) {
        request[x] = r[0];
        q_row[x] = std::int32_t(row);
      }
    }
  } else {
    std::int32_t states = 0, outputs = 0;
    for_each_tile([&](const QueryTile& t) {
      const std::int32_t chunks = chunks_of(t);
      if (chunks == 1) {  // the whole tile in one item, written directly to o
        const std::int32_t x = bucket[units(t.keys())]++;
        request[x] = t.request;
        q_row[x] = t.q_row;
        kv_begin[x] = t.first;
        kv_end[x] = t.extent;
        state[x] = -1;
        state_stride[x] = 0;
        return;
      }
      // State (kv_head, row, chunk) = first_state + (kv_head * rows + row) * chunks + chunk.
      for (std::int32_t c = 0; c < chunks; ++c) {
        const std::int32_t begin = chunk_begin(t, c), end = chunk_end(t, c);
        const std::int32_t x = bucket[units(end - begin)]++;
        request[x] = t.request;
        q_row[x] = t.q_row;
        kv_begin[x] = begin;
        kv_end[x] = end;
        state[x] = states + c;
        state_stride[x] = chunks;
      }
      // One merge output per (kv_head, row), in state order: packed row token * group + g goes
      // to o row token * num_qo_heads + kv_head * group + g (token and g stepped, not divided).
      const std::int32_t first_token = std::int32_t(by_group(std::uint32_t(t.q_row)));
      const std::int32_t first_g = t.q_row - first_token * group;
      for (std::int32_t kv_head = 0; kv_head < l.num_kv_heads; ++kv_head) {
        std::int32_t token = qo_indptr[t.request] + first_token, g = first_g;
        for (std::int32_t r = 0; r < t.rows; ++r) {
          out.merge_row[outputs] = token * l.num_qo_heads + kv_head * group + g;
          states += chunks;
          out.merge_indptr[++outputs] = states;
          if (++g == group) g = 0, ++token;
        }
      }
    });
  }

  // CUDA-graph padding: empty direct items (the kernels skip items past num_work).
  const std::size_t pad_from = std::size_t(plan.num_work), pad = std::size_t(plan.padded_work - plan.num_work);
  for (std::int32_t* a : {out.request, out.q_row}) std::fill_n(a + pad_from, pad, 0);
  if (split) {
    for (std::int32_t* a : {out.kv_begin, out.kv_end, out.state_stride}) std::fill_n(a + pad_from, pad, 0);
    std::fill_n(out.state + pad_from, pad, -1);
  }
}

// What an unsplit plan leaves unwritten, into the plan's vectors (padded_work entries each):
// every item covers its tile's keys (which the kernels find themselves) and writes o directly;
// padding items are empty.
void whole_tile_items(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_lengths,
                      const PrefillPlanLimits& l, PrefillWorkPlan& plan) {
  const std::uint32_t group = std::uint32_t(l.num_qo_heads / l.num_kv_heads);
  const TileExtent extent_of{l.causal, l.window_left, std::uint32_t(plan.tile_rows), Divider{group}};
  for (std::int32_t x = 0; x < plan.padded_work; ++x) {
    std::int32_t first = 0, extent = 0;
    if (x < plan.num_work) {
      const std::int32_t i = plan.request[x], qo = qo_indptr[i + 1] - qo_indptr[i];
      first = extent_of.first(qo, kv_lengths[i], std::uint32_t(plan.q_row[x]));
      extent = extent_of(qo, kv_lengths[i], std::uint32_t(qo) * group, std::uint32_t(plan.q_row[x]));
    }
    plan.kv_begin[x] = first;
    plan.kv_end[x] = extent;
    plan.state[x] = -1;
    plan.state_stride[x] = 0;
  }
}

}  // namespace

}  // namespace aotinfer
