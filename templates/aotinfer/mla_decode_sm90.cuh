// Multi-head latent attention decode on Hopper (sm_90a): the contract of
// aotinfer/params/batch_mla_decode.h (the same work items and grid as mla_decode_mma.cuh) on
// warpgroup MMA, fed by a producer warpgroup.
//
// Shape of the problem: every query row (a head of a query token) attends to the same latent
// cache, whose 576-wide rows are K ([ckv, kpe]) and whose first 512 columns are V; so a request's
// tokens x heads rows fill the MMA's M dimension, and a stage of the cache is read once for both
// products. A CTA takes kRows = 64 packed rows (one wgmma M tile) of one work item, in three
// warpgroups:
//   - the producer (warpgroup 0, few registers) copies the rows' q once, then the item's cache
//     rows, kKv keys a stage, into a ring of kStages 128-byte-swizzled stages: by TMA where the
//     host encoded the cache's maps (16-bit caches in pages of 8, 16, 32 or a multiple of 64
//     keys: one thread issues a tile's boxes, nine a page-64 tile; the item's partial last tile
//     goes row by row), else by cp.async, one page
//     lookup per thread and key (any page size);
//   - the score consumer (warpgroup 1):
//       S = Q K^T        wgmma, A = q and B = the stage from shared memory (both K-major, 576 deep),
//       online softmax   on S in registers (aotinfer/score_fragment.cuh),
//       O[:, 0:256) += P V   wgmma, A = P from registers, B = the stage (MN-major),
//     and publishes each tile's weights P (16-bit) and its rows' rescale factors in shared memory;
//   - the value consumer (warpgroup 2): O[:, 256:512) += P V, A = the published P, B = the stage.
// O (64 x 512 fp32) would be 256 registers a thread in one warpgroup: split by columns, each
// consumer holds 128, and the score product, the larger (576 deep), is computed once.
//
// Barriers (mbarriers): q_full (q landed); per stage k_full (its copies landed: one arrival per
// producer thread's cp.async, or the TMA thread's with the tile's bytes) and k_empty (both
// consumers' products of it are done, so the producer may refill it); p_full (tile t's P and
// rescale factors are published) and p_free (the value consumer's product of tile t is done, so
// they may be overwritten); inv_full (the rows' 1 / l are in shared memory, for the value
// consumer's epilogue). The score consumer issues O of tile t - 1 and then S of tile t, so that
// a stage is released as soon as its output products are done (see consume_scores).
//
// A second entry, the seesaw (16-bit caches), serves batches whose row groups are full
// (num_heads x q_len >= 64), where the tensor pipe rather than the copies sets the pace: the two
// consumers take the tiles in turns, each computing its tiles' scores and softmax and both adding
// every tile to their half of O, so that one's softmax runs under the other's products
// (aotinfer/mla_decode_sm90_seesaw.cuh). Its stages come in three parts (kpe, and each consumer's
// half of V), each copied by TMA and released on its own barriers, so that a part is refilled
// once its last reader is done.
//
// An fp8 (e4m3) cache runs the same pipeline on f16 operands: the producer converts q to f16
// once (q_pe times kpe_scale / ckv_scale, so that one factor, ckv_scale, scales the whole score
// and the output), and widens each tile into its stage itself. The ring has no room for separate
// raw tiles (q and two stages fill shared memory), so a tile's raw bytes land in the upper half
// of its own stage and are widened in place, front to back (see produce_fp8).
#pragma once
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "aotinfer/abi.h"
#include "aotinfer/attention.cuh"
#include "aotinfer/mla_decode_sm90_seesaw.cuh"
#include "aotinfer/mla_work.cuh"
#include "aotinfer/mma.cuh"
#include "aotinfer/params/batch_mla_decode.h"
#include "aotinfer/score_fragment.cuh"
#include "aotinfer/sm90.cuh"
#include "aotinfer/smem_budget.cuh"

