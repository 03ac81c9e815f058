// What a prefill CTA works on (aotinfer/params/batch_prefill.h): where its request's K and V rows
// live (the KvRows policies: a paged cache or ragged tensors) and its work item, cut to the keys
// its query rows can see. Both prefill kernels (prefill_mma.cuh, prefill_sm90.cuh) share them.
#pragma once
#include "aotinfer/abi.h"
#include "aotinfer/attention.cuh"
#include "aotinfer/params/batch_prefill.h"
#include "aotinfer/score_fragment.cuh"

namespace aotinfer {

// The row widths of a prefill variant (templates/batch_prefill.cuh): q and K rows are qk wide,
// V and o rows vo wide. Equal for every model but those with multi-head latent attention, whose
// prefill runs at 192 / 128; there V has its own strides (the params' v_stride_*), and the
// kernels keep the plain 16-bit path (no fp8 widening, no RoPE: MLA models rotate a 64-wide
// part of q and k outside attention).
template <int kQk, int kVo>
struct PrefillDims {
  static constexpr int qk = kQk, vo = kVo;
  static constexpr bool kSplit = kQk != kVo;
  static_assert(kSplit ? kQk == 192 && kVo == 128 : kQk == 64 || kQk == 96 || kQk == 128 || kQk == 256,
                "head_dim 64, 96, 128 or 256 with head_dim_vo equal to it, or head_dim 192 with head_dim_vo 128");
};

// A request's keys in a paged cache, for one KV head: element offset of key `pos`.
template <typename T>
struct PagedKvRows {
  const T* k;
  const T* v;
  const int32_t* pages;
  int64_t stride_page, stride_token;
  int page_size;
  FastDiv page_of;  // key -> page index
  int length;

  __device__ __forceinline__ PagedKvRows(const aotinfer_batch_prefill_params& p, int request, int kv_head)
      : page_of(uint32_t(p.paged.page_size)) {
    const aotinfer_paged_kv& kv = p.paged;
    const int first = kv.indptr[request], num_pages = kv.indptr[request + 1] - first;
    k = static_cast<const T*>(kv.k_pages) + kv_head * kv.stride_head;
    v = static_cast<const T*>(kv.v_pages) + kv_head * p.v_stride_head;
    pages = kv.indices + first;
    stride_page = kv.stride_page;
    stride_token = kv.stride_token;
    page_size = kv.page_size;
    length = num_pages == 0 ? 0 : (num_pages - 1) * kv.page_size + kv.last_page_len[request];
  }
  static __device__ __forceinline__ int num_kv_heads(const aotinfer_batch_prefill_params& p) {
    return p.paged.num_kv_heads;
  }
  __device__ __forceinline__ int64_t offset(int pos) const {
    const int page = int(page_of(uint32_t(pos)));
    return int64_t(pages[page]) * stride_page + int64_t(pos - page * page_size) * stride_token;
  }
  // Element offset of key `pos` in V where its strides are its own (PrefillDims::kSplit).
  __device__ __forceinline__ int64_t v_offset(const aotinfer_batch_prefill_params& p, int pos) const {
    const int page = int(page_of(uint32_t(pos)));
    return int64_t(pages[page]) * p.v_stride_page + int64_t(pos - page * page_size) * p.v_stride_token;
  }
};

// A request's keys in ragged K/V tensors, for one KV head.
template <typename T>
struct RaggedKvRows {
  const T* k;
  const T* v;
  int64_t stride_token;
  int first;  // the request's key 0 is token `first` of k and v
  int length;

  __device__ __forceinline__ RaggedKvRows(const aotinfer_batch_prefill_params& p, int request, int kv_head) {
    const aotinfer_ragged_kv& kv = p.ragged;
    first = kv.indptr[request];
    k = static_cast<const T*>(kv.k) + int64_t(first) * kv.stride_token + kv_head * kv.stride_head;
    v = static_cast<const T*>(kv.v) + int64_t(first) * p.v_stride_token + kv_head * p.v_stride_head;
    stride_token = kv.stride_token;
    length = kv.indptr[request + 1] - first;
  }
  static __device__ __forceinline__ int num_kv_heads(const aotinfer_batch_prefill_params& p) {
    return p.ragged.num_kv_heads;
  }
  __device__ __forceinline__ int64_t offset(int pos) const { return int64_t(pos) * stride_token; }
  __device__ __forceinline__ int64_t v_offset(const aotinfer_batch_prefill_params& p, int pos) const {
    return int64_t(pos) * p.v_stride_token;
  }
};

// Packed query row n >= 0 = token * group + head (GQA packing) as its token and head, which step
// along with n without a division per row (one by the run-time group costs about 50
// instructions).
struct PackedRow {
  int token, head;
  __device__ __forceinline__ PackedRow(int n, int group, const FastDiv& by_group)
      : token(int(by_group(uint32_t(n)))), head(n - token * group) {}
  // By a division, where no FastDiv is at hand (one made at the start of a kernel and kept for
  // its end holds registers through the key loop).
  __device__ __forceinline__ PackedRow(int n, int group) : token(n / group), head(n - token * group) {}
  // n += step (a PackedRow of the step).
  __device__ __forceinline__ void advance(const PackedRow& step, int group) {
    token += step.token;
    head += step.head;
    if (head >= group) {
      head -= group;
      ++token;
    }
  }
};

// Work item `item` for KV head `kv_head` of `num_kv_heads`, with tiles of `tile_rows` packed
// query rows and `kv_tile` keys.
template <template <typename> class KvRows, typename T>
struct PrefillCta {
  int item, kv_head, request, q_row;
  KvRows<T> rows;
  int group;       // query heads per KV head
  int qo_begin;    // first query token of the request
  int valid_rows;  // packed rows of this tile that exist
  int q_offset;    // position of query token 0 (kv_len - qo_len)
  int t_first, t_last;  // query tokens of the first and last valid row
  int begin, end;       // the keys this CTA visits: its item's range, cut to what its rows can see
  int num_tiles;
  int state, state_stride;  // the item's float states (-1: o/lse directly)

