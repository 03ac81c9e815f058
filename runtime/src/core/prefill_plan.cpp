#include "aotinfer/prefill_plan.hpp"

#include <algorithm>
#include <numeric>
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
}

// Work items that fill the GPU once with `tile`'s kernel.
std::int64_t wave_items(const PrefillPlanLimits& l, const PrefillTile& tile) {
  return std::max<std::int64_t>(1, std::int64_t(l.num_sms) * tile.ctas_per_sm / l.num_kv_heads);
}

// A tile of packed rows of one request with the keys it can see.
struct QueryTile {
  std::int32_t request, q_row, rows, extent;
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

void plan_work(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_lengths, const PrefillPlanLimits& l,
               PrefillWorkPlan& plan, const PrefillArrayPlacer& place);

}  // namespace

PrefillCapacity prefill_capacity(std::int64_t max_total_q, std::int32_t max_batch, const PrefillPlanLimits& l) {
  check_limits(l);
  // No plan holds 2^31 query tokens (or a negative count); beyond that the sizes below overflow.
  if (max_total_q < 0 || max_total_q > INT32_MAX || max_batch < 0)
    invalid("prefill capacity: max_total_q must be in 0..2^31-1 and max_batch >= 0 (got max_total_q " +
            std::to_string(max_total_q) + ", max_batch " + std::to_string(max_batch) + ")");
  const std::int64_t group = l.num_qo_heads / l.num_kv_heads;
  PrefillCapacity c;
  const bool graph = l.graph_work > 0;
  for (const PrefillTile* tile : {&l.large, &l.small}) {
    if (graph && tile == &l.small) break;  // graph plans use the large tile only
    const std::int64_t wave = wave_items(l, *tile);
    // Unsplit: a request's last tile may be partial, so one extra tile per request. Split plans
    // exist only when the tiles fit in a wave, and each item holds at most `rows` rows per head.
    const std::int64_t unsplit = ceil_div(max_total_q * group, tile->rows) + max_batch;
    c.work = std::max({c.work, unsplit, wave});
    c.states = std::max(c.states, wave * tile->rows * l.num_kv_heads);
  }
  c.outputs = std::min(c.states, max_total_q * l.num_qo_heads);
  return c;
}

std::vector<std::int32_t> lengths_from_indptr(std::span<const std::int32_t> indptr, const char* what) {
  if (indptr.empty()) invalid(std::string(what) + " must have batch + 1 entries, got an empty array");
  if (indptr[0] != 0) invalid(std::string(what) + "[0] must be 0, got " + std::to_string(indptr[0]));
  std::vector<std::int32_t> lengths(indptr.size() - 1);
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (indptr[i + 1] < indptr[i])
      invalid(std::string(what) + " must not decrease: " + what + "[" + std::to_string(i + 1) + "] = " +
              std::to_string(indptr[i + 1]) + " < " + what + "[" + std::to_string(i) + "] = " + std::to_string(indptr[i]));
    lengths[i] = indptr[i + 1] - indptr[i];
  }
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
}

void plan_prefill_work(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_lengths,
                       const PrefillPlanLimits& l, PrefillWorkPlan& plan, const PrefillArrayPlacer& place) {
  for (std::vector<std::int32_t>* v : {&plan.request, &plan.q_row, &plan.kv_begin, &plan.kv_end, &plan.state, &plan.state_stride,
                                       &plan.merge_indptr, &plan.merge_row})
    v->clear();
  plan_work(qo_indptr, kv_lengths, l, plan, place);
}

