// Batch prefill on Hopper (sm_90a), FlashAttention-3 style: the same work items and contract as
// prefill_mma.cuh (aotinfer/params/batch_prefill.h), on warpgroup MMA fed from shared memory.
//
// A persistent CTA of three warpgroups works through (item, KV head) pairs (see run()), 128
// packed query rows each:
//   - the producer (warpgroup 0, few registers) copies a pair's q and then its K and V tiles of
//     kKv keys into a ring of 128-byte-swizzled shared-memory stages; per stage, an mbarrier
//     says "K landed" and another "V landed". Where the host encoded tensor maps (q, and ragged
//     K and V; aotinfer/params/batch_prefill.h), one thread issues a TMA copy per 64-column
//     block; otherwise the warpgroup copies rows with cp.async through the KvRows policy (paged
//     or ragged rows), converting q and rotating q and K for RoPE on the way. fp8 K/V land raw
//     and the producer widens them to f16 (load_kv_fp8), or, with bf16 q, only V, while K stays
//     fp8 for a score product on fp8 tensor cores against q split into two e4m3 terms
//     (kFp8Scores: split_q, load_kv_fp8_scores). Under a custom mask (general entry) the
//     producer first scans the pair's mask bits for the tiles some query token sees
//     (scan_tiles: a bitmask and its count per q slot, behind a "scanned" mbarrier), and only
//     those go through the ring; each stage also receives, with K and through K's barrier,
//     every query token's run of mask bits for the tile (stage_words);
//   - two consumers (warpgroups 1 and 2, the freed registers) own 64 rows each:
//       S = Q K^T  wgmma, A = q and B = K from shared memory (both K-major),
//       online softmax on S in registers (aotinfer/score_fragment.cuh),
//       O += P V   wgmma, A = P from registers, B = V from shared memory (MN-major),
//     and release each K and V stage through "empty" mbarriers as soon as their wgmma is done,
//     and q after the pair's last score product (or, with two q slots, after staging their
//     output rows there), so the producer moves on to the next pairs.
// Each consumer overlaps its softmax with its own products (S of tile t goes out with P V of
// tile t - 1), and the two take turns issuing (ping-pong), so one's softmax overlaps the other's
// products. Under a custom mask, a consumer first votes over its 128 threads (a reducing named
// barrier) whether any of its rows sees a key of the tile; a tile none sees takes its turn and
// releases its stages without products.
#pragma once
#include <limits.h>
#include <math.h>

#include <type_traits>

#include "aotinfer/abi.h"
#include "aotinfer/attention.cuh"
#include "aotinfer/mma.cuh"
#include "aotinfer/params/batch_prefill.h"
#include "aotinfer/prefill_work.cuh"
#include "aotinfer/score_fragment.cuh"
#include "aotinfer/sm90.cuh"
#include "aotinfer/smem_budget.cuh"

namespace aotinfer {

// Whether PrefillSm90 serves a variant (the others keep the mma.sync kernel on sm_90a too): fp8
// K/V without RoPE (whose rotation of widened K would need a barrier between the producer's
// threads) and 16-bit K/V; V narrower than K (MLA prefill) with 16-bit K/V and no RoPE only.
template <typename dtype_q, typename dtype_kv, typename Dims, typename dtype_o, PosEncoding pos_encoding>
constexpr bool prefill_sm90_serves() {
  const bool plain = sizeof(dtype_kv) == 2 && pos_encoding == PosEncoding::none;
  return sizeof(dtype_q) == 2 && sizeof(dtype_o) == 2 &&
         (Dims::kSplit ? plain : sizeof(dtype_kv) == 2 || (sizeof(dtype_kv) == 1 && pos_encoding == PosEncoding::none));
}

template <typename dtype_q, typename dtype_kv, typename Dims, typename dtype_o, PosEncoding pos_encoding,
          template <typename> class KvRows, bool kGeneral>
struct PrefillSm90 {
  static_assert(prefill_sm90_serves<dtype_q, dtype_kv, Dims, dtype_o, pos_encoding>(),
                "16-bit types, or fp8 K/V without RoPE; V narrower than K with 16-bit K/V and no RoPE");
  static constexpr int head_dim = Dims::qk;        // of q and K rows
  static constexpr int head_dim_vo = Dims::vo;     // of V and o rows
  static constexpr bool kSplitVo = Dims::kSplit;   // V has its own strides and key offsets
  // fp8 K/V land raw and the producer widens them (exactly) into f16 stages: see load_kv_fp8.
  static constexpr bool kFp8 = sizeof(dtype_kv) == 1;
  using dtype = std::conditional_t<kFp8, __half, dtype_kv>;  // the wgmma operand type (of P V)
  // fp8 K with bf16 q at head_dim 128 and 256: the score product runs on fp8 tensor cores over K
  // as it lands, against q split per row into two e4m3 terms that hold its bf16 values exactly
  // (split_q); only V is widened (load_kv_fp8_scores). The producer, which widened K and V and
  // set these rows' pace, halves its work, and the score product costs the tensor cores what
  // the 16-bit one does (two k32 fp8 steps per k16 step). f16 q (11 significant bits) and head_dim
  // 64 (0.96x of bf16 K/V already, docs/PERF.md) keep the widening.
  static constexpr bool kFp8Scores = kFp8 && sm90::is_bf16<dtype_q> && (head_dim == 128 || head_dim == 256);
  static constexpr bool kRope = pos_encoding == PosEncoding::rope_llama;
  // Which operands the TMA unit can copy as they are: q where it needs no conversion or RoPE
  // rotation, and then ragged K and V too (page tables stay with cp.async: a box per page was
  // slower, docs/PERF.md 5.15).
  static constexpr bool kReadsQMap = std::is_same_v<dtype_q, dtype> && !kRope;
  static constexpr bool kReadsKvMaps = kReadsQMap && !kFp8 && std::is_same_v<KvRows<dtype_kv>, RaggedKvRows<dtype_kv>>;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kRows = 64 * kConsumers;  // packed query rows per CTA
  // Keys per stage: 64 for head_dim 256, whose O accumulators (128 registers a thread) leave
  // room for a 64 x 64 score tile only. Four stages for head_dim 64, whose tiles are small.
  static constexpr int kKv = head_dim == 256 ? 64 : 128;
  static constexpr int kStages = head_dim == 64 ? 4 : 2;
  // The producer copies K kVLag tiles ahead of V: the consumers release a stage's K (its score
  // product) before the previous tile's V (the P V product issued after it), so K of tile t
  // goes out before V of tile t - 1 instead of waiting behind it. Not with RoPE, whose producer
  // then spilled (ptxas -v), nor with four stages (head_dim 64), which keep the producer ahead
  // anyway and measured 4 % slower with the lag.
  static constexpr int kVLag = kRope || kFp8 || kStages > 2 ? 0 : 1;
  static constexpr int kChunks = head_dim / 8;  // 16-byte chunks per row
  // Tiles are whole 64-wide column blocks (sm90::sw128_offset), i.e. rows of whole 128-byte
  // lines as in the mma.sync kernels: head_dim 96 is laid out 128 wide and its last 32 columns
  // are never written. The score product steps over the 96 columns only;
  // the output product runs 128 wide (m64n128) and the epilogue keeps the first 96 columns, so
  // V's unwritten columns reach only O columns nobody reads.
  static constexpr int kTileDim = swizzled_row_bytes(head_dim) / 2;     // q and K
  static constexpr int kVTileDim = swizzled_row_bytes(head_dim_vo) / 2;  // V
  static constexpr int kDimTiles = kVTileDim / 8;  // n8 tiles of O
  static constexpr int kKvTiles = kKv / 8;         // n8 tiles of S
  static constexpr int kQBytes = kRows * kTileDim * 2;
  static constexpr int kTileBytes = kFp8Scores ? kKv * head_dim : kKv * kTileDim * 2;  // K of one stage
  static constexpr int kVTileBytes = kKv * kVTileDim * 2;  // V of one stage
  static constexpr int kRawTileBytes = kFp8 ? kKv * head_dim : 0;  // fp8 K or V rows as they land
  // A tile's key offsets (bytes from K's base), and V's after them where its strides differ.
  static constexpr int kOffsetsPerTile = kSplitVo ? 2 * kKv : kKv;
  // Custom masks (the general entry's custom loop): the producer copies each token's run of mask
  // bits for a tile beside the tile's K, into word rows of the stage (stage_words), so that the
  // consumers read them from shared memory after their K wait instead of from L2 on the
  // softmax's path, and skip the products of tiles none of their rows sees. Not
  // where the producer widens K (fp8 without kFp8Scores), whose raw tiles run ahead of the
  // stages: there the consumers load the words as before and skip nothing.
  static constexpr bool kStagedWords = kGeneral && (!kFp8 || kFp8Scores);
  using Words = MaskWords<kKvTiles>;
  static constexpr int kWordsBytes = kStagedWords ? kStages * kRows * Words::kAlignedWords * 4 : 0;
  // Under a custom mask the producer first scans a pair's mask bits for the tiles that some
  // token of the pair sees (scan_tiles), and only those go through the ring: a bit per tile for
  // the first kSeenTiles tiles (later ones all count as seen), and their count, per q slot.
  // Of the tiles seen, those the mask cuts (some token of the pair misses one of their keys) are
  // the only ones whose words are staged and whose scores go through the mask: a tile every
  // token sees whole costs what an unmasked tile does.
  static constexpr int kSeenWords = 16, kSeenTiles = 32 * kSeenWords;
  static constexpr int kCutWord = kSeenWords + 4;  // after the seen bits and the count, 16-byte aligned
  static constexpr int kSeenSlotWords = kCutWord + kSeenWords;  // then the cut bits
  static constexpr int kSeenBytes = kStagedWords ? kSeenSlotWords * 4 : 0;  // per q slot
  // mbarriers: q full and empty (2 slots each), 4 announced pairs, K and V full and empty per
  // stage, and under staged words a "scanned" barrier per q slot.
  static constexpr int kNumBars = 8 + 4 * kStages + (kStagedWords ? 2 : 0);
  // Slots of key offsets: the producer publishes a tile's offsets while the copies of the tile
  // before may still read theirs, and load_kv's V copies lag a tile behind K's (three slots);
  // load_kv_fp8 copies a tile's K and V together (two).
  static constexpr int kOffsetSlots = kFp8 ? 2 : 3;
  // Shared memory from a 1024-aligned base (the swizzle atoms must be; see run()): q slots, K
  // stages, V stages, fp8's raw tiles, the stages' mask words, the q slots' seen tiles,
  // mbarriers, key offsets, announced pairs, RoPE frequencies, q's per-row inverse scales
  // (kFp8Scores, a row per q slot).
  static constexpr int smem_bytes(int q_slots, int raw_slots) {
    return q_slots * kQBytes + kStages * (kTileBytes + kVTileBytes) + raw_slots * kRawTileBytes + kWordsBytes +
           q_slots * kSeenBytes + 8 * kNumBars +
           kOffsetSlots * kOffsetsPerTile * 8 + 4 * 4 + (kRope ? head_dim / 2 * 4 : 0) + (kFp8Scores ? q_slots * kRows * 4 : 0);
  }
  // Two q slots where they fit (not head_dim 256), so that the producer loads the next pair's q
  // while the consumers still use this one's; fp8 counts its two raw tiles (K's and V's) first.
  static constexpr int kQSlots = smem_bytes(2, kFp8 ? 2 : 0) <= kSmemPerCta ? 2 : 1;
  // fp8: as many raw tiles as fit beside them, up to four (load_kv_fp8: the more, the further
  // ahead of their widening the copies go out); kFp8Scores: one per stage (load_kv_fp8_scores).
  static constexpr int kRawSlots = !kFp8                                 ? 0
                                   : kFp8Scores                          ? kStages
                                   : smem_bytes(kQSlots, 4) <= kSmemPerCta ? 4
                                   : smem_bytes(kQSlots, 3) <= kSmemPerCta ? 3
                                                                           : 2;
  // With two q slots, a consumer keeps its 64 q rows past its last score product and stages its
  // output rows there, so that they go out as whole 16-byte chunks of consecutive row bytes; the
  // producer needs the slot only for the pair after next. Not with RoPE, where the staging made
  // ptxas spill 8 bytes (head_dim 128, paged).
  static constexpr bool kStagedOutput = kQSlots == 2 && !kRope;
  static constexpr int kKOffset = kQSlots * kQBytes;
  static constexpr int kVOffset = kKOffset + kStages * kTileBytes;
  static constexpr int kRawOffset = kVOffset + kStages * kVTileBytes;
  static constexpr int kWordsOffset = kRawOffset + kRawSlots * kRawTileBytes;
  static constexpr int kSeenOffset = kWordsOffset + kWordsBytes;
  static constexpr int kBarOffset = kSeenOffset + kQSlots * kSeenBytes;
  static constexpr int kOffsetsOffset = kBarOffset + 8 * kNumBars;  // key offsets, kOffsetSlots tiles
  static constexpr int kPairOffset = kOffsetsOffset + kOffsetSlots * kOffsetsPerTile * 8;  // the announced pairs, 4 slots
  static constexpr int kFreqOffset = kPairOffset + 4 * 4;
  static constexpr int kQInvOffset = kFreqOffset + (kRope ? head_dim / 2 * 4 : 0);
  static constexpr int kSmemBytes = kQInvOffset + (kFp8Scores ? kQSlots * kRows * 4 : 0);
  static_assert(kSmemBytes == smem_bytes(kQSlots, kRawSlots), "the layout above is what smem_bytes counts");
  static_assert(!kSm90Pass || kSmemBytes <= kSmemPerCta, "the layout fits a CTA's shared memory");
  // Registers per thread after reallocation. A CTA owns what it launched with: kThreads times
  // the count `__launch_bounds__(kThreads, 1)` allows (65536 / kThreads, in steps of 8). The
  // consumers' setmaxnreg.inc waits until the producer's .dec has freed enough, so a split
  // asking for more than the CTA owns never finishes: the static_assert keeps it within.
  // The producer needs 48 to hold a pair's page-table state and the next pair's first lookup
  // without spilling, more where it rotates (RoPE) or copies 512-byte rows (head_dim 256), and
  // 72 where it keeps V's key offsets beside K's (kSplitVo: 16 bytes spilled at 56) or widens
  // fp8 rows eight at a time (with bf16 q, 8 bytes still spill at head_dim 256); the consumers
  // keep the rest (no spills at these counts, ptxas -v).
  // kFp8Scores: 88, which its copies of K beside V's and split_q take (8 bytes spilled at 72),
  // leaving the consumers 208, enough for the plain entry (no spills); the general entry spills
  // 36 bytes at head_dim 128 (values stored at entry and reloaded once per pair, outside the key
  // loop: SASS) and 92 at 256, at every split tried between 56/224 and 120/192.
  // The general entry's producer takes 56: its custom-mask scan holds a pass's words and two
  // votes per tile (12 bytes spilled at 48).
  static constexpr int kProducerRegs = kFp8Scores ? 88 : kSplitVo || kFp8 ? 72 : kRope || head_dim == 256 || kGeneral ? 56 : 48;
  static constexpr int kConsumerRegs = kFp8Scores ? 208 : kSplitVo || kFp8 ? 216 : 224;
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(128 * (kProducerRegs + kConsumers * kConsumerRegs) <= kThreads * kLaunchRegs,
                "the register split must fit what the CTA launched with");
  // Named barriers: 1 among the producer's threads, kTurnBarrier + g for consumer g's turns,
  // kOutputBarrier + g among consumer g's threads (staged output), kWordsBarrier + g among them
  // too (whether any of its rows sees a tile: kStagedWords).
  static constexpr int kProducerBarrier = 1, kTurnBarrier = 2, kOutputBarrier = 4, kWordsBarrier = 6;
  // Producer copies: a row's chunks c and c + kChunks / 2 (a RoPE pair) go to one thread, so
  // kThreadsPerRow threads share a row and an instruction of theirs covers consecutive chunks.
  // A power of two of them, so that they split the warpgroup: head_dim 96 gives a row 8 threads
  // for its 6 pairs (`copies()` says which threads copy).
  static constexpr __host__ __device__ int threads_per_row(int pairs) { return pairs <= 4 ? 4 : pairs <= 8 ? 8 : 16; }
  static constexpr int kPairsPerRow = kChunks / 2;
  static constexpr int kThreadsPerRow = threads_per_row(kPairsPerRow);
  static constexpr int kRowsPerPass = 128 / kThreadsPerRow;
  static_assert(kPairsPerRow <= kThreadsPerRow, "a thread per pair of chunks");
  static __device__ __forceinline__ bool copies() { return int(threadIdx.x % kThreadsPerRow) < kPairsPerRow; }
  static_assert(kRows % kRowsPerPass == 0 && kKv % kRowsPerPass == 0, "tile shape");

