// TMA tensor maps for the kernels that read tensors through them (the Hopper prefill and MLA
// decode kernels: aotinfer/params/batch_prefill.h, batch_mla_decode.h). Internal to the runtime.
#pragma once
#include <cstdint>

#include "aotinfer/abi.h"
#include "aotinfer/dtype.hpp"

namespace aotinfer::detail {

// A 16-bit tensor of `rows` rows, `heads` heads a row and `head_dim` contiguous values a head
// (heads `head_dim` apart, rows `row_stride` elements apart), as the map the kernels read:
// dimensions (head_dim, heads, rows), boxes of 64 x box_heads x box_rows, 128-byte swizzle,
// zeros outside the tensor. `data` and the row stride in bytes must be multiples of 16 (run()
// checks both). Throws Error(cuda_error) if the driver refuses.
aotinfer_tensor_map rows_tensor_map(DType dtype, const void* data, std::int64_t rows, std::int64_t heads, int head_dim,
                                    std::int64_t row_stride, int box_heads, int box_rows);

// A paged 16-bit cache [pages, page_size, width] (rows `width` contiguous values, pages
// `page_stride` elements apart) as the map the MLA decode kernel reads: dimensions (width,
// page_size, 2^31 - 1 pages; the kernel reads only pages that plan() checked), boxes of 64 x
// min(page_size, 64) x 1, 128-byte swizzle. Throws Error(cuda_error) if the driver refuses.
aotinfer_tensor_map paged_tensor_map(DType dtype, const void* data, int width, int page_size, std::int64_t page_stride);

}  // namespace aotinfer::detail