namespace {

void plan_work(std::span<const std::int32_t> qo_indptr, std::span<const std::int32_t> kv_lengths, const PrefillPlanLimits& l,
               PrefillWorkPlan& plan, const PrefillArrayPlacer& place) {
  check_limits(l);
  const std::vector<std::int32_t> qo_lengths = lengths_from_indptr(qo_indptr, "qo_indptr");
  const std::int32_t batch = std::int32_t(qo_lengths.size());
  if (kv_lengths.size() != qo_lengths.size())
    invalid("qo_indptr describes " + std::to_string(batch) + " requests, the KV " + std::to_string(kv_lengths.size()));
  const std::int32_t group = l.num_qo_heads / l.num_kv_heads;
  std::int64_t packed_total = 0;
  for (std::int32_t i = 0; i < batch; ++i) {
    if (kv_lengths[i] < 0)
      invalid("request " + std::to_string(i) + " has a negative KV length, " + std::to_string(kv_lengths[i]));
    if (l.causal && qo_lengths[i] > kv_lengths[i])
      invalid("request " + std::to_string(i) + " has " + std::to_string(qo_lengths[i]) + " query tokens but " +
              std::to_string(kv_lengths[i]) +
              " keys; a causal mask places the queries at the end of the KV, so qo_len must be <= kv_len");
    packed_total += std::int64_t(qo_lengths[i]) * group;
  }
  if (packed_total > INT32_MAX) invalid("the batch has more than 2^31 packed query rows");

  // 1. The tile.
  const bool graph = l.graph_work > 0;
  plan.large_tile = graph || batch == 0 || packed_total > std::int64_t(l.small.rows) * batch;
  const PrefillTile& tile = plan.large_tile ? l.large : l.small;
  plan.tile_rows = tile.rows;

  // 2. Tiles and their key extents, generated on demand (a plan may have thousands: no
  // per-call allocations beyond the plan's own reused vectors).
  auto for_each_tile = [&](auto&& visit) {
    for (std::int32_t i = 0; i < batch; ++i) {
      const std::int32_t packed = qo_lengths[i] * group, kv = kv_lengths[i];
      for (std::int32_t row = 0; row < packed; row += tile.rows) {
        const std::int32_t rows = std::min(tile.rows, packed - row);
        const std::int32_t last_token = (row + rows - 1) / group;
        const std::int32_t extent = l.causal ? std::min(kv, kv - qo_lengths[i] + last_token + 1) : kv;
        visit(QueryTile{i, row, rows, extent});
      }
    }
  };
  std::int64_t num_tiles = 0;
  std::int32_t longest = 0;
  for_each_tile([&](const QueryTile& t) { ++num_tiles, longest = std::max(longest, t.extent); });

  // 3. The chunk: the smallest multiple of the KV tile whose items fit in a wave.
  const std::int64_t wave = wave_items(l, tile);
  const std::int64_t max_chunk_tiles = std::max<std::int64_t>(1, ceil_div(longest, l.kv_tile_tokens));
  auto items_for_chunk = [&](std::int64_t chunk) {
    std::int64_t items = 0;
    for_each_tile([&](const QueryTile& t) { items += std::max<std::int64_t>(1, ceil_div(t.extent, chunk)); });
    return items;
  };
  std::int64_t chunk_tiles = max_chunk_tiles;
  if (num_tiles < wave) {
    std::int64_t lo = 1, hi = max_chunk_tiles;
    while (lo < hi) {
      const std::int64_t mid = (lo + hi) / 2;
      if (items_for_chunk(mid * l.kv_tile_tokens) <= wave) hi = mid;
      else lo = mid + 1;
    }
    chunk_tiles = lo;
  }
  const std::int64_t chunk = chunk_tiles * l.kv_tile_tokens;
  plan.split = chunk_tiles < max_chunk_tiles;
  plan.chunk_tokens = plan.split ? std::int32_t(chunk) : 0;
  auto chunks_of = [&](const QueryTile& t) {
    return plan.split ? std::int32_t(std::max<std::int64_t>(1, ceil_div(t.extent, chunk))) : 1;
  };
  // Chunk c of a tile: keys [c * chunk, min(extent, (c + 1) * chunk)) (the whole extent unsplit).
  auto chunk_end = [&](const QueryTile& t, std::int32_t c, std::int32_t chunks) {
    return chunks == 1 ? t.extent : std::int32_t(std::min<std::int64_t>(t.extent, (c + 1) * chunk));
  };

  // 4. Longest first: a stable counting sort on the number of KV tiles of each item (items with
  // as many tiles cost the same). Pass one counts, pass two writes each item into its slot.
  // Unsigned 32-bit: divisions dominate, and the rounding sum passes INT32_MAX for keys near 2^31.
  const std::uint32_t kv_tile = std::uint32_t(l.kv_tile_tokens), most_tiles = std::uint32_t(max_chunk_tiles);
  auto bucket = [&](std::int32_t begin, std::int32_t end) {  // 0 = the most KV tiles
    return std::size_t(most_tiles - (std::uint32_t(end - begin) + kv_tile - 1) / kv_tile);
  };
  std::vector<std::int32_t>& next_slot = plan.scratch;
  next_slot.assign(std::size_t(max_chunk_tiles) + 2, 0);
  // Split tiles also count their merge outputs (kv_heads * rows) and states (one per output and
  // chunk): the caller sizes the arrays before they are written.
  std::int64_t num_work = 0, num_states = 0, num_outputs = 0;
  for_each_tile([&](const QueryTile& t) {
    const std::int32_t chunks = chunks_of(t);
    for (std::int32_t c = 0; c < chunks; ++c) ++next_slot[bucket(std::int32_t(c * chunk), chunk_end(t, c, chunks)) + 1];
    num_work += chunks;
    if (chunks > 1) {
      num_outputs += std::int64_t(l.num_kv_heads) * t.rows;
      num_states += std::int64_t(l.num_kv_heads) * t.rows * chunks;
    }
  });
  for (std::size_t b = 1; b < next_slot.size(); ++b) next_slot[b] += next_slot[b - 1];

  if (num_work > INT32_MAX) invalid("the batch needs more than 2^31 work items");
  plan.num_work = std::int32_t(num_work);
  if (graph && plan.num_work > l.graph_work)
    invalid("this batch needs " + std::to_string(plan.num_work) + " work items; the CUDA-graph grid holds " +
            std::to_string(l.graph_work) + " (raise max_total_q or max_batch)");
  plan.padded_work = graph ? l.graph_work : plan.num_work;
  plan.num_states = std::int32_t(num_states);
  plan.merge_outputs = std::int32_t(num_outputs);

  // 5. Items, the states of split tiles and the merge outputs, into the caller's arrays.
  const PrefillWorkArrays out = place(plan);
  std::int32_t states = 0, outputs = 0;
  out.merge_indptr[0] = 0;
  for_each_tile([&](const QueryTile& t) {
    const std::int32_t chunks = chunks_of(t);
    const std::int32_t first_state = chunks == 1 ? -1 : states;
    for (std::int32_t c = 0; c < chunks; ++c) {
      const std::int32_t begin = std::int32_t(c * chunk), end = chunk_end(t, c, chunks);
      const std::int32_t slot = next_slot[bucket(begin, end)]++;
      out.request[slot] = t.request;
      out.q_row[slot] = t.q_row;
      out.kv_begin[slot] = chunks == 1 ? 0 : begin;
      out.kv_end[slot] = end;
      out.state[slot] = chunks == 1 ? -1 : first_state + c;
      out.state_stride[slot] = chunks == 1 ? 0 : chunks;
    }
    if (chunks == 1) return;
    // State (kv_head, row, chunk) = first_state + (kv_head * rows + row) * chunks + chunk.
    for (std::int32_t kv_head = 0; kv_head < l.num_kv_heads; ++kv_head)
      for (std::int32_t r = 0; r < t.rows; ++r) {
        const std::int32_t packed = t.q_row + r;
        out.merge_row[outputs] = (qo_indptr[t.request] + packed / group) * l.num_qo_heads + kv_head * group + packed % group;
        states += chunks;
        out.merge_indptr[++outputs] = states;
      }
  });

  // CUDA-graph padding: empty direct items (the kernels skip items past num_work).
  const std::size_t pad_from = std::size_t(plan.num_work), pad = std::size_t(plan.padded_work - plan.num_work);
  for (std::int32_t* a : {out.request, out.q_row, out.kv_begin, out.kv_end, out.state_stride}) std::fill_n(a + pad_from, pad, 0);
  std::fill_n(out.state + pad_from, pad, -1);
}

}  // namespace

}  // namespace aotinfer