  static constexpr aotinfer_launch_info launch = make_launch_info<aotinfer_batch_prefill_params>(
      kThreads, kSmemBytes, kRows, kKv, head_dim,
      AOTINFER_PREFILL_PERSISTENT | (kReadsQMap ? AOTINFER_PREFILL_READS_TENSOR_MAPS : 0u));
  // Whether this launch's copies go through the maps (the host encodes them where it can).
  static __device__ __forceinline__ bool q_by_tma(const aotinfer_batch_prefill_params& p) {
    return kReadsQMap && p.tensor_maps_encoded;
  }
  static __device__ __forceinline__ bool kv_by_tma(const aotinfer_batch_prefill_params& p) {
    return kReadsKvMaps && p.tensor_maps_encoded && !stages_words(p);
  }
  // Whether the producer stages mask words: then its threads copy K and V too (their cp.async
  // arrivals cover the words), instead of the TMA unit.
  static __device__ __forceinline__ bool stages_words(const aotinfer_batch_prefill_params& p) {
    return kStagedWords && p.mask_mode == AOTINFER_MASK_CUSTOM;
  }

  using Cta = PrefillCta<KvRows, dtype_kv>;

  // The launch's (item, KV head) pairs: pair w is item w % num_work of KV head w / num_work. The
  // divisions every pair needs (by num_work and by the group size) are multiply-shifts made once
  // per CTA instead of divisions per pair.
  struct PairList {
    int count, num_work, group;
    FastDiv by_work, by_group;
    __device__ __forceinline__ PairList(const aotinfer_batch_prefill_params& p, int num_work, int num_kv_heads)
        : count(num_work * num_kv_heads),
          num_work(num_work),
          group(p.num_qo_heads / num_kv_heads),
          by_work(uint32_t(num_work)),
          by_group(uint32_t(group)) {}
    __device__ __forceinline__ Cta operator()(const aotinfer_batch_prefill_params& p, int w) const {
      const int head = int(by_work(uint32_t(w)));
      return Cta(p, w - head * num_work, head, group, by_group, kRows, kKv);
    }
  };

