// The work item and row group a CTA of batch_mla_decode takes. The grid is (padded work, row
// groups) (aotinfer/params/batch_mla_decode.h), and the hardware starts CTAs in linear order,
// blockIdx.x fastest; CTA l = blockIdx.x + blockIdx.y * gridDim.x takes item l / row_groups and
// row group l % row_groups, so the row groups of one item run side by side and read its cache
// rows from L2 once DRAM has delivered them to the first. (Item-major, a 128-head request's row
// groups ran a wave apart, each reading the cache from DRAM: the compute-bound rows were bound
// by DRAM.)
#pragma once

namespace aotinfer {

struct MlaCta {
  int item, row_group;
  __device__ __forceinline__ MlaCta() {
    const int linear = int(blockIdx.x + blockIdx.y * gridDim.x), groups = int(gridDim.y);
    item = linear / groups;
    row_group = linear - item * groups;
  }
};

}  // namespace aotinfer