namespace aotinfer {

template <typename dtype, typename dtype_kv = dtype>
struct MlaDecodeSm90 {
  using Params = aotinfer_batch_mla_decode_params;
  static constexpr bool kFp8 = sizeof(dtype_kv) == 1;
  using op = std::conditional_t<kFp8, __half, dtype>;  // the wgmma operand type
  static constexpr int kCkv = AOTINFER_MLA_CKV_DIM, kKpe = AOTINFER_MLA_KPE_DIM, kDim = kCkv + kKpe;
  static constexpr int kRows = 64;  // packed query rows: one wgmma M tile
  static constexpr int kThreads = 3 * 128;
  // 64 keys a stage (an m64n64 score tile), 2 stages: with q, what 227 KiB hold. 32 keys x 4
  // stages measured the same on the memory-bound rows and 5-15 % slower on the compute-bound ones
  // (m64n32 score products from shared memory).
  static constexpr int kKv = 64, kStages = 2;
  // Rows are 64-wide column blocks of 128 bytes (sm90::sw128_offset): 8 of ckv, then kpe's.
  static constexpr int kBlocks = kDim / 64;
  static constexpr int kHalf = kCkv / 2;  // output columns a consumer holds
  static constexpr int kQBytes = kRows * kDim * 2;
  static constexpr int kStageBytes = kKv * kDim * 2;
  static constexpr int kPBytes = kRows * kKv * 2;
  // Shared memory from a 1024-aligned base: q, the stages, P, the rescale factors, the rows'
  // 1 / l for the value consumer's epilogue, mbarriers, then the seesaw's running maxima and its
  // two partial row sums.
  static constexpr int kStagesOffset = kQBytes;
  static constexpr int kPOffset = kStagesOffset + kStages * kStageBytes;
  static constexpr int kAlphaOffset = kPOffset + kPBytes;
  static constexpr int kInvOffset = kAlphaOffset + kRows * 4;
  static constexpr int kBarOffset = kInvOffset + kRows * 4;
  // A stage's parts, each copied and released on its own barriers: kpe (block 8, read by the
  // score product only) and the two output halves' V columns (blocks 0-3 and 4-7).
  static constexpr int kParts = 3, kKpePart = 0;
  static constexpr int kNumBars = 5 + 2 * kParts * kStages;
  static constexpr int kSmemBytes = kBarOffset + 8 * kNumBars;
  static constexpr int kMaxOffset = kSmemBytes;
  static constexpr int kSumOffset = kMaxOffset + kRows * 4;
  static constexpr int kSeesawSmemBytes = kSumOffset + 2 * kRows * 4;
  // (Checked in the pass that compiles it: the host pass and the scanner budget 99 KiB.)
  static_assert(!kSm90Pass || kSeesawSmemBytes <= kSmemPerCta, "shared memory budget");
  static_assert(kQBytes % 1024 == 0 && kStageBytes % 1024 == 0 && kPBytes % 1024 == 0, "swizzle atoms stay aligned");
  // Registers per thread after reallocation (prefill_sm90.cuh says why the split must fit what
  // the CTA launched with): the score consumer holds S, P and its half of O; the value consumer
  // only its half of O.
  static constexpr int kProducerRegs = 56, kScoreRegs = 240, kValueRegs = 208;
  // The seesaw's second warpgroup holds what the first does (S, P and its half of O): the 16-bit
  // producer, which only issues copies, gives it registers.
  static constexpr int kSeesawProducerRegs = 40, kSeesawRegs = 224;
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(128 * (kProducerRegs + kScoreRegs + kValueRegs) <= kThreads * kLaunchRegs &&
                    128 * (kSeesawProducerRegs + kScoreRegs + kSeesawRegs) <= kThreads * kLaunchRegs,
                "the register split must fit what the CTA launched with");
  // Producer copies: 8 threads a row, thread c copying chunk c of every 64-wide block, so an
  // instruction of 8 threads reads 128 consecutive bytes.
  static constexpr int kRowsPerPass = 128 / 8;
  static constexpr int kKeysPerThread = kKv / kRowsPerPass;
  // fp8: a tile's raw rows land in the upper half of its stage, block-major (raw block b: bytes
  // 64 b .. 64 b + 63 of every row, 64 bytes a row); 4 threads a row, thread c copying chunk c of
  // each raw block.
  static constexpr int kRawOffset = kStageBytes / 2, kRawBlockBytes = kKv * 64;
  static constexpr int kRawRowsPerPass = 128 / 4, kRawKeysPerThread = kKv / kRawRowsPerPass;
  static constexpr int kWideBlockBytes = kKv * 128;
  static constexpr int kQBatch = 5;  // q chunks converted together (fp8)
  static_assert(kRawOffset + kBlocks * kRawBlockBytes == kStageBytes, "the raw tile fills the upper half");
  static constexpr int kProducerBarrier = 1;  // named barrier of the producer warpgroup

  static constexpr aotinfer_launch_info launch =
      make_launch_info<Params>(kThreads, kSmemBytes, kRows, kKv, kCkv, kFp8 ? 0u : AOTINFER_MLA_READS_CACHE_MAPS);
  static constexpr aotinfer_launch_info seesaw_launch =
      make_launch_info<Params>(kThreads, kSeesawSmemBytes, kRows, kKv, kCkv, AOTINFER_MLA_READS_CACHE_MAPS | AOTINFER_MLA_SEESAW);

  struct Shared {
    char* q;
    char* kv;
    char* p;
    float* alpha;
    float* max;
    float* inv;
    float* sum;
    uint64_t* bars;
    // The seesaw over TMA copies: each part of a stage lands and is released on its own
    // barriers. Otherwise part 0's barriers stand for the whole stage.
    bool parts;
    __device__ __forceinline__ Shared(char* base, bool parts_apart)
        : q(base),
          kv(base + kStagesOffset),
          p(base + kPOffset),
          alpha(reinterpret_cast<float*>(base + kAlphaOffset)),
          max(reinterpret_cast<float*>(base + kMaxOffset)),
          inv(reinterpret_cast<float*>(base + kInvOffset)),
          sum(reinterpret_cast<float*>(base + kSumOffset)),
          bars(reinterpret_cast<uint64_t*>(base + kBarOffset)),
          parts(parts_apart) {}
    __device__ __forceinline__ char* stage(int t) const { return kv + (t % kStages) * kStageBytes; }
    __device__ __forceinline__ uint64_t* q_full() const { return bars; }
    __device__ __forceinline__ uint64_t* p_full() const { return bars + 1; }
    __device__ __forceinline__ uint64_t* p_free() const { return bars + 2; }
    __device__ __forceinline__ uint64_t* inv_full() const { return bars + 3; }
    // The seesaw: warpgroup x's publications (the two barriers of p_full and p_free), and both
    // partial row sums written.
    __device__ __forceinline__ uint64_t* published(int x) const { return bars + 1 + x; }
    __device__ __forceinline__ uint64_t* sums_full() const { return bars + 4 + 2 * kParts * kStages; }
    // Tile t's stage (part `part` of it) landed: k_full; released by its last readers: k_empty.
    __device__ __forceinline__ uint64_t* k_full(int t, int part = 0) const {
      return bars + 4 + (parts ? (t % kStages) * kParts + part : t % kStages);
    }
    __device__ __forceinline__ uint64_t* k_empty(int t, int part = 0) const {
      return bars + 4 + (parts ? (kStages + t % kStages) * kParts + part : kStages + t % kStages);
    }
    __device__ __forceinline__ int num_parts() const { return parts ? kParts : 1; }
    __device__ __forceinline__ void wait_released(int t) const {
      for (int part = 0; part < num_parts(); ++part) sm90::mbar_wait(k_empty(t, part), parity(t) ^ 1);
    }
    // Phase parity of tile t's use of its stage.
    static __device__ __forceinline__ uint32_t parity(int t) { return uint32_t(t / kStages) & 1; }
  };