  struct Shared {
    char* q;  // slot i at q + i * kQBytes
    char* k;  // stage s at k + s * kTileBytes
    char* v;    // stage s at v + s * kVTileBytes
    char* raw;  // fp8: kRawSlots tiles of K or V rows as they land
    uint64_t* bars;
    int64_t* offsets;  // byte offsets of a tile's keys (K's, then V's where kSplitVo), slot n % kOffsetSlots for the n-th tile of the CTA
    int* pair;         // 4 slots: see announce()
    float* freq;
    float* q_inv;  // kFp8Scores: 1 / (q's scale) of each row, kRows per q slot
    uint32_t* words;  // kStagedWords: stage s's run of mask words of the CTA's token i at words_of(s, i)
    uint32_t* seen;   // kStagedWords: the q slots' seen tiles (seen_of)
    __device__ __forceinline__ explicit Shared(char* base)
        : q(base),
          k(base + kKOffset),
          v(base + kVOffset),
          raw(base + kRawOffset),
          bars(reinterpret_cast<uint64_t*>(base + kBarOffset)),
          offsets(reinterpret_cast<int64_t*>(base + kOffsetsOffset)),
          pair(reinterpret_cast<int*>(base + kPairOffset)),
          freq(reinterpret_cast<float*>(base + kFreqOffset)),
          q_inv(reinterpret_cast<float*>(base + kQInvOffset)),
          words(reinterpret_cast<uint32_t*>(base + kWordsOffset)),
          seen(reinterpret_cast<uint32_t*>(base + kSeenOffset)) {}
    // The CTA's n-th pair has its q in slot n % kQSlots, the (n / kQSlots)-th use of the slot.
    __device__ __forceinline__ char* q_slot(int n) const { return q + (n % kQSlots) * kQBytes; }
    __device__ __forceinline__ float* q_inv_slot(int n) const { return q_inv + (n % kQSlots) * kRows; }
    __device__ __forceinline__ uint32_t* words_of(int s, int i) const { return words + (s * kRows + i) * Words::kAlignedWords; }
    // Pair n's seen tiles (bit t of word t / 32; kSeenWords words), then their count, then the
    // tiles the mask cuts (from word kCutWord, as is_cut reads them); written
    // by the producer before it arrives on scanned(n).
    __device__ __forceinline__ uint32_t* seen_of(int n) const { return seen + (n % kQSlots) * kSeenSlotWords; }
    __device__ __forceinline__ uint64_t* scanned(int n) const { return bars + 8 + 4 * kStages + n % kQSlots; }
    __device__ __forceinline__ uint64_t* q_full(int n) const { return bars + n % kQSlots; }
    __device__ __forceinline__ uint64_t* q_empty(int n) const { return bars + 2 + n % kQSlots; }
    static __device__ __forceinline__ uint32_t q_parity(int n) { return uint32_t(n / kQSlots) & 1; }
    // Pair n > 0 of the CTA, which thread 0 of the producer announces to every other thread
    // through slot (n - 1) % 4 once it has loaded pair n - 1. The slot last held pair n - 4,
    // which every thread read before it loaded or used the q of pair n - 4; and before loading
    // pair n - 1, the producer waited for the release of pair n - 1 - kQSlots >= n - 3's q, so
    // neither slot nor barrier runs a phase ahead of a reader.
    __device__ __forceinline__ uint64_t* pair_full(int n) const { return bars + 4 + (n - 1) % 4; }
    __device__ __forceinline__ void announce(int n, int w) const {
      pair[(n - 1) % 4] = w;
      sm90::mbar_arrive(pair_full(n));
    }
    __device__ __forceinline__ int announced(int n) const {
      sm90::mbar_wait(pair_full(n), ((n - 1) / 4) & 1);
      return pair[(n - 1) % 4];
    }
    __device__ __forceinline__ uint64_t* k_full(int s) const { return bars + 8 + s; }
    __device__ __forceinline__ uint64_t* v_full(int s) const { return bars + 8 + kStages + s; }
    __device__ __forceinline__ uint64_t* k_empty(int s) const { return bars + 8 + 2 * kStages + s; }
    __device__ __forceinline__ uint64_t* v_empty(int s) const { return bars + 8 + 3 * kStages + s; }
  };

  // A CTA works through (item, KV head) pairs, flattened as w = kv_head * num_work + item: KV head
  // major, as the hardware would schedule an (items, heads) grid, so CTAs running together read
  // the same head's K and V, which stay in L2 (item major, 132 CTAs would stream up to 132
  // heads' KV from DRAM), and within a head longest item first (the planner's order). One wave
  // of CTAs (launch info flag AOTINFER_PREFILL_PERSISTENT) takes pairs 0 .. gridDim.x - 1, then each CTA takes the
  // next untaken pair from a device counter as it starts on one (next_pair), so costly causal
  // items balance as they would under the hardware's dynamic CTA order, and the producer copies
  // the next pair's q and first tiles while the consumers finish the last one; the ring's stages
  // and phases run on across pairs.
  static __device__ void run(const aotinfer_batch_prefill_params& p) {
    const int num_work = *p.num_work, num_kv_heads = KvRows<dtype_kv>::num_kv_heads(p);
    if (int(blockIdx.x) >= num_work * num_kv_heads) return;  // CUDA-graph padding
    const PairList pairs(p, num_work, num_kv_heads);
    // Aligned for the swizzle atoms by its declaration, so that every shared-memory address
    // below is a constant offset from a link-time symbol (a base aligned at run time held a
    // register and an add per address in the consumers: 0.5-2 % on the 16x1k and 4x4k rows).
    extern __shared__ __align__(1024) char smem_raw[];
    const Shared sh(smem_raw);
    if (threadIdx.x == 0) {
      // "Landed" barriers take an arrival from each copying thread: one issues TMA copies.
      const int q_copiers = q_by_tma(p) ? 1 : 128, kv_copiers = kv_by_tma(p) ? 1 : 128;
      for (int slot = 0; slot < kQSlots; ++slot) {
        sm90::mbar_init(sh.q_full(slot), q_copiers);
        sm90::mbar_init(sh.q_empty(slot), 128 * kConsumers);
        if constexpr (kStagedWords) sm90::mbar_init(sh.scanned(slot), 1);
      }
      for (int n = 1; n <= 4; ++n) sm90::mbar_init(sh.pair_full(n), 1);
      for (int s = 0; s < kStages; ++s) {
        sm90::mbar_init(sh.k_full(s), kv_copiers);
        sm90::mbar_init(sh.v_full(s), kv_copiers);
        sm90::mbar_init(sh.k_empty(s), 128 * kConsumers);
        sm90::mbar_init(sh.v_empty(s), 128 * kConsumers);
      }
    }
    if constexpr (kRope)
      for (int i = threadIdx.x; i < head_dim / 2; i += kThreads)
        sh.freq[i] = p.rope_rcp_scale * powf(p.rope_rcp_theta, float(2 * i) / float(head_dim));
    __syncthreads();

    const int role = threadIdx.x / 128;
    if (role == 0) {
      sm90::shrink_registers<kProducerRegs>();
      produce(p, sh, pairs);
    } else {
      sm90::grow_registers<kConsumerRegs>();
      consume(p, sh, role - 1, pairs);
    }
  }

  // Keys row0 + kRowsPerPass i of a tile, at the byte offsets `offsets` from `src`: this thread's
  // chunks c and c + kChunks / 2. The addresses of four rows are formed before their copies so
  // that the copies issue back to back (eight spilled in some variants, ptxas -v),
  // and only a tile that reaches past the request's last key (`partial`) tests its keys: the
  // producer's instructions share the SM's issue slots with the consumers' products.
  // Rows are kDim wide: head_dim for K, head_dim_vo for V, each with its own thread geometry.
  template <bool partial, int kDim>
  static __device__ __forceinline__ void copy_rows(const char* src, const int64_t* offsets, char* tile,
                                                   int valid_keys) {
    constexpr int kDimChunks = kDim / 8, kPerRow = threads_per_row(kDimChunks / 2), kPerPass = 128 / kPerRow;
    constexpr int kRowsPerThread = kKv / kPerPass, kBatch = 4;
    static_assert(kRowsPerThread % kBatch == 0, "whole batches of rows");
    const int c = threadIdx.x % kPerRow, row0 = threadIdx.x / kPerRow;
    if (c >= kDimChunks / 2) return;
#pragma unroll
    for (int i0 = 0; i0 < kRowsPerThread; i0 += kBatch) {
      const char* from[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) from[i] = src + offsets[row0 + (i0 + i) * kPerPass] + c * 16;
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        const int key = row0 + (i0 + i) * kPerPass;
        const bool valid = !partial || key < valid_keys;
        cp_async_16(tile + sm90::sw128_offset(kKv, key, c), from[i], valid);
        // Chunk c + kDimChunks / 2 is kDimChunks / 2 * 16 = kDim bytes further (16-bit elements).
        cp_async_16(tile + sm90::sw128_offset(kKv, key, c + kDimChunks / 2), from[i] + kDim, valid);
      }
    }
  }

  // RoPE on this thread's landed K chunks (keys beyond `end` are zeros and stay zeros).
  static __device__ __forceinline__ void rotate_k(char* tile, const float* freq, int start) {
    const int c = threadIdx.x % kThreadsPerRow, row0 = threadIdx.x / kThreadsPerRow;
    if (!copies()) return;
#pragma unroll 1
    for (int i = 0; i < kKv / kRowsPerPass; ++i) {
      const int key = row0 + i * kRowsPerPass;
      dtype* lo_p = reinterpret_cast<dtype*>(tile + sm90::sw128_offset(kKv, key, c));
      dtype* hi_p = reinterpret_cast<dtype*>(tile + sm90::sw128_offset(kKv, key, c + kChunks / 2));
      float lo[8], hi[8];
      load8(lo_p, lo);
      load8(hi_p, hi);
      rope_rotate8(lo, hi, freq, c * 8, start + key);
      store8(lo_p, lo);
      store8(hi_p, hi);
    }
  }

  // Warpgroup 0: q, then K and V of every tile into the ring. The copies arrive on a stage's
  // "full" barrier by themselves once they land (cp.async.mbarrier.arrive.noinc, or the TMA
  // unit's transaction count), so the producer never waits for its own copies and runs ahead as
  // far as the stages allow; what it writes with ordinary stores (converted or rotated q,
  // rotated K) it fences for the async proxy and announces with a plain arrive. The consumers
  // fence after their waits too: the cp.async writes are generic-proxy writes of other threads,
  // which wgmma reads next. Where the TMA unit copies K and V, thread 0 issues every copy and
  // the other threads leave.
  static __device__ void produce(const aotinfer_batch_prefill_params& p, const Shared& sh, const PairList& pairs) {
    const bool q_tma = q_by_tma(p), kv_tma = kv_by_tma(p);
    if (kv_tma && threadIdx.x != 0) return;
    if (q_tma && threadIdx.x == 0) sm90::tma_prefetch_map(&p.q_map);
    if (kv_tma) {
      sm90::tma_prefetch_map(&p.k_map);
      sm90::tma_prefetch_map(&p.v_map);
    }
    const int active = min(int(gridDim.x), pairs.count);  // CTAs that take pairs
    int done = 0;  // tiles this CTA loaded before the current pair: the ring position
    int w = blockIdx.x;
#pragma unroll 1
    for (int n = 0;; ++n) {
      if (n > 0) w = sh.announced(n);
      if (w >= pairs.count) break;
      // The next pair, taken now so that the atomic's round trip hides behind this pair's copies.
      const int next = threadIdx.x == 0 ? next_pair(p.pair_counter, active, pairs.count) : 0;
      const Cta cta = pairs(p, w);
      // The first page lookup goes out before any wait.
      const KeyOffset first_offset = kv_tma ? KeyOffset{0, 0} : key_offset(p, cta, 0);
      // The q slot's last pair is done with it (the consumers' last score product).
      if (n >= kQSlots) sm90::mbar_wait(sh.q_empty(n), sh.q_parity(n) ^ 1);
      const bool custom = stages_words(p);
      const int tiles = custom ? scan_tiles(p, cta, sh, n) : cta.num_tiles;  // through the ring
      if (!q_tma) load_q(p, cta, sh, n);
      else if (threadIdx.x == 0) load_q_by_tma(p, cta, sh, n);
      if (kv_tma) {
        load_kv_by_tma(p, cta, sh, done);
      } else if constexpr (kFp8Scores) {
        if (custom) load_kv_fp8_scores<true>(p, cta, sh, done, tiles, sh.seen_of(n), first_offset);
        else load_kv_fp8_scores<false>(p, cta, sh, done, tiles, nullptr, first_offset);
      } else if constexpr (kFp8) {
        load_kv_fp8(p, cta, sh, done, first_offset);
      } else {
        if (custom) load_kv<true>(p, cta, sh, done, tiles, sh.seen_of(n), first_offset);
        else load_kv<false>(p, cta, sh, done, tiles, nullptr, first_offset);
      }
      done += tiles;
      if (threadIdx.x == 0) sh.announce(n + 1, next);
    }
    if (!kv_tma) {
      cp_async_commit();
      cp_async_wait<0>();  // nothing in flight when the producer's threads exit
    }
  }

