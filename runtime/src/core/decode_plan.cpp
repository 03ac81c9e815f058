#include "aotinfer/decode_plan.hpp"

#include <algorithm>
#include <functional>
#include <string>

#include "aotinfer/error.hpp"

namespace aotinfer {
namespace {

[[noreturn]] void invalid(const std::string& what) { throw Error(ErrorCode::invalid_argument, what); }

std::int64_t items_for_chunk(std::span<const std::int32_t> lengths, const DecodePlanLimits& l, std::int64_t chunk) {
  std::int64_t items = 0;
  for (std::int32_t len : lengths) items += std::max<std::int64_t>(1, (len - l.first_key(len) + chunk - 1) / chunk);
  return items;
}

// A batch of at least a wave of requests: whole requests fill the GPU, but a request longer than
// twice a wave slot's fair share of the keys (the batch's keys / wave) would keep its CTAs
// running long after the others finished (one 128k-key request among short ones: its own
// length, not the batch's, sets the time). Then every request is cut into chunks of that
// share, at most batch + wave items (decode_max_work). Otherwise whole requests (max tiles).
std::int64_t balanced_chunk_tiles(std::int64_t longest, std::int64_t total, std::int32_t wave, std::int32_t tile) {
  const std::int64_t share = (total + wave - 1) / wave;
  if (longest <= 2 * share) return INT64_MAX;
  return std::max<std::int64_t>(1, (share + tile - 1) / tile);
}

void check_limits(const DecodePlanLimits& l) {
  if (l.num_sms < 1 || l.ctas_per_sm < 1 || l.ctas_per_item < 1 || l.tile_tokens < 1)
    invalid("decode plan limits must be positive (num_sms " + std::to_string(l.num_sms) + ", ctas_per_sm " +
            std::to_string(l.ctas_per_sm) + ", ctas_per_item " + std::to_string(l.ctas_per_item) + ", tile_tokens " +
            std::to_string(l.tile_tokens) + ")");
  if (l.kv_split.mode == KvSplit::Mode::fixed && l.kv_split.tokens < 1)
    invalid("a fixed KV split needs a chunk of >= 1 tokens, got " + std::to_string(l.kv_split.tokens));
}

}  // namespace

std::int32_t decode_wave_items(const DecodePlanLimits& l) {
  check_limits(l);
  return std::max<std::int32_t>(1, std::int32_t(std::int64_t(l.num_sms) * l.ctas_per_sm / l.ctas_per_item));
}

std::int32_t decode_max_work(std::int32_t max_batch, const DecodePlanLimits& l, std::int64_t max_kv_len) {
  const std::int32_t wave = decode_wave_items(l);  // checks the limits
  switch (l.kv_split.mode) {
    case KvSplit::Mode::adaptive:  // one wave of chunks below a wave of requests; up to batch + wave above (balanced_chunk_tiles)
      return max_batch >= wave ? max_batch + wave : wave;
    case KvSplit::Mode::none:
      return max_batch;
    case KvSplit::Mode::fixed: break;
  }
  if (max_kv_len < 1)
    invalid("a fixed KV split sizes its workspace by the longest request: give max_kv_len >= 1, got " +
            std::to_string(max_kv_len));
  const std::int64_t items = std::int64_t(max_batch) * std::max<std::int64_t>(1, (max_kv_len + l.kv_split.chunk_for(l.tile_tokens) - 1) /
                                                                                     l.kv_split.chunk_for(l.tile_tokens));
  if (items > INT32_MAX)
    invalid("max_batch " + std::to_string(max_batch) + " requests of up to " + std::to_string(max_kv_len) + " keys in chunks of " +
            std::to_string(l.kv_split.chunk_for(l.tile_tokens)) + " need more than 2^31 work items");
  return std::int32_t(items);
}

std::vector<std::int32_t> decode_kv_lengths(std::span<const std::int32_t> indptr, std::span<const std::int32_t> last_page_len,
                                            std::int32_t page_size) {
  if (page_size < 1) invalid("page_size must be >= 1, got " + std::to_string(page_size));
  if (indptr.empty()) invalid("kv_indptr must have batch + 1 entries, got an empty array");
  const std::size_t batch = indptr.size() - 1;
  if (last_page_len.size() != batch)
    invalid("kv_last_page_len has " + std::to_string(last_page_len.size()) + " entries; kv_indptr describes " +
            std::to_string(batch) + " requests");
  if (indptr[0] != 0) invalid("kv_indptr[0] must be 0, got " + std::to_string(indptr[0]));
  std::vector<std::int32_t> lengths(batch);
  for (std::size_t i = 0; i < batch; ++i) {
    const std::int64_t pages = std::int64_t(indptr[i + 1]) - indptr[i];
    if (pages < 0)
      invalid("kv_indptr must not decrease: kv_indptr[" + std::to_string(i + 1) + "] = " + std::to_string(indptr[i + 1]) +
              " < kv_indptr[" + std::to_string(i) + "] = " + std::to_string(indptr[i]));
    if (pages > 0 && (last_page_len[i] < 1 || last_page_len[i] > page_size))
      invalid("kv_last_page_len[" + std::to_string(i) + "] = " + std::to_string(last_page_len[i]) +
              " is outside 1.." + std::to_string(page_size) + " for a request with " + std::to_string(pages) + " pages");
    const std::int64_t len = pages == 0 ? 0 : (pages - 1) * page_size + last_page_len[i];
    if (len > INT32_MAX) invalid("request " + std::to_string(i) + " has more than 2^31 KV tokens");
    lengths[i] = std::int32_t(len);
  }
  return lengths;
}

void plan_decode_work(std::span<const std::int32_t> lengths, const DecodePlanLimits& l, DecodeWorkPlan& plan) {
  const std::int32_t wave = decode_wave_items(l);
  const std::int32_t batch = std::int32_t(lengths.size());
  const bool graph = l.graph_work > 0;
  if (graph && batch > l.graph_work)
    invalid("a CUDA-graph plan holds at most " + std::to_string(l.graph_work) + " work items; got a batch of " +
            std::to_string(batch) + " (raise max_batch)");

  // The smallest tile-multiple chunk whose item count fits in one wave. A batch that fills a
  // wave by itself runs whole requests, unless one request would run on alone after the others
  // (balanced_chunk_tiles). Lengths count the keys a request attends to (its window's).
  std::int32_t longest = 0;
  std::int64_t total = 0;
  for (std::int32_t len : lengths) {
    longest = std::max(longest, len - l.first_key(len));
    total += len - l.first_key(len);
  }
  const std::int64_t max_tiles = std::max<std::int64_t>(1, (std::int64_t(longest) + l.tile_tokens - 1) / l.tile_tokens);
  // chunk_tokens is an int32 tile multiple that may span a whole request.
  if (max_tiles * l.tile_tokens > INT32_MAX)
    invalid("a request has " + std::to_string(longest) + " KV tokens; this kernel serves at most " +
            std::to_string(INT32_MAX / l.tile_tokens * l.tile_tokens) + " (2^31 - 1 rounded down to its tile of " +
            std::to_string(l.tile_tokens) + " tokens)");
  std::int64_t chunk_tiles = max_tiles;
  if (l.kv_split.mode == KvSplit::Mode::fixed) {
    // The same chunk edges for every request whatever the batch (longer than every request:
    // whole requests, which are the same items).
    chunk_tiles = std::min(max_tiles, l.kv_split.chunk_for(l.tile_tokens) / l.tile_tokens);
  } else if (l.kv_split.mode == KvSplit::Mode::adaptive && batch < wave) {
    std::int64_t lo = 1, hi = max_tiles;  // items(max_tiles) = batch fits; find the smallest that fits
    while (lo < hi) {
      const std::int64_t mid = (lo + hi) / 2;
      if (items_for_chunk(lengths, l, mid * l.tile_tokens) <= wave) hi = mid;
      else lo = mid + 1;
    }
    chunk_tiles = lo;
  } else if (l.kv_split.mode == KvSplit::Mode::adaptive) {
    chunk_tiles = std::min(max_tiles, balanced_chunk_tiles(longest, total, wave, l.tile_tokens));
  }
  const std::int64_t chunk = chunk_tiles * l.tile_tokens;
  plan.split = graph || chunk_tiles < max_tiles;
  plan.chunk_tokens = plan.split ? std::int32_t(chunk) : 0;

  plan.request.clear();
  plan.kv_begin.clear();
  plan.kv_end.clear();
  plan.merge_indptr.assign(1, 0);
  auto add_request = [&](std::int32_t i) {  // its items, then its merge_indptr row
    const std::int32_t len = lengths[i], first = l.first_key(len);
    const std::int64_t step = plan.split ? chunk : std::max<std::int64_t>(len - first, 1);
    std::int64_t begin = first;
    do {
      plan.request.push_back(i);
      plan.kv_begin.push_back(std::int32_t(begin));
      plan.kv_end.push_back(std::int32_t(std::min<std::int64_t>(len, begin + step)));
      begin += step;
    } while (begin < len);
    plan.merge_indptr.push_back(std::int32_t(plan.request.size()));
  };
  // Whole requests over more than a wave go out longest first, so that the longest CTAs start in
  // the first wave instead of trailing the last one; split plans keep request order, which
  // merge_indptr's rows follow. A request's sort key is its key count above its position counted
  // from the end, so that one descending sort of plain integers keeps equal lengths in order
  // (a stable sort with a comparator took 2.5 us for 256 requests).
  if (!plan.split && batch > wave) {
    std::vector<std::uint64_t> order(batch);
    for (std::int32_t i = 0; i < batch; ++i)
      order[i] = std::uint64_t(lengths[i] - l.first_key(lengths[i])) << 32 | std::uint32_t(batch - 1 - i);
    if (!std::is_sorted(order.begin(), order.end(), std::greater<>())) std::sort(order.begin(), order.end(), std::greater<>());
    for (std::uint64_t keyed : order) add_request(batch - 1 - std::int32_t(keyed & 0xffffffffu));
  } else {
    for (std::int32_t i = 0; i < batch; ++i) add_request(i);
  }
  plan.num_work = std::int32_t(plan.request.size());
  if (graph && plan.num_work > l.graph_work)  // only a fixed split can: its grid is sized by max_kv_len
    invalid("a CUDA-graph plan holds at most " + std::to_string(l.graph_work) + " work items; this batch's requests in chunks of " +
            std::to_string(chunk) + " keys need " + std::to_string(plan.num_work) + " (a request is longer than max_kv_len)");
  plan.padded_work = graph ? l.graph_work : plan.num_work;
  plan.request.resize(plan.padded_work, 0);
  plan.kv_begin.resize(plan.padded_work, 0);
  plan.kv_end.resize(plan.padded_work, 0);
  if (!plan.split) plan.merge_indptr.clear();
}

}  // namespace aotinfer