  // The CTA's share of the work: keys [begin, end) of one request for packed rows row_base ..
  struct Item {
    int index, begin, end, kv_len, num_tiles, rows, row_base;
    int64_t first_token;
    const int32_t* pages;
    __device__ __forceinline__ Item(const Params& p, int x, int row_group)
        : index(x),
          begin(p.work_kv_begin[x]),
          end(p.work_kv_end[x]),
          kv_len(p.work_kv_len[x]),
          num_tiles((end - begin + kKv - 1) / kKv),
          rows(p.q_len * p.num_heads),
          row_base(row_group * kRows),
          first_token(int64_t(p.work_request[x]) * p.q_len),
          pages(p.kv_indices + p.work_page_begin[x]) {}
  };

  static __device__ void run(const Params& p) { run_schedule<false>(p); }
  static __device__ void run_seesaw(const Params& p) { run_schedule<true>(p); }

  // The CTA: kSeesaw picks the consumers' schedule (two entries; the host launches the one that
  // suits the batch: aotinfer/mla_decode_sm90_seesaw.cuh).
  template <bool kSeesaw>
  static __device__ void run_schedule(const Params& p) {
    const MlaCta cta;
    if (cta.item >= *p.num_work) return;
    extern __shared__ __align__(1024) char smem_raw[];
    const Item it(p, cta.item, cta.row_group);
    const Shared sh(smem_raw, kSeesaw && tma_tiles(p, it));
    if (threadIdx.x == 0) {
      sm90::mbar_init(sh.q_full(), 128);  // every producer thread's copies
      sm90::mbar_init(sh.p_full(), 128);
      sm90::mbar_init(sh.p_free(), 128);
      sm90::mbar_init(sh.inv_full(), 128);
      if (kSeesaw) sm90::mbar_init(sh.sums_full(), 256);
      // A stage's row copies arrive by themselves, one arrival a producer thread; by TMA its one
      // thread arms the barrier for the bytes (see produce). A stage is released by both
      // consumers, a part by its one last reader (aotinfer/mla_decode_sm90_seesaw.cuh).
      const int copy_arrivals = tma_tiles(p, it) ? 1 : 128;
      for (int s = 0; s < kStages; ++s)
        for (int part = 0; part < sh.num_parts(); ++part) {
          sm90::mbar_init(sh.k_full(s, part), copy_arrivals);
          sm90::mbar_init(sh.k_empty(s, part), sh.parts ? 128 : 256);
        }
    }
    __syncthreads();
    const int role = threadIdx.x / 128;
    if constexpr (kSeesaw) {
      static_assert(!kFp8, "the seesaw runs on 16-bit caches");
      if (role == 0) {
        sm90::shrink_registers<kSeesawProducerRegs>();
        produce(p, sh, it);
      } else if (role == 1) {
        sm90::grow_registers<kScoreRegs>();
        MlaSeesawConsumer<MlaDecodeSm90, 0>::run(p, sh, it);
      } else {
        sm90::grow_registers<kSeesawRegs>();
        MlaSeesawConsumer<MlaDecodeSm90, 1>::run(p, sh, it);
      }
    } else if (role == 0) {
      sm90::shrink_registers<kProducerRegs>();
      if constexpr (kFp8) {
        produce_fp8(p, sh, it);
      } else {
        produce(p, sh, it);
      }
    } else if (role == 1) {
      sm90::grow_registers<kScoreRegs>();
      consume_scores(p, sh, it);
    } else {
      sm90::grow_registers<kValueRegs>();
      consume_values(p, sh, it);
    }
  }

  // One 576-wide row into a tile of `rows` rows: this thread's 16-byte chunk of each 64-wide
  // block. `dst` is the chunk's place in the row's first block; `nope` and `pe` are byte pointers
  // to the chunk in the row's ckv part and its kpe part. Every other address is an immediate
  // offset from these (4-5 address instructions a copy otherwise, which took issue slots from the
  // consumers).
  template <int rows>
  static __device__ __forceinline__ void copy_row(char* dst, const char* nope, const char* pe, bool valid) {
#pragma unroll
    for (int b = 0; b < kBlocks - 1; ++b) cp_async_16(dst + b * rows * 128, nope + b * 128, valid);
    cp_async_16(dst + (kBlocks - 1) * rows * 128, pe, valid);
  }