  // Pair 0 of every active CTA is its blockIdx.x; later ones come from `counter`, which counts
  // the pairs taken beyond those. A CTA takes once per pair it works on, the last time in vain,
  // so a launch takes exactly `pairs` times, and the take that returns pairs - 1 is the last: it
  // sets the counter back to 0 for the next launch (each plan uploads it as 0).
  static __device__ __forceinline__ int next_pair(int* counter, int active, int pairs) {
    const int taken = atomicAdd(counter, 1);
    if (taken == pairs - 1) atomicExch(counter, 0);
    return active + taken;
  }

  // q rows (zeros beyond the valid rows): copied, or converted and rotated through registers.
  static __device__ __forceinline__ void load_q(const aotinfer_batch_prefill_params& p, const Cta& cta,
                                                const Shared& sh, int n) {
    char* const q = sh.q_slot(n);
    const int c = threadIdx.x % kThreadsPerRow, row0 = threadIdx.x / kThreadsPerRow;
    const int passes = copies() ? kRows / kRowsPerPass : 0;
    if constexpr (!kRope) {
      // Copied as they are (zeros beyond the valid rows), all rows' copies in flight at once.
#pragma unroll 1
      for (int i = 0; i < passes; ++i) {
        const int row = row0 + i * kRowsPerPass;
        const bool valid = row < cta.valid_rows;
        const dtype_q* src = valid ? cta.template q_source<dtype_q>(p, row, head_dim) : static_cast<const dtype_q*>(p.q);
        cp_async_16(q + sm90::sw128_offset(kRows, row, c), src + c * 8, valid);
        cp_async_16(q + sm90::sw128_offset(kRows, row, c + kChunks / 2), src + (c + kChunks / 2) * 8, valid);
      }
      if constexpr (std::is_same_v<dtype_q, dtype>) {
        sm90::cp_async_arrive(sh.q_full(n));
      } else {
        // q of another type than the operands (bf16 q beside fp8 K/V, whose operands are f16;
        // f16 q beside bf16 K/V): converted in place once landed, each thread its own chunks,
        // after one global round trip (its cp.async.wait_group orders the two; beside 16-bit
        // K/V it also waits for the pair before's last copies, which went out earlier).
        // Through registers, a few rows at a time, the fp8 producer waited four round trips per
        // pair (docs/PERF.md).
        cp_async_commit();
        cp_async_wait<0>();
        if constexpr (kFp8Scores) {
          split_q(q, sh.q_inv_slot(n), passes);
        } else {
#pragma unroll 1
          for (int i = 0; i < passes; ++i) {
            const int row = row0 + i * kRowsPerPass;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              dtype* at = reinterpret_cast<dtype*>(q + sm90::sw128_offset(kRows, row, c + half * (kChunks / 2)));
              float x[8];
              load8(reinterpret_cast<const dtype_q*>(at), x);
              store8(at, x);
            }
          }
        }
        sm90::fence_async_shared();
        sm90::mbar_arrive(sh.q_full(n));
      }
    } else {
      // RoPE: rotated (and converted) through registers, a row at a time (two spilled, ptxas -v).
#pragma unroll 1
      for (int i = 0; i < passes; ++i) {
        const int row = row0 + i * kRowsPerPass;
        const bool valid = row < cta.valid_rows;  // zeros beyond the valid rows
        const dtype_q* src = valid ? cta.template q_source<dtype_q>(p, row, head_dim) : static_cast<const dtype_q*>(p.q);
        float lo[8], hi[8];
        load8(src + c * 8, lo);
        load8(src + (c + kChunks / 2) * 8, hi);
#pragma unroll
        for (int e = 0; e < 8; ++e) lo[e] = valid ? lo[e] : 0.f, hi[e] = valid ? hi[e] : 0.f;
        rope_rotate8(lo, hi, sh.freq, c * 8, cta.q_offset + (cta.q_row + row) / cta.group);
        store8(reinterpret_cast<dtype*>(q + sm90::sw128_offset(kRows, row, c)), lo);
        store8(reinterpret_cast<dtype*>(q + sm90::sw128_offset(kRows, row, c + kChunks / 2)), hi);
      }
      sm90::fence_async_shared();
      sm90::mbar_arrive(sh.q_full(n));
    }
  }

  // kFp8Scores: the landed bf16 q rows, split in place into the score product's two e4m3 terms.
  // Row r's bf16 values fill its 128-byte lines in the slot's head_dim / 64 column blocks; its hi
  // term takes the first half of those lines and its lo term the second, each a K-major fp8
  // operand of head_dim bytes a row, so a row's threads (consecutive lanes of one warp)
  // overwrite only their own row, once every one of them has read it. Each row is scaled by
  // a power of two that brings its largest magnitude into [128, 256), where split_e4m3x8 is exact
  // down to 2^-9 of it; the inverse goes to `inv` for the softmax.
  static __device__ __forceinline__ void split_q(char* q, float* inv, int passes) {
    static_assert(kPairsPerRow == kThreadsPerRow, "every thread of a row holds two of its chunks");
    const int c = threadIdx.x % kThreadsPerRow, row0 = threadIdx.x / kThreadsPerRow;
#pragma unroll 1
    for (int i = 0; i < passes; ++i) {
      const int row = row0 + i * kRowsPerPass;
      // The row's chunks stay packed until split (unpacked, both halves spilled 8 bytes, ptxas -v).
      const uint4 raw[2] = {*reinterpret_cast<const uint4*>(q + sm90::sw128_offset(kRows, row, c)),
                            *reinterpret_cast<const uint4*>(q + sm90::sw128_offset(kRows, row, c + kChunks / 2))};
      float m = 0.f;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float x[8];
        load8(reinterpret_cast<const dtype_q*>(&raw[half]), x);
#pragma unroll
        for (int e = 0; e < 8; ++e) m = fmaxf(m, fabsf(x[e]));
      }
#pragma unroll
      for (int lane = 1; lane < kThreadsPerRow; lane *= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, lane));
      // m < 2^(e + 1) for its exponent e: times 2^(7 - e) it lies below 256 (a zero row: e = -127).
      const int k = min(max(7 - (int(__float_as_uint(m) >> 23) - 127), -126), 126);
      const float up = __uint_as_float(uint32_t(127 + k) << 23);
      __syncwarp();  // the row's threads have all read it
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float x[8];
        load8(reinterpret_cast<const dtype_q*>(&raw[half]), x);
