// Types the attention front-ends (BatchDecode, BatchPrefill) share.
#pragma once
#include <cstddef>

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
enum class KvLayout { nhd, hnd };  // [pages, page_size, heads, dim] / [pages, heads, page_size, dim]

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