  // The cache addresses of this thread's keys of tile t, row0 + kPass i (chunk c, 16 bytes, of
  // each), whether each is in the item, and their pages looked up when constructed, which the
  // caller does before it waits for the stage so that the lookups' latency hides behind the
  // wait. TileRows copies them whole (16-bit caches); produce_fp8 copies them raw.
  template <int kPass>
  struct KeyRows {
    static constexpr int kKeys = kKv / kPass;
    const char* nope[kKeys];
    const char* pe[kKeys];
    bool valid[kKeys];
    __device__ __forceinline__ KeyRows(const Params& p, const Item& it, const FastDiv& by_page, int t, int row0, int c) {
      constexpr int kElem = int(sizeof(dtype_kv));
      const char* const ckv = static_cast<const char*>(p.ckv) + c * 16;
      const char* const kpe = static_cast<const char*>(p.kpe) + c * 16;
      const int start = it.begin + t * kKv;
#pragma unroll
      for (int i = 0; i < kKeys; ++i) {
        const int pos = start + row0 + i * kPass;
        const int index = int(by_page(uint32_t(pos))), slot = pos - index * p.page_size;
        valid[i] = pos < it.end;
        const int64_t page = valid[i] ? it.pages[index] : 0;
        nope[i] = ckv + page * p.ckv_stride_page * kElem + slot * (kCkv * kElem);
        pe[i] = kpe + page * p.kpe_stride_page * kElem + slot * (kKpe * kElem);
      }
    }
  };
  // A 16-bit tile's rows, copied by cp.async into the stage (zeros past the item's end); dst is
  // this thread's chunk of the stage's first row.
  struct TileRows : KeyRows<kRowsPerPass> {
    using KeyRows<kRowsPerPass>::KeyRows;
    __device__ __forceinline__ void copy(char* dst) const {
#pragma unroll
      for (int i = 0; i < kKeysPerThread; ++i)
        copy_row<kKv>(dst + i * kRowsPerPass * 128, this->nope[i], this->pe[i], this->valid[i]);
    }
  };

  // Warpgroup 0: q, then every tile's cache rows (zeros past the item's end). The copies arrive
  // on their barrier by themselves once landed (cp.async.mbarrier.arrive.noinc), so the producer
  // runs ahead as far as the ring allows; a tile's page lookups go out before it waits for the
  // stage, so their latency hides behind the wait. Thread (row0, c) copies chunk c of rows
  // row0 + 16 i, which share row0's swizzle (row % 8).
  static __device__ void produce(const Params& p, const Shared& sh, const Item& it) {
    const int c = int(threadIdx.x) % 8, row0 = int(threadIdx.x) / 8;
    const int dst0 = row0 * 128 + ((c ^ (row0 & 7)) << 4);
    constexpr int kElem = int(sizeof(dtype));
#pragma unroll 1
    for (int i = 0; i < kRows / kRowsPerPass; ++i) {
      const int n = it.row_base + row0 + i * kRowsPerPass;
      const bool valid = n < it.rows;
      const int t = valid ? n / p.num_heads : 0, h = valid ? n - t * p.num_heads : 0;
      const char* nope = static_cast<const char*>(p.q_nope) +
                         ((it.first_token + t) * p.q_nope_stride_token + int64_t(h) * kCkv) * kElem + c * 16;
      const char* pe = static_cast<const char*>(p.q_pe) +
                       ((it.first_token + t) * p.q_pe_stride_token + int64_t(h) * kKpe) * kElem + c * 16;
      copy_row<kRows>(sh.q + dst0 + i * kRowsPerPass * 128, nope, pe, valid);
    }
    sm90::cp_async_arrive(sh.q_full());
    if (tma_tiles(p, it)) {
      produce_tma(p, sh, it, dst0, c);
      return;
    }

    const FastDiv by_page(uint32_t(p.page_size));
#pragma unroll 1
    for (int t = 0; t < it.num_tiles; ++t) {
      const TileRows rows(p, it, by_page, t, row0, c);
      if (t >= kStages) sm90::mbar_wait(sh.k_empty(t), Shared::parity(t) ^ 1);
      rows.copy(sh.stage(t) + dst0);
      sm90::cp_async_arrive(sh.k_full(t));
    }
    cp_async_commit();
    cp_async_wait<0>();  // nothing in flight when the producer's threads exit
  }

  // Whether the item's full tiles come by TMA: the host encoded the maps for a page size whose
  // boxes tile a stage whole (aotinfer/params/batch_mla_decode.h), and the item starts on a box
  // (the planner cuts requests in whole tiles).
  static __device__ __forceinline__ bool tma_tiles(const Params& p, const Item& it) {
    return !kFp8 && p.cache_maps_encoded && it.begin % min(p.page_size, kKv) == 0;
  }

