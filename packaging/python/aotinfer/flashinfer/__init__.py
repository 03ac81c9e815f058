"""A FlashInfer-compatible layer over aotinfer's kernels: an engine written against FlashInfer's
Python API (0.7.x) switches by changing one import.

    from aotinfer import flashinfer       # instead of: import flashinfer
    decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    decode.plan(indptr, indices, last_page_len, 32, 8, 128, 16, q_data_type=torch.bfloat16)
    o = decode.run(q, kv_cache)          # per layer

docs/FLASHINFER.md lists the subset served. Arguments are checked in plain Python before any
tensor or the GPU is touched: what aotinfer does not serve raises NotImplementedError naming the
argument, its value and what is served. A served configuration whose variant the kernel package
lacks raises aotinfer.NotFound naming the spec entry that adds it. LSE values are base 2, as
FlashInfer's. Importing needs no PyTorch; plan(), run() and the functions do.

Modules as FlashInfer's: decode (with decode_graph's CUDA-graph helpers), prefill, cascade, page, mla;
_args holds the argument checks, _base what the wrappers share.
"""
from .cascade import (BatchDecodeWithSharedPrefixPagedKVCacheWrapper, BatchPrefillWithSharedPrefixPagedKVCacheWrapper,
                      MultiLevelCascadeAttentionWrapper, merge_state, merge_state_in_place, merge_states)
from .decode import BatchDecodeWithPagedKVCacheWrapper, CUDAGraphBatchDecodeWithPagedKVCacheWrapper, fast_decode_plan
from .mla import BatchMLAPagedAttentionWrapper
from .page import append_paged_kv_cache, get_batch_indices_positions, get_seq_lens
from .prefill import BatchPrefillWithPagedKVCacheWrapper, BatchPrefillWithRaggedKVCacheWrapper

__all__ = ["BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper",
           "BatchPrefillWithRaggedKVCacheWrapper", "merge_state", "merge_state_in_place", "merge_states",
           "append_paged_kv_cache", "get_batch_indices_positions", "get_seq_lens", "MultiLevelCascadeAttentionWrapper",
           "BatchDecodeWithSharedPrefixPagedKVCacheWrapper", "BatchPrefillWithSharedPrefixPagedKVCacheWrapper",
           "CUDAGraphBatchDecodeWithPagedKVCacheWrapper", "fast_decode_plan", "BatchMLAPagedAttentionWrapper"]