#pragma unroll
        for (int e = 0; e < 8; ++e) x[e] *= up;
        const SplitE4m3x8 t = split_e4m3x8(x);
        const int first = half * head_dim / 2 + 8 * c;  // the chunk's first element of the row
        char* const at = q + sm90::sw128_offset(kRows, row, first / 16) + first % 16;
        *reinterpret_cast<uint2*>(at) = t.hi;
        *reinterpret_cast<uint2*>(q + sm90::sw128_offset(kRows, row, head_dim / 16 + first / 16) + first % 16) = t.lo;
      }
      if (c == 0) inv[row] = __uint_as_float(uint32_t(127 - k) << 23);
    }
  }

  // q by TMA: a copy per 64-column block. The box holds the tile's packed rows in order (the
  // host encodes the map only where the group size divides kRows, so the tile starts at head 0
  // of its first token, t_first).
  static __device__ __forceinline__ void load_q_by_tma(const aotinfer_batch_prefill_params& p, const Cta& cta,
                                                       const Shared& sh, int n) {
    if constexpr (kReadsQMap) {
      sm90::mbar_arrive_expect_tx(sh.q_full(n), kQBytes);
      const int q_token = cta.qo_begin + cta.t_first;
#pragma unroll
      for (int b = 0; b < kTileDim / 64; ++b)
        sm90::tma_load_3d(sh.q_slot(n) + b * kRows * 128, &p.q_map, sh.q_full(n), b * 64, cta.kv_head * cta.group,
                          q_token);
    }
  }

  // K and V of the pair's tiles by TMA, from ring position `done`, in load_kv's order (K a tile
  // ahead of V) and through the same barriers.
  static __device__ __forceinline__ void load_kv_by_tma(const aotinfer_batch_prefill_params& p, const Cta& cta,
                                                        const Shared& sh, int done) {
    if constexpr (kReadsKvMaps) {
      // K (or V) of the pair's tile `tile`: a box per 64-column block, once its stage is free.
      auto load_tile = [&](int tile, bool v) {
        const int ring = done + tile, s = ring % kStages, use = ring / kStages;
        const int token = cta.rows.first + cta.begin + tile * kKv;  // the boxes' first row
        uint64_t* const full = v ? sh.v_full(s) : sh.k_full(s);
        if (use > 0) sm90::mbar_wait(v ? sh.v_empty(s) : sh.k_empty(s), (use - 1) & 1);
        sm90::mbar_arrive_expect_tx(full, v ? kVTileBytes : kTileBytes);
        char* const dst = v ? sh.v + s * kVTileBytes : sh.k + s * kTileBytes;
        for (int b = 0; b < (v ? kVTileDim : kTileDim) / 64; ++b)
          sm90::tma_load_3d(dst + b * kKv * 128, v ? &p.v_map : &p.k_map, full, b * 64, cta.kv_head, token);
      };
#pragma unroll 1
      for (int tile = 0; tile < cta.num_tiles + kVLag; ++tile) {
        if (tile < cta.num_tiles) load_tile(tile, false);
        if (tile >= kVLag) load_tile(tile - kVLag, true);
      }
    }
  }

  // Each producer thread looks up one key of a tile (a page-table read for paged KV) a tile
  // ahead, into shared memory, so the copies of the next tile do not wait on it: the key's byte
  // offset from the K (or V) base.
  // V's offset is K's unless its strides differ (kSplitVo).
  struct KeyOffset {
    int64_t k, v;
  };
  static __device__ __forceinline__ KeyOffset key_offset(const aotinfer_batch_prefill_params& p, const Cta& cta,
                                                         int tile) {
    static_assert(kKv <= 128, "at most one key per producer thread");
    const int pos = cta.begin + tile * kKv + int(threadIdx.x);
    if (threadIdx.x >= kKv || pos >= cta.end) return {0, 0};
    const int64_t k = cta.rows.offset(pos) * int64_t(sizeof(dtype_kv));
    return {k, kSplitVo ? cta.rows.v_offset(p, pos) * int64_t(sizeof(dtype_kv)) : k};
  }
  // Publishes this thread's key offsets into a tile's slot.
  static __device__ __forceinline__ void put_offsets(int64_t* slot, const KeyOffset& at) {
    if (threadIdx.x >= kKv) return;
    slot[threadIdx.x] = at.k;
    if constexpr (kSplitVo) slot[kKv + threadIdx.x] = at.v;
  }

  // A custom mask's words for the tile of keys from `start` into stage s, beside its K (whose
  // "full" barrier the copies arrive on with K's): thread i copies the run of token t_first + i.
  // The consumers read a stage's words before they release its K.
  static __device__ __forceinline__ void stage_words(const aotinfer_batch_prefill_params& p, const Cta& cta,
                                                     const Shared& sh, int s, int start) {
    const int i = threadIdx.x;
    if (i > cta.t_last - cta.t_first) return;
    const int64_t bit = int64_t(p.mask_indptr[cta.request]) * 8 + int64_t(cta.t_first + i) * cta.rows.length;
    uint32_t* const dst = sh.words_of(s, i);
#pragma unroll
    for (int w = 0; w <= Words::kWords; ++w) Words::stage_word(p.custom_mask, dst + w, w, start, cta.end, bit);
  }

  // Under a custom mask (stages_words), pair n's tiles that some token of the pair sees. Each
  // token's bits are read by `parts` producer threads (up to 8, as many as the warpgroup has
  // for each token), part q taking tiles q, q + parts, ...: a pass reads kScanTiles tiles a
  // thread, all in flight together, so a pair of 32 tokens and 32 tiles takes two passes. Each
  // warp ORs its votes (a butterfly of shuffles) and ORs them into seen_of(n) with a shared
  // atomic. Only these tiles go through the ring, so a tile no row sees costs no copy, wait or
  // turn; the consumers learn their count and order from seen_of(n) once `scanned(n)`
  // completes. Returns the count.
  static constexpr int kScanTiles = 4;
  static_assert(8 * kScanTiles <= 32, "a pass's votes (up to 8 parts of kScanTiles tiles) fit one word");
  static __device__ int scan_tiles(const aotinfer_batch_prefill_params& p, const Cta& cta, const Shared& sh, int n) {
    uint32_t* const seen = sh.seen_of(n);
    if (threadIdx.x < kSeenWords) seen[threadIdx.x] = seen[kCutWord + threadIdx.x] = 0;
    sm90::named_barrier_sync<128>(kProducerBarrier);
    const int tokens = cta.t_last - cta.t_first + 1, scanned = min(cta.num_tiles, kSeenTiles);
    const int parts = min(8, 128 / tokens), token = threadIdx.x / parts, part = threadIdx.x % parts;
    const bool mine = token < tokens;
    const int64_t bit = int64_t(p.mask_indptr[cta.request]) * 8 + int64_t(cta.t_first + min(token, tokens - 1)) * cta.rows.length;
    const int window = parts * kScanTiles;  // tiles a pass covers, at most 32
#pragma unroll 1
    for (int t0 = 0; t0 < scanned; t0 += window) {
      uint32_t bits[kScanTiles][Words::kWords];
#pragma unroll
      for (int k = 0; k < kScanTiles; ++k)
        Words::read_tile(p.custom_mask, bits[k], cta.begin + min(t0 + part + k * parts, scanned - 1) * kKv, cta.end, bit);
      uint32_t votes = 0, cut = 0;  // bit w: tile t0 + w
#pragma unroll
      for (int k = 0; k < kScanTiles; ++k) {
        const int w = part + k * parts;
        const bool counts = mine && t0 + w < scanned;
        votes |= uint32_t(counts && Words::tile_any(bits[k])) << w;
        cut |= uint32_t(counts && !Words::tile_all(bits[k])) << w;
      }
#pragma unroll
      for (int d = 16; d > 0; d /= 2) {
        votes |= __shfl_xor_sync(0xffffffffu, votes, d);
        cut |= __shfl_xor_sync(0xffffffffu, cut, d);
      }
      // Tiles below `scanned` only; a tile none sees may count as cut too (it never goes
      // through the ring).
      auto put = [&](uint32_t* word, uint32_t bits_of_pass) {
        const uint64_t at = uint64_t(bits_of_pass) << (t0 % 32);
        atomicOr(word + t0 / 32, uint32_t(at));
        if (at >> 32) atomicOr(word + t0 / 32 + 1, uint32_t(at >> 32));
      };
      if (threadIdx.x % 32 == 0 && votes != 0) put(seen, votes);
      if (threadIdx.x % 32 == 0 && cut != 0) put(seen + kCutWord, cut);
    }
    sm90::named_barrier_sync<128>(kProducerBarrier);
    int count = cta.num_tiles - scanned;  // past kSeenTiles every tile counts as seen
#pragma unroll
    for (int w = 0; w < kSeenWords; ++w) count += __popc(seen[w]);
    if (threadIdx.x == 0) {
      seen[kSeenWords] = uint32_t(count);
      sm90::mbar_arrive(sh.scanned(n));  // release: the bits and the count
    }
    return count;
  }
  // Whether the mask cuts seen tile t: some token of the pair misses one of its keys (past
  // kSeenTiles: every tile).
  static __device__ __forceinline__ bool is_cut(const uint32_t* seen, int t) {
    return t >= kSeenTiles || (seen[kCutWord + t / 32] >> (t % 32)) & 1u;
  }
  // The tile after tile t in ring order: t + 1, or under a custom mask the next one seen.
  template <bool custom>
  static __device__ __forceinline__ int next_tile(const uint32_t* seen, int t) {
    if constexpr (custom) {
      for (int u = t + 1; u < kSeenTiles; u = (u / 32 + 1) * 32) {
        const uint32_t w = seen[u / 32] >> (u % 32);
        if (w != 0) return u + __ffs(w) - 1;
      }
      return max(t + 1, kSeenTiles);
    } else {
      return t + 1;
    }
  }

  // K and V of the pair's `tiles` tiles (all of them, or the ones seen: next_tile) into the
  // ring, from ring position `done`; `next_offset` is this thread's key offset of tile 0; K goes
  // kVLag tiles ahead of V.
  template <bool custom>
  static __device__ __forceinline__ void load_kv(const aotinfer_batch_prefill_params& p, const Cta& cta, const Shared& sh,
                                                 int done, int tiles, const uint32_t* seen, KeyOffset next_offset) {
    const char* const k = reinterpret_cast<const char*>(cta.rows.k);
    const char* const v = reinterpret_cast<const char*>(cta.rows.v);
    // The key tiles of ring positions j (K) and j - kVLag (V): under a custom mask the seen ones in
    // order, otherwise j and j - kVLag themselves.
    int seen_tile = next_tile<custom>(seen, -1), seen_v_tile = seen_tile;
    if constexpr (custom) next_offset = key_offset(p, cta, seen_tile);
#pragma unroll 1
    for (int j = 0; j < tiles + kVLag; ++j) {
      const int ring = done + j, tile = custom ? seen_tile : j;
      int next = tile + 1;
      if (j < tiles) {
        const int s = ring % kStages, use = ring / kStages, start = cta.begin + tile * kKv;
        int64_t* offsets = sh.offsets + (ring % 3) * kOffsetsPerTile;
        put_offsets(offsets, next_offset);
        // The tile's offsets are written. Their slot was last read by the V copies two
        // iterations ago, before the previous barrier (no V-only iteration has one).
        sm90::named_barrier_sync<128>(kProducerBarrier);
        if constexpr (custom) next = next_tile<custom>(seen, tile);
        next_offset = key_offset(p, cta, next);
        const int valid_keys = cta.end - start;
        // One copy loop only with RoPE, whose producer holds the rotation's state too (a second
        // spilled, ptxas -v).
        const bool partial = kRope || valid_keys < kKv;
        if (use > 0) sm90::mbar_wait(sh.k_empty(s), (use - 1) & 1);
        if (partial) copy_rows<true, head_dim>(k, offsets, sh.k + s * kTileBytes, valid_keys);
        else copy_rows<false, head_dim>(k, offsets, sh.k + s * kTileBytes, valid_keys);
        if constexpr (custom)
          if (is_cut(seen, tile)) stage_words(p, cta, sh, s, start);
        if constexpr (kRope) {  // rotated in place once landed
          cp_async_commit();
          cp_async_wait<0>();
          rotate_k(sh.k + s * kTileBytes, sh.freq, start);
          sm90::fence_async_shared();
          sm90::mbar_arrive(sh.k_full(s));
        } else {
          sm90::cp_async_arrive(sh.k_full(s));
        }
      }
      if (j >= kVLag) {  // V of the tile kVLag before
        const int v_ring = ring - kVLag, s = v_ring % kStages, use = v_ring / kStages;
        const int start = cta.begin + (kVLag == 0 ? tile : custom ? seen_v_tile : j - kVLag) * kKv;
        const int64_t* offsets = sh.offsets + (v_ring % 3) * kOffsetsPerTile + (kSplitVo ? kKv : 0);
        const int valid_keys = cta.end - start;
        if (use > 0) sm90::mbar_wait(sh.v_empty(s), (use - 1) & 1);
        if (kRope || valid_keys < kKv) copy_rows<true, head_dim_vo>(v, offsets, sh.v + s * kVTileBytes, valid_keys);
        else copy_rows<false, head_dim_vo>(v, offsets, sh.v + s * kVTileBytes, valid_keys);
        sm90::cp_async_arrive(sh.v_full(s));
      }
      if constexpr (custom) {
        seen_v_tile = tile;
        if (j < tiles) seen_tile = next;
      }
    }
  }

  // fp8 K/V: raw rows land by cp.async in a ring of kRawSlots raw tiles (unswizzled, head_dim
  // bytes a row), and the producer widens them into the ring's f16 stages. A thread widens exactly
  // the 16-byte chunks it copied, so its own cp.async.wait_group orders the two: no barrier
  // between them. The pair's raw items alternate K(0), V(0), K(1), V(1), ...; item r + kRawSlots
  // is copied into item r's raw tile as soon as r is widened, so kRawSlots - 1 items fly while
  // one is widened. (More raw tiles than two barely changed the speed: the widening itself, not
  // the copies' latency, bounds this path; docs/PERF.md.)
  static constexpr int kRawChunks = head_dim / 16;  // 16-byte chunks of an fp8 row
  static constexpr int kRawThreadsPerRow = kRawChunks <= 4 ? 4 : kRawChunks <= 8 ? 8 : 16;
  static constexpr int kRawRowsPerPass = 128 / kRawThreadsPerRow;
  static_assert(!kFp8 || kKv % kRawRowsPerPass == 0, "whole passes of rows");

  // Both loops go in batches of up to eight rows, each batch's shared-memory reads (key offsets,
  // raw chunks) issued before their first use: one row at a time, the producer waited for each
  // read (ncu: the producer was busy all the time, the consumers waited for stages). Eight
  // measured 2-5 % faster than four at head_dim 128 and 256 (docs/PERF.md).
  static constexpr int kRawPasses = kKv / kRawRowsPerPass, kRawBatch = kRawPasses < 8 ? kRawPasses : 8;
  static_assert(!kFp8 || kRawPasses % kRawBatch == 0, "whole batches of rows");

  // Rows as they are into `raw`: unswizzled (head_dim bytes a row) for the widening, or
  // (kSwizzled) as the K-major fp8 operand of the score product (128-byte swizzle, like q).
  template <bool kSwizzled = false>
  static __device__ __forceinline__ void copy_raw(const char* src, const int64_t* offsets, char* raw, int valid_keys) {
    const int c = threadIdx.x % kRawThreadsPerRow, row0 = threadIdx.x / kRawThreadsPerRow;
    if (c >= kRawChunks) return;
#pragma unroll
    for (int i0 = 0; i0 < kRawPasses; i0 += kRawBatch) {
      const char* from[kRawBatch];
#pragma unroll
      for (int i = 0; i < kRawBatch; ++i) from[i] = src + offsets[row0 + (i0 + i) * kRawRowsPerPass] + c * 16;
#pragma unroll
      for (int i = 0; i < kRawBatch; ++i) {
        const int key = row0 + (i0 + i) * kRawRowsPerPass;
        cp_async_16(raw + (kSwizzled ? sm90::sw128_offset(kKv, key, c) : key * head_dim + c * 16), from[i], key < valid_keys);
      }
    }
  }

  static __device__ __forceinline__ void widen_raw(const char* raw, char* tile) {
    const int c = threadIdx.x % kRawThreadsPerRow, row0 = threadIdx.x / kRawThreadsPerRow;
    if (c >= kRawChunks) return;
#pragma unroll
    for (int i0 = 0; i0 < kRawPasses; i0 += kRawBatch) {
      uint4 r[kRawBatch];
#pragma unroll
      for (int i = 0; i < kRawBatch; ++i)
        r[i] = *reinterpret_cast<const uint4*>(raw + (row0 + (i0 + i) * kRawRowsPerPass) * head_dim + c * 16);
#pragma unroll
      for (int i = 0; i < kRawBatch; ++i) {
        const int key = row0 + (i0 + i) * kRawRowsPerPass;
        *reinterpret_cast<uint4*>(tile + sm90::sw128_offset(kKv, key, 2 * c)) = widen_fp8x8<dtype_kv>(r[i].x, r[i].y);
        *reinterpret_cast<uint4*>(tile + sm90::sw128_offset(kKv, key, 2 * c + 1)) = widen_fp8x8<dtype_kv>(r[i].z, r[i].w);
      }
    }
  }

  // The pair's tiles from ring position `done` (load_kv's contract). Tile u's key offsets go
  // into slot (done + u) % 2 behind the producer barrier just before K(u) is copied; that slot's
  // last readers, the copies of tile u - 2, were issued before the barrier of tile u - 1.
  static __device__ __forceinline__ void load_kv_fp8(const aotinfer_batch_prefill_params& p, const Cta& cta,
                                                     const Shared& sh, int done, KeyOffset next_offset) {
    static_assert(!kSplitVo, "fp8 K/V have equal widths");
    static_assert(kOffsetSlots == 2, "a tile's K and V copies go out before the next tile's offsets");
    if (cta.num_tiles == 0) return;
    const char* const k = reinterpret_cast<const char*>(cta.rows.k);
    const char* const v = reinterpret_cast<const char*>(cta.rows.v);
    const int items = 2 * cta.num_tiles;
    const int64_t* offsets = sh.offsets;
    // Item r's copies into its raw tile, then a commit (an empty group past the last item, so
    // that every thread's group count stays that of the loop below).
    auto copy_item = [&](int r) {
      if (r < items) {
        const int tile = r / 2;
        if (r % 2 == 0) {
          int64_t* slot = sh.offsets + ((done + tile) % kOffsetSlots) * kOffsetsPerTile;
          put_offsets(slot, next_offset);
          sm90::named_barrier_sync<128>(kProducerBarrier);
          next_offset = key_offset(p, cta, tile + 1);
          offsets = slot;
        }
        copy_raw(r % 2 ? v : k, offsets, sh.raw + (r % kRawSlots) * kRawTileBytes, cta.end - (cta.begin + tile * kKv));
      }
      cp_async_commit();
    };
#pragma unroll 1
    for (int r = 0; r < kRawSlots; ++r) copy_item(r);
#pragma unroll 1
    for (int r = 0; r < items; ++r) {
      const int ring = done + r / 2, s = ring % kStages, use = ring / kStages;
      const bool is_v = r % 2;
      cp_async_wait<kRawSlots - 1>();  // item r landed; the kRawSlots - 1 after it may fly
      if (use > 0) sm90::mbar_wait(is_v ? sh.v_empty(s) : sh.k_empty(s), (use - 1) & 1);
      widen_raw(sh.raw + (r % kRawSlots) * kRawTileBytes, is_v ? sh.v + s * kVTileBytes : sh.k + s * kTileBytes);
      sm90::fence_async_shared();
      sm90::mbar_arrive(is_v ? sh.v_full(s) : sh.k_full(s));
      copy_item(r + kRawSlots);
    }
  }

  // kFp8Scores: K lands by cp.async straight in its stage, the score product's operand as it
  // is; V lands in a raw tile (one per stage) and is widened into its stage as load_kv_fp8 does.
  // Tile u's copies (K, then V) go out kRawSlots tiles ahead of V(u)'s widening, in one
  // cp.async group, behind its key offsets (slot (done + u) % 2, as in load_kv_fp8). The wait
  // for K's free stage before them cannot deadlock: with as many raw tiles as stages, K(u +
  // kRawSlots) waits for the score product of tile u, which needs only K(u) and V(u - 1), both
  // in before V(u) is widened.
  template <bool custom>  // the tiles as load_kv's
  static __device__ __forceinline__ void load_kv_fp8_scores(const aotinfer_batch_prefill_params& p, const Cta& cta,
                                                            const Shared& sh, int done, int tiles,
                                                            const uint32_t* seen, KeyOffset next_offset) {
    static_assert(kRawSlots == kStages, "K(u + kRawSlots) takes the stage of K(u), freed by a product V(u) does not gate");
    if (tiles == 0) return;
    const char* const k = reinterpret_cast<const char*>(cta.rows.k);
    const char* const v = reinterpret_cast<const char*>(cta.rows.v);
    int seen_tile = next_tile<custom>(seen, -1);  // under a custom mask, the tile of the next copies
    if constexpr (custom) next_offset = key_offset(p, cta, seen_tile);
    auto copy_tile = [&](int u) {
      if (u < tiles) {
        const int ring = done + u, s = ring % kStages, use = ring / kStages;
        int64_t* const offsets = sh.offsets + (ring % kOffsetSlots) * kOffsetsPerTile;
        put_offsets(offsets, next_offset);
        sm90::named_barrier_sync<128>(kProducerBarrier);
        const int tile = custom ? seen_tile : u;
        const int next = custom ? next_tile<custom>(seen, tile) : u + 1;
        if constexpr (custom) seen_tile = next;
        next_offset = key_offset(p, cta, next);
        const int start = cta.begin + tile * kKv, valid_keys = cta.end - start;
        if (use > 0) sm90::mbar_wait(sh.k_empty(s), (use - 1) & 1);
        copy_raw<true>(k, offsets, sh.k + s * kTileBytes, valid_keys);
        if constexpr (custom)
          if (is_cut(seen, tile)) stage_words(p, cta, sh, s, start);
        sm90::cp_async_arrive(sh.k_full(s));
        copy_raw(v, offsets, sh.raw + (u % kRawSlots) * kRawTileBytes, valid_keys);
      }
      cp_async_commit();  // an empty group past the last tile keeps the counts of the loop below
    };
#pragma unroll 1
    for (int u = 0; u < kRawSlots; ++u) copy_tile(u);
#pragma unroll 1
    for (int u = 0; u < tiles; ++u) {
      const int ring = done + u, s = ring % kStages, use = ring / kStages;
      cp_async_wait<kRawSlots - 1>();  // tile u's copies landed
      if (use > 0) sm90::mbar_wait(sh.v_empty(s), (use - 1) & 1);
      widen_raw(sh.raw + (u % kRawSlots) * kRawTileBytes, sh.v + s * kVTileBytes);
      sm90::fence_async_shared();
      sm90::mbar_arrive(sh.v_full(s));
      copy_tile(u + kRawSlots);
    }
  }

  // Consumer warpgroup g: rows 64 g .. 64 g + 63 of every pair's tile.
  //
  // Ping-pong (FlashAttention-3): the two consumers take turns to issue their products, so the
  // tensor cores finish one group's products before the other's and the groups' softmaxes fall
  // into each other's products instead of coinciding. Turn barrier kTurnBarrier + g: group g
  // waits on its own and, after issuing, arrives on the other's. Group 1 opens group 0's first
  // turn, and group 0 takes up group 1's last arrive at the end, so every arrive is matched
  // (both take the same turns: num_tiles + 1 per pair with tiles).
  static __device__ void consume(const aotinfer_batch_prefill_params& p, const Shared& sh, int g,
                                 const PairList& pairs) {
    if (g == 1) sm90::named_barrier_arrive<256>(kTurnBarrier);
    int done = 0;  // tiles of earlier pairs: the ring position
#pragma unroll 1
    for (int n = 0;; ++n) {
      const int w = n == 0 ? int(blockIdx.x) : sh.announced(n);
      if (w >= pairs.count) break;
      const Cta cta = pairs(p, w);
      if constexpr (!kGeneral) done += attend<KeyLoop::plain>(p, sh, cta, pairs.by_group, g, done, n);
      else if (p.mask_mode == AOTINFER_MASK_CUSTOM) done += attend<KeyLoop::custom>(p, sh, cta, pairs.by_group, g, done, n);
      else done += attend<KeyLoop::features>(p, sh, cta, pairs.by_group, g, done, n);
    }
    if (g == 0) sm90::named_barrier_sync<256>(kTurnBarrier);
  }

  // One pair: the attention of consumer g's 64 rows, from ring position `done`; n-th pair of the
  // CTA, in one of the key loops (prefill_work.cuh): a custom mask's words, loaded ahead, and a
  // window's or soft cap's tests would otherwise hold registers and issue slots in every loop.
  // Returns the tiles it took from the ring.
  template <KeyLoop kLoop>
  static __device__ __forceinline__ int attend(const aotinfer_batch_prefill_params& p, const Shared& sh,
                                                const Cta& cta, const FastDiv& by_group, int g, int done, int n) {
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    // Softmax in log2 units (score_fragment.cuh).
    constexpr bool kCustom = kLoop == KeyLoop::custom, kFeatures = kLoop != KeyLoop::plain;
    const bool capped = kFeatures && p.soft_cap_out > 0.f;  // the same for every thread: a uniform branch
    const float scale = p.sm_scale * kLog2e;
    // kFp8Scores: the score product sees each q row scaled (split_q). The softmax folds the row's
    // inverse into its scale, unless a soft cap or ALiBi needs the true scores first.
    const bool unscale_first = kFp8Scores && (capped || (kFeatures && p.alibi_scale != 0.f));
    float row_scale[2] = {scale, scale};
    float row_m[2] = {-INFINITY, -INFINITY}, row_l[2] = {0.f, 0.f};
    float o[kDimTiles][4], s[kKvTiles][4];
#pragma unroll
    for (int j = 0; j < kDimTiles; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
#pragma unroll
    for (int j = 0; j < kKvTiles; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
    auto& o_flat = reinterpret_cast<float(&)[kDimTiles * 4]>(o);
    auto& s_flat = reinterpret_cast<float(&)[kKvTiles * 4]>(s);

    // This thread's rows of the pair's kRows, per row half, and their query tokens; their last
    // keys (causal mask).
    auto row_in_pair = [&](int h) { return 64 * g + 16 * warp + lane / 4 + 8 * h; };
    auto token = [&](int h) { return int(by_group(uint32_t(cta.q_row + 64 * g + 16 * warp + lane / 4 + 8 * h))); };
    const bool causal = p.mask_mode == AOTINFER_MASK_CAUSAL;
    int key_hi[2] = {INT_MAX, INT_MAX};
    if (causal) key_hi[0] = cta.q_offset + token(0), key_hi[1] = cta.q_offset + token(1);

    const uint32_t q_addr = sm90::smem_u32(sh.q_slot(n)) + g * 64 * 128;
    // Ring stage and phase parity of the pair's tile t.
    auto stage = [&](int t) { return (done + t) % kStages; };
    auto parity = [&](int t) { return uint32_t((done + t) / kStages) & 1; };
    // S = Q K^T of tile t into s, issued (not waited for): head_dim in k16 steps, a step moves
    // 32 bytes along a 128-byte row, and every 4 steps to the next 64-wide column block.
    const uint64_t q_desc = sm90::sw128_desc(q_addr);
    // kFp8Scores: k32 steps, first over q's hi term, then over its lo term (split_q), each
    // against the same K bytes; a step moves 32 bytes along the row too.
    auto issue_scores = [&](int t) {
      const uint64_t k_desc = sm90::sw128_desc(sm90::smem_u32(sh.k + stage(t) * kTileBytes));
#pragma unroll
      for (int kk = 0; kk < head_dim / 16; ++kk) {
        const uint64_t a = sm90::desc_advance(q_desc, (kk / 4) * kRows * 128 + (kk % 4) * 32);
        if constexpr (kFp8Scores) {
          const int kb = kk % (head_dim / 32);  // the step's K bytes
          sm90::wgmma_ss_fp8<dtype_kv>(s_flat, a, sm90::desc_advance(k_desc, (kb / 4) * kKv * 128 + (kb % 4) * 32), kk > 0);
        } else {
          sm90::wgmma_ss<dtype>(s_flat, a, sm90::desc_advance(k_desc, (kk / 4) * kKv * 128 + (kk % 4) * 32), kk > 0);
        }
      }
      sm90::wgmma_commit();
    };
    // O += P V of tile t, issued: the tile's keys in k16 steps; 16 keys are two 1024-byte row
    // groups of V, whose 64-wide head-dim blocks are kKv * 128 bytes apart (leading byte offset).
    uint32_t p_frag[kKv / 16][4];  // weights of the tile whose O product is next or in flight
    auto issue_output = [&](int t) {
      const uint64_t v_desc = sm90::sw128_desc(sm90::smem_u32(sh.v + stage(t) * kVTileBytes), kKv * 128);
#pragma unroll
      for (int jj = 0; jj < kKv / 16; ++jj) sm90::wgmma_rs<dtype>(o_flat, p_frag[jj], sm90::desc_advance(v_desc, jj * 2048));
      sm90::wgmma_commit();
    };
    // Scores of tile t (landed in s) to weights, with the running max and sums; alpha rescales
    // the output before tile t's P V product.
    float alpha[2];
    // A custom mask's words for tile t: staged (kStagedWords), read from the stage before its K
    // is released; otherwise loaded while its score product runs (their latency would otherwise
    // sit between the product and the softmax). Rows past the tile's last valid one read its
    // bits (their output is discarded). A staged row's shift is the same on every tile (whole
    // words of keys a tile).
    constexpr bool kStaged = kCustom && kStagedWords;
    Words mask_words;
    int word_row[2];
    uint32_t word_shift[2];
    if constexpr (kStaged) {
      const uint32_t first_bit = uint32_t(p.mask_indptr[cta.request]) * 8u + uint32_t(cta.begin);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int t = min(token(h), cta.t_last);
        word_row[h] = t - cta.t_first;
        word_shift[h] = (first_bit + uint32_t(t) * uint32_t(cta.rows.length)) & 31u;
      }
    }
    auto load_mask = [&](int t) {
      if constexpr (kStaged) {
        const uint32_t* const rows[2] = {sh.words_of(stage(t), word_row[0]), sh.words_of(stage(t), word_row[1])};
        mask_words.load_aligned(rows, word_shift);
      } else if constexpr (kCustom) {
        const int64_t base = int64_t(p.mask_indptr[cta.request]) * 8;
        const int64_t row_bit[2] = {base + int64_t(min(token(0), cta.t_last)) * cta.rows.length,
                                    base + int64_t(min(token(1), cta.t_last)) * cta.rows.length};
        mask_words.load(p.custom_mask, cta.begin + t * kKv, cta.end, row_bit);
      }
    };
    // Whether tile t has products to run: under staged words, whether any of the warpgroup's rows
    // sees one of its keys (its K landed); a tile none sees costs them the barriers only.
    // A tile every token sees whole (not `cut`, scan_tiles) has no words staged and needs none.
    // Its words are cleared instead, so that no tile's words stay live into the next (spills).
    bool cut = kCustom;
    auto load_cut_mask = [&](int t) {
      if (cut) load_mask(t);
      else mask_words = Words{};
    };
    auto seen = [&](int t) {
      if constexpr (!kStaged) return true;
      if (!cut) return true;
      load_mask(t);
      return sm90::named_barrier_any<128>(kWordsBarrier + g, mask_words.any());
    };
    // The key tile of ring position t: t, or under staged words the one the loop is at (key;
    // the producer put only the tiles some token sees through the ring: scan_tiles).
    int key = -1;
    auto softmax_scores = [&](int t) {
      const int start = cta.begin + (kStaged ? key : t) * kKv;
      if (kFp8Scores && unscale_first) {
        const float q_unscale[2] = {sh.q_inv_slot(n)[row_in_pair(0)], sh.q_inv_slot(n)[row_in_pair(1)]};
        rescale_rows(s, q_unscale);
      }
      if (capped) soft_cap_scores(s, p.soft_cap_in, p.soft_cap_out);
      // Masks only where the tile crosses an edge some row of the CTA can see (a window's: within
      // kRows keys of begin, as in the mma.sync kernel; its first keys are worked out here, where
      // they cost no register across the loop); a custom mask's bits, on every tile.
      const bool edge = start + kKv > cta.end || (causal && start + kKv - 1 > cta.q_offset + cta.t_first) ||
                        (kFeatures && p.window_left != AOTINFER_NO_WINDOW && start - cta.begin < kRows);
      if (edge) {
        if constexpr (kFeatures) {
          const int key_lo[2] = {cta.q_offset + token(0) - p.window_left, cta.q_offset + token(1) - p.window_left};
          mask_scores(s, start, cta.end, key_lo, key_hi);
        } else {
          mask_scores(s, start, cta.end, {INT_MIN, INT_MIN}, key_hi);
        }
      }
      if constexpr (kCustom)
        if (cut) mask_words.apply(s);
      // ALiBi after the masks (a masked -inf stays -inf), once the mask's words are dead: beside
      // them its terms made the head_dim 96 consumers spill (ptxas -v).
      if (kFeatures && p.alibi_scale != 0.f) {
        float slope[2];
        int q_pos[2];
#pragma unroll
        for (int h = 0; h < 2; ++h)
          alibi_row(p, cta.kv_head, cta.group, token(h), cta.q_row + 64 * g + 16 * warp + lane / 4 + 8 * h,
                    cta.q_offset, slope[h], q_pos[h]);
        alibi_scores(s, start, slope, q_pos);
      }
      softmax_step</*kLazyMax=*/true>(s, row_m, row_l, alpha, row_scale);
    };
    // O shrinks by the alpha of the tile whose P V product goes out next, in that product's turn
    // after the score product is issued (FlashAttention-3's order), so the multiplies run while
    // the tensor cores do. The running max moves lazily (score_fragment.cuh): after the first
    // tiles a warp's alphas are usually all 1, and then it skips the 64 multiplies.
    auto rescale_output = [&]() {
      if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) rescale_rows(o, alpha);
    };
    auto turn_begin = [&]() { sm90::named_barrier_sync<256>(kTurnBarrier + g); };
    auto turn_end = [&]() { sm90::named_barrier_arrive<256>(kTurnBarrier + 1 - g); };

    // Software pipeline (FlashAttention-3's intra-warpgroup overlap): the scores of tile t are
    // computed while the output product of tile t - 1 runs, and its softmax overlaps that
    // product too; the weights of tile t wait for it (P registers in flight).
    sm90::mbar_wait(sh.q_full(n), sh.q_parity(n));
    int tiles = cta.num_tiles;  // through the ring for this pair
    const uint32_t* const seen_tiles = sh.seen_of(n);
    if constexpr (kStaged) {
      sm90::mbar_wait(sh.scanned(n), sh.q_parity(n));
      tiles = int(seen_tiles[kSeenWords]);
    }
    // Moves `key` to the key tile of the next ring position.
    auto advance_key = [&]() {
      if constexpr (kStaged) {
        key = next_tile<true>(seen_tiles, key);
        // Through lane 0, so that ptxas sees the branches on it uniform (it serialized the
        // kernel's wgmma behind a branch it could not tell was: C7518).
        cut = __shfl_sync(0xffffffffu, int(is_cut(seen_tiles, key)), 0) != 0;
      }
    };
    if (kFp8Scores && !unscale_first) {
#pragma unroll
      for (int h = 0; h < 2; ++h) row_scale[h] = scale * sh.q_inv_slot(n)[row_in_pair(h)];
    }
    // q's slot is free for a later pair once the last score product is done (or, with staged
    // output, once the rows are out).
    auto release_q = [&]() { sm90::mbar_arrive(sh.q_empty(n)); };
    if (!kStagedOutput && tiles == 0) release_q();
    // Tiles a warpgroup sees nothing of (`seen`, custom masks) take their turn without products
    // and release their stages; `pending` says whether p_frag holds weights whose output product
    // has not gone out (the tile before's, where the loop issues it). Without skips it is true
    // wherever it is read, and so is it compiled. Each path issues and waits for its products in
    // a fixed order: ptxas cannot tie one branch on `pending` to another, and where a wait
    // depended on one it serialized every wgmma of the kernel (C7514).
    bool pending = !kStaged;
    // Tile t's score product with no output product pending (the pair's first tile, or the first
    // after unseen ones), its softmax and weights.
    auto first_scores = [&](int t) {
      turn_begin();
      sm90::wgmma_fence();
      issue_scores(t);
      turn_end();
      load_cut_mask(t);
      sm90::wgmma_wait<0>();
      sm90::pin(s_flat);
      sm90::mbar_arrive(sh.k_empty(stage(t)));
      if (!kStagedOutput && t == tiles - 1) release_q();
      softmax_scores(t);
#pragma unroll
      for (int jj = 0; jj < kKv / 16; ++jj) weights_fragment<dtype>(p_frag[jj], s, jj);
      pending = true;
    };
    // A turn without a score product: tile t's output product if pending, waited for (or not:
    // the wait is then free).
    auto output_turn = [&](int t) {
      turn_begin();
      if (pending) {
        rescale_output();
        sm90::wgmma_fence();
        issue_output(t);
      }
      turn_end();
      sm90::wgmma_wait<0>();
      sm90::pin(o_flat);
      sm90::pin(p_frag);
      pending = false;
    };
    // A tile none of the warpgroup's rows sees: its turn, tile t - 1's pending output product.
    auto unseen = [&](int t) {
      output_turn(t - 1);
      sm90::mbar_arrive(sh.k_empty(stage(t)));
      if (!kStagedOutput && t == tiles - 1) release_q();
    };
    if (tiles > 0) {
      advance_key();
      sm90::mbar_wait(sh.k_full(stage(0)), parity(0));
      sm90::fence_async_shared();  // the copies landed through the generic proxy (see produce)
      if (seen(0)) first_scores(0);
      else unseen(0);  // nothing pending: the turn alone
    }
#pragma unroll 1
    for (int t = 1; t < tiles; ++t) {
      // Both waits before the fence: a wait loop between it and a wgmma makes the compiler fence
      // again (warning C7519).
      advance_key();
      sm90::mbar_wait(sh.k_full(stage(t)), parity(t));
      sm90::mbar_wait(sh.v_full(stage(t - 1)), parity(t - 1));
      sm90::fence_async_shared();
      if (!seen(t)) {
        unseen(t);
        sm90::mbar_arrive(sh.v_empty(stage(t - 1)));
      } else if (kStaged && !pending) {
        sm90::mbar_arrive(sh.v_empty(stage(t - 1)));  // no product read it
        first_scores(t);
      } else {
        turn_begin();
        sm90::wgmma_fence();
        issue_scores(t);
        rescale_output();  // by tile t - 1's alpha, while the score product runs
        sm90::wgmma_fence();
        issue_output(t - 1);
        turn_end();
        load_cut_mask(t);
        sm90::wgmma_wait<1>();  // the scores
        sm90::pin(s_flat);
        sm90::mbar_arrive(sh.k_empty(stage(t)));
        if (!kStagedOutput && t == tiles - 1) release_q();
        softmax_scores(t);
        sm90::wgmma_wait<0>();  // the output product of tile t - 1
        sm90::pin(o_flat);
        sm90::pin(p_frag);
        sm90::mbar_arrive(sh.v_empty(stage(t - 1)));
#pragma unroll
        for (int jj = 0; jj < kKv / 16; ++jj) weights_fragment<dtype>(p_frag[jj], s, jj);
      }
    }
    if (tiles > 0) {
      const int last = tiles - 1;
      sm90::mbar_wait(sh.v_full(stage(last)), parity(last));
      sm90::fence_async_shared();
      output_turn(last);
      sm90::mbar_arrive(sh.v_empty(stage(last)));
    }

    // Epilogue: normalise; o/lse, or the float state of a split tile.
    const int state_base = cta.state, state_stride = cta.state_stride;
    char* const staging = sh.q_slot(n);  // this consumer's q rows (kStagedOutput)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      RowResult r(row_m[h], row_l[h], row_scale[h]);
      const int row = 64 * g + 16 * warp + lane / 4 + 8 * h;
      if (row >= cta.valid_rows) continue;
      if (cta.takes_sink(p)) cta.add_sink(p, row, r);
      r.inv *= p.v_scale;
      if (state_base < 0) {
        if constexpr (kStagedOutput) {
#pragma unroll
          for (int j = 0; j < head_dim_vo / 8; ++j)
            *reinterpret_cast<uint32_t*>(staging + sm90::sw128_offset(kRows, row, j) + 4 * (lane % 4)) =
                pack2<dtype_o>(o[j][2 * h] * r.inv, o[j][2 * h + 1] * r.inv);
        } else {
          dtype_o* dst = static_cast<dtype_o*>(p.o) + cta.out_row(p, row) * head_dim_vo + 2 * (lane % 4);
#pragma unroll
          for (int j = 0; j < head_dim_vo / 8; ++j)
            *reinterpret_cast<uint32_t*>(dst + 8 * j) = pack2<dtype_o>(o[j][2 * h] * r.inv, o[j][2 * h + 1] * r.inv);
        }
        if (p.lse && lane % 4 == 0) p.lse[cta.out_row(p, row)] = r.lse;
      } else {
        const int64_t state = state_base + int64_t(cta.kv_head * cta.valid_rows + row) * state_stride;
        float* dst = p.partial_o + state * head_dim_vo + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < head_dim_vo / 8; ++j)
          *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[j][2 * h] * r.inv, o[j][2 * h + 1] * r.inv);
        if (lane % 4 == 0) p.partial_lse[state] = r.lse;
      }
    }
    if constexpr (kStagedOutput) {
      if (state_base < 0) {  // the staged rows out, a row's chunks by consecutive threads
        sm90::named_barrier_sync<128>(kOutputBarrier + g);
        dtype_o* const out = static_cast<dtype_o*>(p.o);
        constexpr int kOutChunks = head_dim_vo / 8;  // of an o row
        if constexpr (128 % kOutChunks == 0) {
          // This thread's chunks are column c of rows kRowStep apart, whose tokens and heads
          // step instead of being divided out of each packed row (the divisions were 30 % of
          // the per-pair instructions at causal 16 x 1k, ncu).
          constexpr int kRowStep = 128 / kOutChunks;
          const int c = int(threadIdx.x) % kOutChunks;
          int row = 64 * g + int(threadIdx.x % 128) / kOutChunks;
          PackedRow at(cta.q_row + row, cta.group, by_group);
          const PackedRow step(kRowStep, cta.group, by_group);
#pragma unroll
          for (int k = 0; k < 64 / kRowStep; ++k) {
            if (row < cta.valid_rows)
              *reinterpret_cast<uint4*>(out + cta.row_offset(p, at, head_dim_vo) + c * 8) =
                  *reinterpret_cast<const uint4*>(staging + sm90::sw128_offset(kRows, row, c));
            row += kRowStep;
            at.advance(step, cta.group);
          }
        } else {
#pragma unroll
          for (int k = 0; k < 64 * kOutChunks / 128; ++k) {
            const int chunk = k * 128 + int(threadIdx.x % 128), row = 64 * g + chunk / kOutChunks, c = chunk % kOutChunks;
            if (row < cta.valid_rows)
              *reinterpret_cast<uint4*>(out + cta.out_row(p, row) * head_dim_vo + c * 8) =
                  *reinterpret_cast<const uint4*>(staging + sm90::sw128_offset(kRows, row, c));
          }
        }
      }
      // After this thread's accesses to the staged rows, which the slot's next TMA copy (async
      // proxy) must not overtake.
      sm90::fence_async_shared();
      release_q();
    }
    return tiles;
  }
};

}  // namespace aotinfer