  // The cache's tiles by TMA: one thread arms a stage's barrier for its bytes and issues, for
  // each box of min(page_size, 64) keys, the box of each 64-wide column block (nine boxes a
  // page-64 tile), so the other producer threads take no issue slot from the consumers. A box
  // lands in the stage's 128-byte swizzle as the row copies would. The boxes go through L2
  // evict-first: a tile is read by the item's row groups at about the same time, and then only
  // the split states that the merge reads need L2 (3 % faster on most rows, 12 % on a split
  // 128-head row; docs/PERF.md). An L2 prefetch of the next tile's boxes made every row slower
  // (1.1-1.6x). The item's last tile, when partial, goes row by row as in produce: past the
  // request's last key a box would bring whatever the page holds there (or another request's
  // page), and a NaN there would reach the output through a zero weight; the row copies write
  // zeros instead.
  static __device__ void produce_tma(const Params& p, const Shared& sh, const Item& it, int dst0, int c) {
    const int box_rows = min(p.page_size, kKv);
    const FastDiv by_page(uint32_t(p.page_size));
    const int full_tiles = (it.end - it.begin) / kKv;
    if (threadIdx.x % 128 == 0) {
      sm90::tma_prefetch_map(&p.ckv_map);
      sm90::tma_prefetch_map(&p.kpe_map);
      const uint64_t once = sm90::l2_evict_first();
#pragma unroll 1
      for (int t = 0; t < full_tiles; ++t) {
        // The tile's first page looked up before the stage wait, which hides its latency; a
        // tile's later boxes (pages under 64 keys) start their pages.
        const int start = it.begin + t * kKv;
        const int first = int(by_page(uint32_t(start))), first_slot = start - first * p.page_size;
        const int first_page = it.pages[first];
        char* const stage = sh.stage(t);
        if (!sh.parts) {
          if (t >= kStages) sm90::mbar_wait(sh.k_empty(t), Shared::parity(t) ^ 1);
          uint64_t* const full = sh.k_full(t);
          sm90::mbar_arrive_expect_tx(full, kStageBytes);
#pragma unroll 1
          for (int key = 0; key < kKv; key += box_rows) {
            const int slot = key == 0 ? first_slot : 0, page = key == 0 ? first_page : it.pages[first + key / box_rows];
#pragma unroll
            for (int b = 0; b < kBlocks - 1; ++b)
              sm90::tma_load_3d(stage + b * kKv * 128 + key * 128, &p.ckv_map, full, b * 64, slot, page, once);
            sm90::tma_load_3d(stage + (kBlocks - 1) * kKv * 128 + key * 128, &p.kpe_map, full, 0, slot, page, once);
          }
          continue;
        }
        // The seesaw's parts, in the order their readers release them: kpe after the score
        // product, then the output half of the warpgroup that owns the tile (t % 2), then the other.
        const int own = 1 + t % 2;
#pragma unroll 1
        for (int i = 0; i < kParts; ++i) {
          const int part = i == 0 ? kKpePart : i == 1 ? own : 3 - own;
          if (t >= kStages) sm90::mbar_wait(sh.k_empty(t, part), Shared::parity(t) ^ 1);
          uint64_t* const full = sh.k_full(t, part);
          sm90::mbar_arrive_expect_tx(full, part == kKpePart ? kKv * 128 : 4 * kKv * 128);
#pragma unroll 1
          for (int key = 0; key < kKv; key += box_rows) {
            const int slot = key == 0 ? first_slot : 0, page = key == 0 ? first_page : it.pages[first + key / box_rows];
            char* const dst = stage + key * 128;
            if (part == kKpePart) {
              sm90::tma_load_3d(dst + (kBlocks - 1) * kKv * 128, &p.kpe_map, full, 0, slot, page, once);
            } else {
#pragma unroll
              for (int b = 4 * (part - 1); b < 4 * part; ++b)
                sm90::tma_load_3d(dst + b * kKv * 128, &p.ckv_map, full, b * 64, slot, page, once);
            }
          }
        }
      }
    }
    if (full_tiles < it.num_tiles) produce_last_rows(p, sh, it, full_tiles, dst0, c, by_page);
    cp_async_commit();
    cp_async_wait<0>();  // q's copies: nothing in flight when the producer's threads exit
  }

  // The partial last tile t of produce_tma: every producer thread's row copies, zeros past the
  // end, then one arrival once all have landed. The threads meet thread 0 first: their stage
  // wait may then be for the phase after the one thread 0 last waited for, never further on (a
  // parity wait cannot tell phases two apart).
  static __device__ void produce_last_rows(const Params& p, const Shared& sh, const Item& it, int t, int dst0, int c,
                                           const FastDiv& by_page) {
    sm90::named_barrier_sync<128>(kProducerBarrier);
    const TileRows rows(p, it, by_page, t, int(threadIdx.x % 128) / 8, c);
    if (t >= kStages) sh.wait_released(t);
    rows.copy(sh.stage(t) + dst0);
    cp_async_commit();
    cp_async_wait<0>();
    sm90::named_barrier_sync<128>(kProducerBarrier);  // every thread's rows landed
    if (threadIdx.x % 128 == 0)
      for (int part = 0; part < sh.num_parts(); ++part) sm90::mbar_arrive(sh.k_full(t, part));
  }

