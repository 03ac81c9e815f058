#include "aotinfer/merge_state.hpp"

#include <string>

namespace aotinfer {

VariantKey MergeState::variant_key(DType dtype, int head_dim) {
  return VariantKey{"merge_state", {{"dtype", std::string(dtype_name(dtype))}, {"head_dim", std::to_string(head_dim)}}};
}

MergeState::MergeState(const Package& package, DType dtype, int head_dim)
    : kernel_(package.kernel(variant_key(dtype, head_dim), "merge")) {}

void MergeState::run(const aotinfer_merge_state_params& p, Stream stream) const {
  if (p.rows < 0) throw Error(ErrorCode::invalid_argument, "merge_state: rows must be >= 0, got " + std::to_string(p.rows));
  if (p.rows == 0) return;
  if (!p.v_a || !p.s_a || !p.v_b || !p.s_b || !p.v_out)
    throw Error(ErrorCode::invalid_argument, "merge_state: v_a, s_a, v_b, s_b and v_out must not be null (s_out may be)");
  const std::int64_t rows_per_cta = kernel_.launch_info().tile[0];
  const std::int64_t ctas = (p.rows + rows_per_cta - 1) / rows_per_cta;
  if (ctas > 0x7fffffff)
    throw Error(ErrorCode::invalid_argument, "merge_state: " + std::to_string(p.rows) + " rows exceed one launch's grid");
  kernel_.launch(Grid{unsigned(ctas)}, p, stream);
}

}  // namespace aotinfer
