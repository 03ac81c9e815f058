// Types the attention front-ends (BatchDecode, BatchPrefill) share.
#pragma once
#include <cstddef>
#include <cstdint>

namespace aotinfer {

enum class PosEncoding { none, rope_llama, alibi };
inline const char* pos_encoding_name(PosEncoding p) {  // as variant keys spell it
  switch (p) {
    case PosEncoding::none: return "none";
    case PosEncoding::rope_llama: return "rope_llama";
    case PosEncoding::alibi: return "alibi";
  }
  return "?";
}
enum class KvLayout { nhd, hnd };

// How a plan divides each request's keys among work items.
//   adaptive: long KV is split only when the batch alone cannot fill the GPU, into the smallest
//     chunks that fill one wave. Fastest; a request's bytes may depend on the rest of the batch.
//   fixed, none: batch-invariant. A request's output and LSE are the same bytes whatever else is
//     in the batch, its size and the request order, and (prefill) however its queries were cut
//     into chunks. fixed cuts every request's keys at multiples of `tokens` counted from key 0
//     (rounded up to the kernel's KV tile); none keeps them in one work item. A fixed split
//     reads the same bytes as adaptive and merges partial states; none leaves SMs idle when a
//     few long requests make the batch.
struct KvSplit {
  enum class Mode { adaptive, fixed, none };
  Mode mode = Mode::adaptive;
  std::int32_t tokens = 0;  // fixed: keys per chunk, >= 1
  bool invariant() const { return mode != Mode::adaptive; }
  // The chunk for a kernel whose pipeline moves `tile` keys per stage (fixed only).
  std::int64_t chunk_for(std::int32_t tile) const { return (std::int64_t(tokens) + tile - 1) / tile * tile; }
};
inline const char* kv_split_name(KvSplit::Mode m) {  // as configs spell it
  switch (m) {
    case KvSplit::Mode::adaptive: return "adaptive";
    case KvSplit::Mode::fixed: return "fixed";
    case KvSplit::Mode::none: return "none";
  }
  return "?";
}  // [pages, page_size, heads, dim] / [pages, heads, page_size, dim]

// Device memory a plan writes and run() reads; allocate once at the sizes workspace_sizes()
// gives and pass to every plan.
struct WorkspaceSizes {
  std::size_t float_bytes = 0;  // partial states of split plans
  std::size_t int_bytes = 0;    // the work partition
};

struct Workspace {
  void* float_buffer = nullptr;  // device memory, 256-byte aligned
  std::size_t float_bytes = 0;
  void* int_buffer = nullptr;    // device memory, 256-byte aligned
  std::size_t int_bytes = 0;
};

}  // namespace aotinfer