  // fp8 cache: q converted to f16 (q_pe by kpe_scale / ckv_scale) through registers, then
  // every tile copied raw into the upper half of its stage and widened in place. Widening goes
  // block by block, 64 rows x 4 raw chunks a block, two chunks a thread (a quarter-warp reads
  // 128 contiguous bytes); wide block b overwrites raw blocks 2 b - 9 and 2 b - 8, which every
  // thread has read once all have passed the producer barrier after reading raw block b.
  static __device__ void produce_fp8(const Params& p, const Shared& sh, const Item& it) {
    {
      const int c = int(threadIdx.x) % 8, row0 = int(threadIdx.x) / 8;
      const float pe_factor = p.kpe_scale / p.ckv_scale;
#pragma unroll 1
      for (int i = 0; i < kRows / kRowsPerPass; ++i) {
        const int n = it.row_base + row0 + i * kRowsPerPass;
        const bool valid = n < it.rows;
        const int t = valid ? n / p.num_heads : 0, h = valid ? n - t * p.num_heads : 0;
        const dtype* nope = static_cast<const dtype*>(p.q_nope) + (it.first_token + t) * p.q_nope_stride_token +
                            int64_t(h) * kCkv + c * 8;
        const dtype* pe = static_cast<const dtype*>(p.q_pe) + (it.first_token + t) * p.q_pe_stride_token +
                          int64_t(h) * kKpe + c * 8;
        char* const dst = sh.q + (row0 + i * kRowsPerPass) * 128 + ((c ^ (row0 & 7)) << 4);
        // A row's chunks in two batches whose loads fly together (all nine spilled at 56 registers).
#pragma unroll
        for (int b0 = 0; b0 < kBlocks; b0 += kQBatch) {
          uint4 raw[kQBatch];
#pragma unroll
          for (int k = 0; k < kQBatch && b0 + k < kBlocks; ++k) {
            const int b = b0 + k;
            raw[k] = valid ? *reinterpret_cast<const uint4*>(b < kBlocks - 1 ? nope + b * 64 : pe) : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
          for (int k = 0; k < kQBatch && b0 + k < kBlocks; ++k) {
            const int b = b0 + k;
            float x[8];
            load8(reinterpret_cast<const dtype*>(&raw[k]), x);
            const float factor = b == kBlocks - 1 ? pe_factor : 1.f;
#pragma unroll
            for (int e = 0; e < 8; ++e) x[e] *= factor;
            store8(reinterpret_cast<__half*>(dst + b * kRows * 128), x);
          }
        }
      }
      sm90::fence_async_shared();
      sm90::mbar_arrive(sh.q_full());
    }

    const int c = int(threadIdx.x) % 4, row0 = int(threadIdx.x) / 4;
    const FastDiv by_page(uint32_t(p.page_size));
#pragma unroll 1
    for (int t = 0; t < it.num_tiles; ++t) {
      const KeyRows<kRawRowsPerPass> keys(p, it, by_page, t, row0, c);
      const auto& nope = keys.nope;
      const auto& pe = keys.pe;
      const auto& valid = keys.valid;
      if (t >= kStages) sm90::mbar_wait(sh.k_empty(t), Shared::parity(t) ^ 1);
      char* const stage = sh.stage(t);
      char* const raw = stage + kRawOffset + c * 16;
#pragma unroll
      for (int i = 0; i < kRawKeysPerThread; ++i) {
        char* const row = raw + (row0 + i * kRawRowsPerPass) * 64;
#pragma unroll
        for (int b = 0; b < kBlocks - 1; ++b) cp_async_16(row + b * kRawBlockBytes, nope[i] + b * 64, valid[i]);
        cp_async_16(row + (kBlocks - 1) * kRawBlockBytes, pe[i], valid[i]);
      }
      cp_async_commit();
      cp_async_wait<0>();
      sm90::named_barrier_sync<128>(kProducerBarrier);  // every thread's raw bytes landed
#pragma unroll 1  // (unrolled, the blocks' reads were hoisted together and spilled at 56 registers)
      for (int b = 0; b < kBlocks; ++b) {
        uint4 r[2];
#pragma unroll
        for (int u = 0; u < 2; ++u)
          r[u] = *reinterpret_cast<const uint4*>(stage + kRawOffset + b * kRawBlockBytes + (int(threadIdx.x) + 128 * u) * 16);
        // A wide block reaching into the raw half overwrites raw blocks every thread must have
        // read first (2 b - 9 and 2 b - 8, at most b).
        if ((b + 1) * kWideBlockBytes > kRawOffset) sm90::named_barrier_sync<128>(kProducerBarrier);
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int unit = int(threadIdx.x) + 128 * u, key = unit / 4, chunk = 8 * b + 2 * (unit % 4);
          *reinterpret_cast<uint4*>(stage + sm90::sw128_offset(kKv, key, chunk)) = widen_fp8x8<dtype_kv>(r[u].x, r[u].y);
          *reinterpret_cast<uint4*>(stage + sm90::sw128_offset(kKv, key, chunk + 1)) = widen_fp8x8<dtype_kv>(r[u].z, r[u].w);
        }
      }
      sm90::fence_async_shared();  // the widened tile is read by wgmma (async proxy)
      sm90::mbar_arrive(sh.k_full(t));
    }
  }

