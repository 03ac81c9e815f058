// merge_state front-end: merges two attention states (v, log-sum-exp) row by row.
// The contract is aotinfer/params/merge_state.h.
#pragma once
#include "aotinfer/dtype.hpp"
#include "aotinfer/package.hpp"
#include "aotinfer/params/merge_state.h"

namespace aotinfer {

class MergeState {
 public:
  // Finds and loads merge_state for (dtype, head_dim). Throws Error(not_found) when the
  // package lacks it, naming what it has.
  MergeState(const Package& package, DType dtype, int head_dim);
  // The merge_state variant for (dtype, head_dim); BatchDecode and BatchPrefill load its
  // merge_varlen entry with their dtype_o.
  static VariantKey variant_key(DType dtype, int head_dim);

  // Launches on `stream`; rows == 0 launches nothing. Throws Error(invalid_argument) for null
  // pointers or negative rows, before anything is launched.
  void run(const aotinfer_merge_state_params& params, Stream stream) const;

  const Kernel& kernel() const { return kernel_; }

 private:
  Kernel kernel_;
};

}  // namespace aotinfer