  // `by_group` divides by `group` (p.num_qo_heads / num_kv_heads), made once per launch or CTA.
  __device__ __forceinline__ PrefillCta(const aotinfer_batch_prefill_params& p, int item, int head, int group,
                                        const FastDiv& by_group, int tile_rows, int kv_tile)
      : item(item),
        kv_head(head),
        request(p.work_request[item]),
        q_row(p.work_q_row[item]),
        rows(p, request, kv_head),
        group(group) {
    qo_begin = p.qo_indptr[request];
    const int qo_len = p.qo_indptr[request + 1] - qo_begin;
    valid_rows = min(tile_rows, qo_len * group - q_row);
    q_offset = rows.length - qo_len;
    t_first = int(by_group(uint32_t(q_row)));
    t_last = int(by_group(uint32_t(max(q_row + valid_rows - 1, 0))));
    // Without split tiles every item covers its tile's keys (the request's, cut below) and writes
    // o (the planner leaves the split-only arrays unwritten).
    const bool split = *p.num_merge_rows != 0;
    begin = split ? p.work_kv_begin[item] : 0;
    state = split ? p.work_state[item] : -1;
    state_stride = split ? p.work_state_stride[item] : 0;
    end = split ? min(p.work_kv_end[item], rows.length) : rows.length;
    if (p.mask_mode == AOTINFER_MASK_CAUSAL) end = min(end, q_offset + t_last + 1);
    begin = max(begin, q_offset + t_first - p.window_left);
    num_tiles = end > begin ? (end - begin + kv_tile - 1) / kv_tile : 0;
  }

  // Query row `row` of the tile (packed row q_row + row) in q.
  template <typename Q>
  __device__ __forceinline__ const Q* q_source(const aotinfer_batch_prefill_params& p, int row, int head_dim) const {
    const int packed = q_row + row, t = packed / group, head = kv_head * group + packed % group;
    return static_cast<const Q*>(p.q) + int64_t(qo_begin + t) * p.q_stride_token + head * head_dim;
  }
  // Element offset of the row of packed row `at` (stepped by the caller) in q, whose tokens are
  // q_stride_token elements apart.
  __device__ __forceinline__ int64_t q_offset_of(const aotinfer_batch_prefill_params& p, const PackedRow& at,
                                                 int head_dim) const {
    return int64_t(qo_begin + at.token) * p.q_stride_token + (kv_head * group + at.head) * head_dim;
  }
  // Element offset of the row of packed row `at` (q_row + row, stepped by the caller) in o,
  // [total_q, num_qo_heads, head_dim].
  __device__ __forceinline__ int64_t row_offset(const aotinfer_batch_prefill_params& p, const PackedRow& at,
                                                int head_dim) const {
    return (int64_t(qo_begin + at.token) * p.num_qo_heads + kv_head * group + at.head) * head_dim;
  }
  // Row index of packed row q_row + row in o viewed as [total_q * num_qo_heads, head_dim], and
  // in lse.
  __device__ __forceinline__ int64_t out_row(const aotinfer_batch_prefill_params& p, int row) const {
    const int packed = q_row + row;
    return int64_t(qo_begin + packed / group) * p.num_qo_heads + kv_head * group + packed % group;
  }
  // Whether the rows take their sinks: sinks given and the item is its tile's first chunk (as
  // every item that writes o is), which starts at key 0 or, under a window, where the window of
  // the tile's first row starts. Asked at the epilogue, not kept through the key loop, where the
  // mma.sync kernel has no register to spare.
  __device__ __forceinline__ bool takes_sink(const aotinfer_batch_prefill_params& p) const {
    if (!p.sinks) return false;
    if (state < 0) return true;
    const int first_key = max(0, q_offset + t_first - p.window_left);
    return p.work_kv_begin[item] <= first_key;
  }
  // The sink of packed row q_row + row, folded into its normalisation (when takes_sink).
  __device__ __forceinline__ void add_sink(const aotinfer_batch_prefill_params& p, int row, RowResult& r) const {
    r.add_sink(p.sinks[kv_head * group + (q_row + row) % group]);
  }
};

// The key loops a kernel is compiled with. The large tile's `prefill` entry serves masks none and
// causal without windows or soft caps (the common case): its plain loop keeps no register and no
// test for the features it cannot meet, so it runs as fast as the variants that once left those
// out at compile time. `prefill_general` (and the small tile's one entry, `prefill_small`) serve
// every feature: windows, soft caps and ALiBi (the feature loop), and custom masks (the Hopper kernel's
// custom loop adds the mask's bits, loaded ahead; the mma.sync kernel tests them in its one
// general loop).
enum class KeyLoop { plain, features, custom };

}  // namespace aotinfer