  // The consumers' shared steps on a warpgroup's score fragment (both schedules).
  // The last key CTA row `row` sees (several query tokens: causal among them).
  static __device__ __forceinline__ int last_key_of(const Params& p, const Item& it, int row) {
    return it.kv_len - p.q_len + min(it.row_base + row, it.rows - 1) / p.num_heads;
  }
  // Tile t's softmax step, its keys past the item's end or a row's last key masked first.
  static __device__ __forceinline__ void tile_softmax(const Params& p, const Item& it, int t, float (&s)[kKv / 8][4],
                                                      float (&row_m)[2], float (&row_l)[2], float (&alpha)[2],
                                                      float scale, const int (&last_key)[2]) {
    const int start = it.begin + t * kKv;
    if (start + kKv > it.end || start + kKv - 1 > it.kv_len - p.q_len)
      mask_scores(s, start, it.end, {INT_MIN, INT_MIN}, last_key);
    softmax_step</*kLazyMax=*/true>(s, row_m, row_l, alpha, scale);
  }
  // Row half h of the weights into the P slot: rows of 128 bytes, 16-byte chunk j of row r at
  // chunk j ^ (r % 8) (sw128).
  static __device__ __forceinline__ void store_weights(char* slot, const float (&s)[kKv / 8][4], int h, int row, int lane) {
#pragma unroll
    for (int j = 0; j < kKv / 8; ++j)
      *reinterpret_cast<uint32_t*>(slot + row * 128 + ((j ^ (row & 7)) << 4) + (lane % 4) * 4) =
          pack2<op>(s[j][2 * h], s[j][2 * h + 1]);
  }

  // Warpgroup 1: the scores, the softmax, and output columns 0 .. kHalf - 1.
  static __device__ void consume_scores(const Params& p, const Shared& sh, const Item& it) {
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    // Softmax in log2 units (score_fragment.cuh); an fp8 cache's ckv_scale scales every score.
    const float scale = p.sm_scale * (kFp8 ? p.ckv_scale : 1.f) * kLog2e;
    float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.f, 0.f}, alpha[2] = {1.f, 1.f};
    float o[kHalf / 8][4], s[kKv / 8][4];
#pragma unroll
    for (int j = 0; j < kHalf / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
#pragma unroll
    for (int j = 0; j < kKv / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
    auto& o_flat = reinterpret_cast<float(&)[kHalf / 2]>(o);
    auto& s_flat = reinterpret_cast<float(&)[kKv / 2]>(s);
    uint32_t p_frag[kKv / 16][4];  // weights of the tile whose output product is next or in flight

    const int last_key[2] = {last_key_of(p, it, 16 * warp + lane / 4), last_key_of(p, it, 16 * warp + lane / 4 + 8)};

    // S = Q K^T of tile t, issued: 576 deep in k16 steps, a step 32 bytes along a 128-byte row
    // and every 4 steps the next 64-wide block.
    const uint64_t q_desc = sm90::sw128_desc(sm90::smem_u32(sh.q));
    auto issue_scores = [&](int t) {
      const uint64_t k_desc = sm90::sw128_desc(sm90::smem_u32(sh.stage(t)));
#pragma unroll
      for (int kk = 0; kk < kDim / 16; ++kk)
        sm90::wgmma_ss<op>(s_flat, sm90::desc_advance(q_desc, (kk / 4) * kRows * 128 + (kk % 4) * 32),
                              sm90::desc_advance(k_desc, (kk / 4) * kKv * 128 + (kk % 4) * 32), kk > 0);
      sm90::wgmma_commit();
    };
    // O[:, 0:kHalf) += P V of tile t, issued: 16 keys a step (two 1024-byte row groups); V's
    // 64-wide blocks are kKv * 128 bytes apart (the leading byte offset).
    auto issue_output = [&](int t) {
      const uint64_t v_desc = sm90::sw128_desc(sm90::smem_u32(sh.stage(t)), kKv * 128);
#pragma unroll
      for (int jj = 0; jj < kKv / 16; ++jj) sm90::wgmma_rs<op>(o_flat, p_frag[jj], sm90::desc_advance(v_desc, jj * 2048));
      sm90::wgmma_commit();
    };
    auto softmax_scores = [&](int t) { tile_softmax(p, it, t, s, row_m, row_l, alpha, scale, last_key); };
    // Tile t's weights and rescale factors to the value consumer, once it is done with tile
    // t - 1's.
    auto publish = [&](int t) {
      if (t > 0) sm90::mbar_wait(sh.p_free(), uint32_t(t - 1) & 1);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = 16 * warp + lane / 4 + 8 * h;
        store_weights(sh.p, s, h, row, lane);
        if (lane % 4 == 0) sh.alpha[row] = alpha[h];
      }
      sm90::fence_async_shared();  // P is read by the value consumer's wgmma (async proxy)
      sm90::mbar_arrive(sh.p_full());
#pragma unroll
      for (int jj = 0; jj < kKv / 16; ++jj) weights_fragment<op>(p_frag[jj], s, jj);
    };
    auto rescale_output = [&]() {
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) rescale_rows(o, alpha);
    };

