"""FlashInfer's CUDA-graph decode helpers of flashinfer.decode: fast_decode_plan, the plan()
engines install on their decode wrappers, and CUDAGraphBatchDecodeWithPagedKVCacheWrapper.
decode.py imports both into its namespace, as FlashInfer's module holds them."""
from . import _base
from .decode import BatchDecodeWithPagedKVCacheWrapper


class CUDAGraphBatchDecodeWithPagedKVCacheWrapper(BatchDecodeWithPagedKVCacheWrapper):
    """The decode wrapper in CUDA-graph mode over the caller's metadata buffers (FlashInfer's
    older spelling of use_cuda_graph=True): the batch size is len(last_page_len_buffer), the
    indptr buffer holds one more entry, the indices buffer the most pages any plan may have."""

    def __init__(self, workspace_buffer, indptr_buffer, indices_buffer, last_page_len_buffer, kv_layout="NHD",
                 use_tensor_cores=False, *, package=None):
        super().__init__(workspace_buffer, kv_layout, use_cuda_graph=True, use_tensor_cores=use_tensor_cores,
                         paged_kv_indptr_buffer=indptr_buffer, paged_kv_indices_buffer=indices_buffer,
                         paged_kv_last_page_len_buffer=last_page_len_buffer, package=package)


def fast_decode_plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
                     pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type=None,
                     kv_data_type=None, data_type=None, sm_scale=None, rope_scale=None, rope_theta=None,
                     non_blocking=True, fixed_split_size=None, disable_split_kv=False, q_len_per_req=1,
                     global_override_indptr_cpu=None):
    """plan() of a decode wrapper (self), as engines install it:
    wrapper.begin_forward = functools.partial(fast_decode_plan, wrapper). The same plan and the
    same results as plan(); the difference is the host synchronisation saved:

    - global_override_indptr_cpu, a CPU copy of indptr the engine already holds (its first
      batch + 1 entries are read), stands in for reading indptr back from the GPU;
    - with page_size 1 every last_page_len is 1, which is not read back either.

    Metadata passed as the wrapper's own CUDA-graph buffers (engines fill them on the GPU) is
    copied onto itself, which PyTorch skips. plan() does the work, called through the class, so
    an engine may install this function as the instance's plan as well. q_len_per_req > 1, as in
    FlashInfer, re-plans a wrapper plan() has already planned (with tensor cores)."""
    if not isinstance(self, BatchDecodeWithPagedKVCacheWrapper):
        raise TypeError(f"aotinfer.flashinfer fast_decode_plan: self must be a BatchDecodeWithPagedKVCacheWrapper, "
                        f"got {type(self).__name__}")
    batch = len(last_page_len)
    q_len = 1 if q_len_per_req is None else int(q_len_per_req)
    if q_len > 1 and self._core is None and not self._verifying:
        raise ValueError("aotinfer.flashinfer fast_decode_plan: q_len_per_req > 1 needs a prior plan() of this wrapper "
                         "(with use_tensor_cores=True), as in FlashInfer")
    if data_type is not None:  # fills the types left None, as plan()
        q_data_type = data_type if q_data_type is None else q_data_type
        kv_data_type = data_type if kv_data_type is None else kv_data_type
    if global_override_indptr_cpu is not None:
        indptr = global_override_indptr_cpu[:batch + 1]
    if page_size == 1:
        last_page_len = _base.need_torch().ones(batch, dtype=_base.torch.int32)
    type(self).plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
                    pos_encoding_mode=pos_encoding_mode, window_left=window_left, logits_soft_cap=logits_soft_cap,
                    q_data_type="float16" if q_data_type is None else q_data_type, kv_data_type=kv_data_type,
                    sm_scale=sm_scale, rope_scale=rope_scale, rope_theta=rope_theta, non_blocking=non_blocking,
                    fixed_split_size=fixed_split_size, disable_split_kv=disable_split_kv, q_len_per_req=q_len)
