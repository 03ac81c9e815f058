#include "aotinfer/append_paged_kv.hpp"

#include <string>

namespace aotinfer {

AppendPagedKv::AppendPagedKv(const Package& package, DType dtype, int head_dim)
    : kernel_(package.kernel(VariantKey{"append_paged_kv", {{"dtype", std::string(dtype_name(dtype))},
                                                            {"head_dim", std::to_string(head_dim)}}},
                             "append")) {}

void AppendPagedKv::run(const aotinfer_append_paged_kv_params& p, Stream stream) const {
  auto invalid = [](const std::string& what) { throw Error(ErrorCode::invalid_argument, "append_paged_kv: " + what); };
  if (p.nnz < 0) invalid("nnz must be >= 0, got " + std::to_string(p.nnz));
  if (p.nnz == 0) return;
  if (p.kv.num_kv_heads < 1 || p.kv.page_size < 1) invalid("num_kv_heads and page_size must be >= 1");
  if (!p.k || !p.v || !p.batch_indices || !p.positions || !p.kv.k_pages || !p.kv.v_pages || !p.kv.indptr || !p.kv.indices)
    invalid("k, v, batch_indices, positions, k_pages, v_pages, indptr and indices must not be null");
  const std::int64_t rows = p.nnz * p.kv.num_kv_heads;
  const std::int64_t per_cta = kernel_.launch_info().tile[0];
  const std::int64_t ctas = (rows + per_cta - 1) / per_cta;
  if (ctas > 0x7fffffff) invalid(std::to_string(p.nnz) + " tokens exceed one launch's grid");
  kernel_.launch(Grid{unsigned(ctas)}, p, stream);
}

}  // namespace aotinfer