    // Software pipeline: tile t - 1's output product goes out before tile t's score product,
    // so that it is done, and the stage of tile t - 1 released to the producer, while the score
    // product runs. (The other order lets the softmax overlap the output product, but holds
    // both stages through the score product: 1.07-1.16x slower on every row with row copies,
    // 1.13-1.24x on the 128-head rows with the copies by TMA, docs/PERF.md.)
    sm90::mbar_wait(sh.q_full(), 0);
    const int n = it.num_tiles;
    if (n > 0) {
      sm90::mbar_wait(sh.k_full(0), 0);
      sm90::fence_async_shared();  // the copies landed through the generic proxy
      sm90::wgmma_fence();
      issue_scores(0);
      sm90::wgmma_wait<0>();
      sm90::pin(s_flat);
      softmax_scores(0);
      publish(0);
    }
#pragma unroll 1
    for (int t = 1; t < n; ++t) {
      rescale_output();  // by tile t - 1's factors
      sm90::wgmma_fence();
      issue_output(t - 1);
      sm90::mbar_wait(sh.k_full(t), Shared::parity(t));
      sm90::fence_async_shared();
      sm90::wgmma_fence();
      issue_scores(t);
      sm90::wgmma_wait<1>();  // the output product of tile t - 1
      sm90::pin(o_flat);
      sm90::pin(p_frag);
      sm90::mbar_arrive(sh.k_empty(t - 1));
      sm90::wgmma_wait<0>();  // the scores
      sm90::pin(s_flat);
      softmax_scores(t);
      publish(t);
    }
    if (n > 0) {
      rescale_output();
      sm90::wgmma_fence();
      issue_output(n - 1);
      sm90::wgmma_wait<0>();
      sm90::pin(o_flat);
      sm90::pin(p_frag);
      sm90::mbar_arrive(sh.k_empty(n - 1));
    }

    float inv[2], lse[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const RowResult r(row_m[h], row_l[h], scale);
      inv[h] = r.inv;
      lse[h] = r.lse;
      if (lane % 4 == 0) sh.inv[16 * warp + lane / 4 + 8 * h] = r.inv;
    }
    sm90::mbar_arrive(sh.inv_full());
    write_output(p, it, o, inv, lse, 0);
  }

  // Warpgroup 2: output columns kHalf .. 511 from the published weights.
  static __device__ void consume_values(const Params& p, const Shared& sh, const Item& it) {
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    float o[kHalf / 8][4];
#pragma unroll
    for (int j = 0; j < kHalf / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    auto& o_flat = reinterpret_cast<float(&)[kHalf / 2]>(o);
    const int rows[2] = {16 * warp + lane / 4, 16 * warp + lane / 4 + 8};
    const uint64_t p_desc = sm90::sw128_desc(sm90::smem_u32(sh.p));
#pragma unroll 1
    for (int t = 0; t < it.num_tiles; ++t) {
      sm90::mbar_wait(sh.p_full(), uint32_t(t) & 1);
      sm90::mbar_wait(sh.k_full(t), Shared::parity(t));
      sm90::fence_async_shared();
      const float alpha[2] = {sh.alpha[rows[0]], sh.alpha[rows[1]]};
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) rescale_rows(o, alpha);
      const uint64_t v_desc = sm90::sw128_desc(sm90::smem_u32(sh.stage(t)) + (kHalf / 64) * kKv * 128, kKv * 128);
      sm90::wgmma_fence();
#pragma unroll
      for (int jj = 0; jj < kKv / 16; ++jj)
        sm90::wgmma_ss<op, /*kBMnMajor=*/true>(o_flat, sm90::desc_advance(p_desc, jj * 32),
                                                  sm90::desc_advance(v_desc, jj * 2048), true);
      sm90::wgmma_commit();
      sm90::wgmma_wait<0>();
      sm90::pin(o_flat);
      sm90::mbar_arrive(sh.p_free());
      sm90::mbar_arrive(sh.k_empty(t));
    }
    sm90::mbar_wait(sh.inv_full(), 0);
    const float inv[2] = {sh.inv[rows[0]], sh.inv[rows[1]]};
    write_output(p, it, o, inv, nullptr, 1);
  }

  // This consumer's columns (half `half`) of its rows, normalised (and, from an fp8 cache,
  // dequantised): o and lse, or a split item's float state. The score consumer passes the rows'
  // lse.
  static __device__ __forceinline__ void write_output(const Params& p, const Item& it, const float (&o)[kHalf / 8][4],
                                                      const float (&row_inv)[2], const float* lse, int half) {
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const bool split = p.partial_o != nullptr;
    const float v_scale = kFp8 ? p.ckv_scale : 1.f;
    const float inv[2] = {row_inv[0] * v_scale, row_inv[1] * v_scale};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = it.row_base + 16 * warp + lane / 4 + 8 * h;
      if (n >= it.rows) continue;
      const int64_t out_row = split ? int64_t(it.index) * it.rows + n : it.first_token * p.num_heads + n;
      const int col = half * kHalf + 2 * (lane % 4);
      if (split) {
        float* dst = p.partial_o + out_row * kCkv + col;
#pragma unroll
        for (int j = 0; j < kHalf / 8; ++j)
          *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[j][2 * h] * inv[h], o[j][2 * h + 1] * inv[h]);
        if (lse && lane % 4 == 0) p.partial_lse[out_row] = lse[h];
      } else {
        dtype* dst = static_cast<dtype*>(p.o) + out_row * kCkv + col;
#pragma unroll
        for (int j = 0; j < kHalf / 8; ++j)
          *reinterpret_cast<uint32_t*>(dst + 8 * j) = pack2<dtype>(o[j][2 * h] * inv[h], o[j][2 * h + 1] * inv[h]);
        if (lse && p.lse && lane % 4 == 0) p.lse[out_row] = lse[h];
      }
    }
  }
};

}  // namespace aotinfer
