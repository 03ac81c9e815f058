// append_paged_kv front-end: writes new tokens' K and V into their pages before a decode or
// prefill step. The contract is aotinfer/params/append_paged_kv.h.
#pragma once
#include "aotinfer/dtype.hpp"
#include "aotinfer/package.hpp"
#include "aotinfer/params/append_paged_kv.h"

namespace aotinfer {

class AppendPagedKv {
 public:
  // dtype is the cache's element type (f16, bf16, e4m3, e5m2).
  AppendPagedKv(const Package& package, DType dtype, int head_dim);
  // The append_paged_kv variant the constructor loads.
  static VariantKey variant_key(DType dtype, int head_dim);

  // nnz == 0 launches nothing. Throws Error(invalid_argument) before launching for null pointers,
  // nnz < 0, num_kv_heads < 1, or pointers and strides that are not 16-byte aligned.
  void run(const aotinfer_append_paged_kv_params& params, Stream stream) const;

 private:
  DType dtype_;
  Kernel kernel_;
};

}  // namespace aotinfer
