"""aotinfer.flashinfer without PyTorch and without a GPU: the API mirrors FlashInfer 0.7's
signatures, FlashInfer arguments map onto aotinfer configurations (and onto variants of the
installed package, specs/ci.json's), and what aotinfer does not serve is refused with
NotImplementedError before any tensor or the GPU is touched. Tensor arguments are stand-ins.
Run against an installed wheel (tests/python_wheel.sh)."""
import inspect
import math
import sys
import unittest

_TORCH_BEFORE = "torch" in sys.modules
import aotinfer  # noqa: E402
from aotinfer import flashinfer  # noqa: E402
from aotinfer.flashinfer import _args, _base, _masks  # noqa: E402

REQUIRED = object()


class Stand:
    """A tensor stand-in: shape, dtype (as torch spells it) and __cuda_array_interface__;
    nothing is dereferenced. Any tensor method call would fail, which the tests rely on."""

    def __init__(self, shape=(16,), dtype="torch.int32"):
        self.shape, self.dtype = tuple(shape), dtype
        self.__cuda_array_interface__ = {"shape": self.shape, "typestr": "<i4", "data": (0x7000_0000_0000, False),
                                         "version": 3}


class DType:
    """A torch.dtype stand-in: its class is named dtype and str() gives "torch.<name>"."""

    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text


DType.__name__ = "dtype"


def params(fn):
    """[(name, default or REQUIRED, keyword-only)] without self and aotinfer's package=."""
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.name in ("self", "package"):
            continue
        if p.kind == p.VAR_POSITIONAL:
            out.append(("*" + p.name, REQUIRED, False))
            continue
        out.append((p.name, REQUIRED if p.default is p.empty else p.default, p.kind == p.KEYWORD_ONLY))
    return out


def positional(*items):
    return [(n, d, False) for n, d in items]


def keyword(*items):
    return [(n, d, True) for n, d in items]


R = REQUIRED
# FlashInfer 0.7.2's signatures (flashinfer/decode.py, prefill.py, cascade.py, page.py): name,
# default, keyword-only. Decode plan's optional arguments are FlashInfer's legacy positional order.
FLASHINFER_0_7 = {
    "BatchDecodeWithPagedKVCacheWrapper.__init__": positional(
        ("float_workspace_buffer", R), ("kv_layout", "NHD"), ("use_cuda_graph", False), ("use_tensor_cores", False),
        ("paged_kv_indptr_buffer", None), ("paged_kv_indices_buffer", None), ("paged_kv_last_page_len_buffer", None),
        ("backend", "auto"), ("jit_args", None)),
    "BatchDecodeWithPagedKVCacheWrapper.plan": positional(
        ("indptr", R), ("indices", R), ("last_page_len", R), ("num_qo_heads", R), ("num_kv_heads", R),
        ("head_dim", R), ("page_size", R), ("pos_encoding_mode", "NONE"), ("window_left", -1),
        ("logits_soft_cap", None), ("q_data_type", "float16"), ("kv_data_type", None), ("o_data_type", None),
        ("data_type", None), ("sm_scale", None), ("rope_scale", None), ("rope_theta", None), ("non_blocking", True),
        ("block_tables", None), ("seq_lens", None), ("fixed_split_size", None), ("disable_split_kv", False),
        ("q_len_per_req", 1)) + keyword(("window_right", 0), ("is_causal", None)),
    "BatchDecodeWithPagedKVCacheWrapper.run": positional(("q", R), ("paged_kv_cache", R), ("*args", R)) + keyword(
        ("q_scale", None), ("k_scale", None), ("v_scale", None), ("out", None), ("lse", None), ("return_lse", False),
        ("enable_pdl", None), ("window_left", None), ("sinks", None), ("q_len_per_req", None),
        ("skip_softmax_threshold_scale_factor", None), ("kv_cache_sf", None)),
    "BatchDecodeWithPagedKVCacheWrapper.forward": positional(
        ("q", R), ("paged_kv_cache", R), ("pos_encoding_mode", "NONE"), ("q_scale", None), ("k_scale", None),
        ("v_scale", None), ("window_left", -1), ("logits_soft_cap", None), ("sm_scale", None), ("rope_scale", None),
        ("rope_theta", None)),
    "BatchPrefillWithPagedKVCacheWrapper.__init__": positional(
        ("float_workspace_buffer", R), ("kv_layout", "NHD"), ("use_cuda_graph", False), ("qo_indptr_buf", None),
        ("paged_kv_indptr_buf", None), ("paged_kv_indices_buf", None), ("paged_kv_last_page_len_buf", None),
        ("custom_mask_buf", None), ("mask_indptr_buf", None), ("backend", "auto"), ("jit_args", None),
        ("jit_kwargs", None), ("variant_owns_mask", False)),
    "BatchPrefillWithPagedKVCacheWrapper.plan": positional(
        ("qo_indptr", R), ("paged_kv_indptr", R), ("paged_kv_indices", R), ("paged_kv_last_page_len", R),
        ("num_qo_heads", R), ("num_kv_heads", R), ("head_dim_qk", R), ("page_size", R), ("head_dim_vo", None),
        ("custom_mask", None), ("packed_custom_mask", None), ("causal", False), ("pos_encoding_mode", "NONE"),
        ("use_fp16_qk_reduction", False), ("sm_scale", None), ("window_left", -1), ("logits_soft_cap", None),
        ("rope_scale", None), ("rope_theta", None), ("q_data_type", "float16"), ("kv_data_type", None),
        ("o_data_type", None), ("non_blocking", True), ("prefix_len_ptr", None), ("token_pos_in_items_ptr", None),
        ("token_pos_in_items_len", 0), ("max_item_len_ptr", None), ("seq_lens", None), ("seq_lens_q", None),
        ("block_tables", None), ("max_token_per_sequence", None), ("max_sequence_kv", None),
        ("fixed_split_size", None), ("disable_split_kv", False), ("uniform_q_len", None)),
    "BatchPrefillWithPagedKVCacheWrapper.run": positional(("q", R), ("paged_kv_cache", R), ("*args", R)) + keyword(
        ("q_scale", None), ("k_scale", None), ("v_scale", None), ("out", None), ("lse", None), ("return_lse", False),
        ("lse_base", "log2"), ("lse_layout", "NH"), ("enable_pdl", None), ("window_left", None), ("sinks", None),
        ("kv_cache_sf", None), ("skip_softmax_threshold_scale_factor", None), ("use_fp16_softmax", None),
        ("uses_spcompress", None)),
    "BatchPrefillWithPagedKVCacheWrapper.forward": positional(
        ("q", R), ("paged_kv_cache", R), ("causal", False), ("pos_encoding_mode", "NONE"),
        ("use_fp16_qk_reduction", False), ("k_scale", None), ("v_scale", None), ("window_left", -1),
        ("logits_soft_cap", None), ("sm_scale", None), ("rope_scale", None), ("rope_theta", None)),
    "BatchPrefillWithRaggedKVCacheWrapper.__init__": positional(
        ("float_workspace_buffer", R), ("kv_layout", "NHD"), ("use_cuda_graph", False), ("qo_indptr_buf", None),
        ("kv_indptr_buf", None), ("custom_mask_buf", None), ("mask_indptr_buf", None), ("backend", "auto"),
        ("jit_args", None), ("jit_kwargs", None), ("variant_owns_mask", False)),
    "BatchPrefillWithRaggedKVCacheWrapper.plan": positional(
        ("qo_indptr", R), ("kv_indptr", R), ("num_qo_heads", R), ("num_kv_heads", R), ("head_dim_qk", R),
        ("head_dim_vo", None), ("custom_mask", None), ("packed_custom_mask", None), ("causal", False),
        ("pos_encoding_mode", "NONE"), ("use_fp16_qk_reduction", False), ("window_left", -1),
        ("logits_soft_cap", None), ("sm_scale", None), ("rope_scale", None), ("rope_theta", None),
        ("q_data_type", "float16"), ("kv_data_type", None), ("o_data_type", None), ("non_blocking", True),
        ("prefix_len_ptr", None), ("token_pos_in_items_ptr", None), ("token_pos_in_items_len", 0),
        ("max_item_len_ptr", None), ("fixed_split_size", None), ("disable_split_kv", False), ("seq_lens", None),
        ("seq_lens_q", None), ("max_token_per_sequence", None), ("max_sequence_kv", None), ("v_indptr", None),
        ("o_indptr", None), ("uniform_q_len", None)),
    "BatchPrefillWithRaggedKVCacheWrapper.run": positional(("q", R), ("k", R), ("v", R), ("*args", R)) + keyword(
        ("q_scale", None), ("k_scale", None), ("v_scale", None), ("o_scale", None), ("out", None), ("lse", None),
        ("return_lse", False), ("lse_base", "log2"), ("lse_layout", "NH"), ("enable_pdl", None),
        ("kv_cache_sf", None)),
    "BatchPrefillWithRaggedKVCacheWrapper.forward": positional(
        ("q", R), ("k", R), ("v", R), ("causal", False), ("pos_encoding_mode", "NONE"),
        ("use_fp16_qk_reduction", False), ("window_left", -1), ("logits_soft_cap", None), ("sm_scale", None),
        ("rope_scale", None), ("rope_theta", None)),
    "merge_state": positional(("v_a", R), ("s_a", R), ("v_b", R), ("s_b", R)),
    "merge_state_in_place": positional(("v", R), ("s", R), ("v_other", R), ("s_other", R), ("mask", None)),
    "merge_states": positional(("v", R), ("s", R)),
    "append_paged_kv_cache": positional(
        ("append_key", R), ("append_value", R), ("batch_indices", R), ("positions", R), ("paged_kv_cache", R),
        ("kv_indices", R), ("kv_indptr", R), ("kv_last_page_len", R), ("kv_layout", "NHD")),
    "get_batch_indices_positions": positional(("append_indptr", R), ("seq_lens", R), ("nnz", R),
                                              ("batch_indices", None), ("positions", None)),
    "get_seq_lens": positional(("kv_indptr", R), ("kv_last_page_len", R), ("page_size", R)),
    # cascade.py's wrappers and decode.py's CUDA-graph helpers
    "MultiLevelCascadeAttentionWrapper.__init__": positional(
        ("num_levels", R), ("float_workspace_buffer", R), ("kv_layout", "NHD"), ("use_cuda_graph", False),
        ("qo_indptr_buf_arr", None), ("paged_kv_indptr_buf_arr", None), ("paged_kv_indices_buf_arr", None),
        ("paged_kv_last_page_len_buf_arr", None)),
    "MultiLevelCascadeAttentionWrapper.plan": positional(
        ("qo_indptr_arr", R), ("paged_kv_indptr_arr", R), ("paged_kv_indices_arr", R), ("paged_kv_last_page_len", R),
        ("num_qo_heads", R), ("num_kv_heads", R), ("head_dim", R), ("page_size", R), ("causal", False),
        ("pos_encoding_mode", "NONE"), ("use_fp16_qk_reduction", False), ("sm_scale", None), ("window_left", -1),
        ("logits_soft_cap", None), ("rope_scale", None), ("rope_theta", None), ("q_data_type", "float16"),
        ("kv_data_type", None)),
    "MultiLevelCascadeAttentionWrapper.run": positional(("q", R), ("paged_kv_cache", R)),
    "MultiLevelCascadeAttentionWrapper.reset_workspace_buffer": positional(("float_workspace_buffer", R),
                                                                           ("int_workspace_buffers", R)),
    "BatchDecodeWithSharedPrefixPagedKVCacheWrapper.__init__": positional(("float_workspace_buffer", R),
                                                                          ("kv_layout", "NHD")),
    "BatchDecodeWithSharedPrefixPagedKVCacheWrapper.begin_forward": positional(
        ("unique_kv_indptr", R), ("unique_kv_indices", R), ("unique_kv_last_page_len", R), ("num_qo_heads", R),
        ("num_kv_heads", R), ("head_dim", R), ("page_size", R), ("data_type", "float16")),
    "BatchDecodeWithSharedPrefixPagedKVCacheWrapper.forward": positional(
        ("q", R), ("k_shared", R), ("v_shared", R), ("unique_kv_cache", R)),
    "BatchDecodeWithSharedPrefixPagedKVCacheWrapper.reset_workspace_buffer": positional(
        ("float_workspace_buffer", R), ("int_workspace_buffer", R)),
    "BatchPrefillWithSharedPrefixPagedKVCacheWrapper.__init__": positional(("float_workspace_buffer", R),
                                                                           ("kv_layout", "NHD")),
    "BatchPrefillWithSharedPrefixPagedKVCacheWrapper.begin_forward": positional(
        ("qo_indptr", R), ("paged_kv_indptr", R), ("paged_kv_indices", R), ("paged_kv_last_page_len", R),
        ("num_qo_heads", R), ("num_kv_heads", R), ("head_dim", R), ("page_size", R)),
    "BatchPrefillWithSharedPrefixPagedKVCacheWrapper.forward": positional(
        ("q", R), ("k_shared", R), ("v_shared", R), ("unique_kv_cache", R), ("causal", False),
        ("use_fp16_qk_reduction", False), ("sm_scale", None), ("rope_scale", None), ("rope_theta", None)),
    "BatchPrefillWithSharedPrefixPagedKVCacheWrapper.reset_workspace_buffer": positional(
        ("float_workspace_buffer", R), ("int_workspace_buffer", R)),
    "CUDAGraphBatchDecodeWithPagedKVCacheWrapper.__init__": positional(
        ("workspace_buffer", R), ("indptr_buffer", R), ("indices_buffer", R), ("last_page_len_buffer", R),
        ("kv_layout", "NHD"), ("use_tensor_cores", False)),
    "fast_decode_plan": positional(
        ("indptr", R), ("indices", R), ("last_page_len", R), ("num_qo_heads", R), ("num_kv_heads", R),
        ("head_dim", R), ("page_size", R), ("pos_encoding_mode", "NONE"), ("window_left", -1),
        ("logits_soft_cap", None), ("q_data_type", None), ("kv_data_type", None), ("data_type", None),
        ("sm_scale", None), ("rope_scale", None), ("rope_theta", None), ("non_blocking", True),
        ("fixed_split_size", None), ("disable_split_kv", False), ("q_len_per_req", 1),
        ("global_override_indptr_cpu", None)),
    # flashinfer/mla/_batch_mla/_wrapper.py: the flat CSR plan and the split run.
    "BatchMLAPagedAttentionWrapper.__init__": positional(
        ("float_workspace_buffer", R), ("use_cuda_graph", False), ("qo_indptr", None), ("kv_indptr", None),
        ("kv_indices", None), ("kv_len_arr", None), ("backend", "auto")),
    "BatchMLAPagedAttentionWrapper.plan": positional(
        ("qo_indptr", None), ("kv_indptr", None), ("kv_indices", None), ("kv_len_arr", None), ("num_heads", None),
        ("head_dim_ckv", None), ("head_dim_kpe", None), ("page_size", None), ("causal", None), ("sm_scale", None),
        ("q_data_type", None), ("kv_data_type", None), ("use_profiler", False)) + keyword(
        ("metadata", None), ("cum_seq_lens_q", None), ("block_tables", None), ("seq_lens", None), ("max_q_len", None),
        ("query_layout", None), ("kv_cache_layout", None), ("lse_mode", "none"), ("output_dtype", None),
        ("output_scale", "none"), ("scale_mode", "default"), ("skip_softmax", False), ("enable_pdl", None),
        ("use_sinks", False)),
    "BatchMLAPagedAttentionWrapper.run": positional(
        ("q_nope", None), ("q_pe", None), ("ckv_cache", None), ("kpe_cache", None), ("out", None), ("lse", None),
        ("return_lse", False), ("profiler_buffer", None), ("kv_len", None), ("page_table", None),
        ("return_lse_base_on_e", False), ("o_scale", None)) + keyword(
        ("query", None), ("kv_cache", None), ("ckv_scale", None), ("ckv_scale_arr", None), ("kpe_scale", None),
        ("sinks", None), ("skip_softmax_threshold_scale_factor", None), ("bmm1_scale", None), ("bmm2_scale", None)),
}

DECODE_ARGS = ([0, 1], [0], [1], 32, 8, 128, 16)  # indptr, indices, last_page_len, heads, kv heads, dim, page


def paged_args():
    return [0, 4], [0, 1], [0], [4], 32, 8, 128, 16


def ragged_args():
    return [0, 4], [0, 4], 32, 8, 128


def has_torch():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


class ApiTest(unittest.TestCase):
    def test_importing_needs_no_torch(self):
        if not _TORCH_BEFORE:
            self.assertNotIn("torch", sys.modules)

    def test_public_names(self):
        for name in flashinfer.__all__:
            self.assertTrue(hasattr(flashinfer, name), name)
        self.assertIs(flashinfer.BatchDecodeWithPagedKVCacheWrapper,
                      flashinfer.decode.BatchDecodeWithPagedKVCacheWrapper)
        self.assertIs(flashinfer.BatchPrefillWithRaggedKVCacheWrapper,
                      flashinfer.prefill.BatchPrefillWithRaggedKVCacheWrapper)
        self.assertIs(flashinfer.merge_state, flashinfer.cascade.merge_state)
        self.assertIs(flashinfer.append_paged_kv_cache, flashinfer.page.append_paged_kv_cache)

    def test_signatures_mirror_flashinfer_0_7(self):
        for qualified, expected in FLASHINFER_0_7.items():
            owner, _, method = qualified.rpartition(".")
            fn = getattr(getattr(flashinfer, owner), method) if owner else getattr(flashinfer, method)
            with self.subTest(qualified):
                self.assertEqual(params(fn), expected)

    def test_package_is_an_extra_keyword(self):
        for cls in (flashinfer.BatchDecodeWithPagedKVCacheWrapper, flashinfer.BatchPrefillWithPagedKVCacheWrapper,
                    flashinfer.BatchPrefillWithRaggedKVCacheWrapper):
            p = inspect.signature(cls.__init__).parameters["package"]
            self.assertEqual((p.kind, p.default), (p.KEYWORD_ONLY, None))
        for fn in (flashinfer.merge_state, flashinfer.merge_state_in_place, flashinfer.merge_states,
                   flashinfer.append_paged_kv_cache):
            self.assertEqual(inspect.signature(fn).parameters["package"].kind, inspect.Parameter.KEYWORD_ONLY)

    def test_aliases(self):
        for cls in (flashinfer.BatchDecodeWithPagedKVCacheWrapper, flashinfer.BatchPrefillWithPagedKVCacheWrapper,
                    flashinfer.BatchPrefillWithRaggedKVCacheWrapper):
            self.assertIs(cls.begin_forward, cls.plan)
            for name in ("run_return_lse", "forward", "forward_return_lse", "reset_workspace_buffer"):
                self.assertTrue(hasattr(cls, name), f"{cls.__name__}.{name}")

    def test_wrappers_are_made_without_torch_or_a_gpu(self):
        pkg = aotinfer.Package()
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand((1 << 20,), "torch.uint8"), "HND",
                                                          use_tensor_cores=True, backend="fa2", package=pkg)
        self.assertFalse(w.is_cuda_graph_enabled)
        self.assertTrue(w.use_tensor_cores)
        self.assertIs(w._package, pkg)
        flashinfer.BatchPrefillWithPagedKVCacheWrapper(Stand(), "NHD", backend="fa3")
        flashinfer.BatchPrefillWithRaggedKVCacheWrapper(Stand())


class MappingTest(unittest.TestCase):
    def test_decode_defaults(self):
        config, features, scalars = _args.decode_plan(32, 8, 128, 16)
        self.assertEqual(config, dict(num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=16, dtype_q="f16",
                                      dtype_kv="f16", dtype_o="f16", pos_encoding="none", window_left=-1,
                                      kv_split="adaptive"))
        self.assertEqual(features, ("none",))
        self.assertEqual(scalars, (1 / math.sqrt(128), 0.0, 1.0, 1e4))

    def test_decode_features_and_scalars(self):
        """The window goes into the core object's configuration (plan time), the cap into the run
        scalars; neither selects a variant."""
        config, features, scalars = _args.decode_plan(
            32, 8, 64, 1, pos_encoding_mode="ALIBI", window_left=127, logits_soft_cap=30.0, q_data_type="bfloat16",
            kv_data_type="float8_e4m3fn", o_data_type="torch.float16", sm_scale=0.5, rope_scale=2.0, rope_theta=5e5)
        self.assertEqual((config["dtype_q"], config["dtype_kv"], config["dtype_o"]), ("bf16", "e4m3", "f16"))
        self.assertEqual((config["pos_encoding"], config["window_left"], features), ("alibi", 127, ("alibi",)))
        self.assertEqual(scalars, (0.5, 30.0, 2.0, 5e5))
        config, _, scalars = _args.decode_plan(32, 8, 128, 16, pos_encoding_mode="ROPE_LLAMA", logits_soft_cap=0.0,
                                               kv_data_type=DType("torch.float8_e5m2"), q_data_type="half")
        self.assertEqual((config["pos_encoding"], config["window_left"], scalars[1], config["dtype_q"],
                          config["dtype_kv"]), ("rope_llama", -1, 0.0, "f16", "e5m2"))
        for cap in (None, -1.0, 0):  # FlashInfer's "no cap" spellings
            self.assertEqual(_args.decode_plan(32, 8, 128, 16, logits_soft_cap=cap)[2][1], 0.0)
        self.assertNotIn("soft_cap", config)
        self.assertNotIn("sliding_window", config)

    def test_data_type_fills_only_what_is_left_unset(self):  # FlashInfer 0.7's rule
        config, _, _ = _args.decode_plan(32, 8, 128, 16, q_data_type=None, data_type="bfloat16")
        self.assertEqual((config["dtype_q"], config["dtype_kv"]), ("bf16", "bf16"))
        config, _, _ = _args.decode_plan(32, 8, 128, 16, data_type="bfloat16")
        self.assertEqual((config["dtype_q"], config["dtype_kv"]), ("f16", "bf16"))

    def test_prefill_mapping(self):
        config, features, scalars = _args.prefill_plan(
            "p", 32, 8, 128, head_dim_vo=128, causal=True, pos_encoding_mode="ROPE_LLAMA", window_left=0,
            logits_soft_cap=50.0, q_data_type="bfloat16", o_data_type="float16")
        self.assertEqual(config, dict(num_qo_heads=32, num_kv_heads=8, head_dim=128, head_dim_vo=128, dtype_q="bf16",
                                      dtype_kv="bf16", dtype_o="f16", mask="causal", pos_encoding="rope_llama",
                                      window_left=0, kv_split="adaptive"))
        self.assertEqual(features, ("rope_llama", "causal"))
        self.assertEqual(scalars[1:], (50.0, 1.0, 1e4))
        self.assertEqual(_args.prefill_plan("p", 8, 8, 64)[0]["mask"], "none")
        self.assertEqual(_args.prefill_plan("p", 8, 8, 64, pos_encoding_mode="ALIBI")[0]["pos_encoding"], "alibi")
        # A custom mask, packed or not, replaces causal (as in FlashInfer), and so does multi-item scoring.
        items = _args.multi_items("p", Stand(), Stand(), 100, Stand())
        for mask in (dict(custom_mask=Stand()), dict(packed_custom_mask=Stand()), dict(items=items)):
            self.assertEqual(_args.prefill_plan("p", 8, 8, 64, causal=True, **mask)[0]["mask"], "custom")
        for name, short in (("float8_e4m3fn", "e4m3"), ("float8_e5m2", "e5m2")):  # fp8 caches, 16-bit queries
            config = _args.prefill_plan("p", 32, 8, 128, q_data_type="bfloat16", kv_data_type=name)[0]
            self.assertEqual((config["dtype_q"], config["dtype_kv"], config["dtype_o"]), ("bf16", short, "bf16"))

    def test_prefill_head_dim_vo(self):
        """head_dim_vo (None: head_dim_qk) goes to the config; MLA prefill's 192 / 128 keeps
        1/sqrt(head_dim_qk) as the default scale. Unequal widths with RoPE or an fp8 cache are
        refused here, as the runtime's config check would."""
        self.assertEqual(_args.prefill_plan("p", 32, 8, 128)[0]["head_dim_vo"], 128)
        config, features, scalars = _args.prefill_plan("p", 128, 128, 192, head_dim_vo=128, causal=True,
                                                       q_data_type="bfloat16")
        self.assertEqual((config["head_dim"], config["head_dim_vo"], config["pos_encoding"]), (192, 128, "none"))
        self.assertEqual(scalars[0], 1 / math.sqrt(192))
        self.assertEqual(_args.prefill_plan("p", 8, 8, 192, head_dim_vo=128, pos_encoding_mode="ALIBI")[0]["head_dim_vo"],
                         128)
        # Passed on as it is: the package decides whether it holds the pair (plan() raises NotFound).
        self.assertEqual(_args.prefill_plan("p", 32, 8, 128, head_dim_vo=64)[0]["head_dim_vo"], 64)

    def test_batch_invariant_options(self):
        """FlashInfer's fixed_split_size (pages of a paged cache, tokens of ragged K/V) and
        disable_split_kv become the core's kv_split; disable_split_kv wins, as in FlashInfer."""
        split = lambda config: {k: v for k, v in config.items() if k.startswith("kv_split")}
        self.assertEqual(split(_args.decode_plan(32, 8, 128, 16, fixed_split_size=128)[0]),
                         dict(kv_split="fixed", kv_split_tokens=2048))
        self.assertEqual(split(_args.decode_plan(32, 8, 128, 16, disable_split_kv=True, fixed_split_size=128)[0]),
                         dict(kv_split="none"))
        for unset in (None, 0, -1):
            self.assertEqual(split(_args.decode_plan(32, 8, 128, 16, fixed_split_size=unset)[0]),
                             dict(kv_split="adaptive"))
        self.assertEqual(split(_args.prefill_plan("p", 32, 8, 128, fixed_split_size=4096)[0]),
                         dict(kv_split="fixed", kv_split_tokens=4096))
        self.assertEqual(split(_args.prefill_plan("p", 32, 8, 128, fixed_split_size=256, keys_per_split_unit=16)[0]),
                         dict(kv_split="fixed", kv_split_tokens=4096))
        with self.assertRaises(NotImplementedError) as e:
            _args.decode_plan(32, 8, 128, 16, fixed_split_size=2.5)
        self.assertIn("fixed_split_size=2.5", str(e.exception))

    def test_configurations_name_variants_of_the_package(self):
        """The FlashInfer arguments an engine passes for bf16 / head_dim 128 resolve to variants the
        CI package holds; head_dim 256 to a miss that names the spec entry to add."""
        pkg = aotinfer.Package()
        config, _, _ = _args.decode_plan(32, 8, 128, 16, q_data_type="bfloat16")
        self.assertEqual(pkg.find("batch_decode", **decode_axes(config)).family, "batch_decode")
        for storage in ("paged", "ragged"):
            config, _, _ = _args.prefill_plan("p", 32, 8, 128, causal=True, q_data_type="bfloat16")
            self.assertEqual(pkg.find("batch_prefill_" + storage, **prefill_axes(config)).family,
                             "batch_prefill_" + storage)
        # Windows and soft caps need no variants of their own: the same ones serve them.
        config, _, _ = _args.decode_plan(32, 8, 128, 16, q_data_type="bfloat16", window_left=4095,
                                         logits_soft_cap=50.0)
        self.assertEqual(pkg.find("batch_decode", **decode_axes(config)).uri,
                         pkg.find("batch_decode", **decode_axes(_args.decode_plan(32, 8, 128, 16,
                                                                                  q_data_type="bfloat16")[0])).uri)
        for storage in ("paged", "ragged"):
            config, _, _ = _args.prefill_plan("p", 32, 8, 128, causal=True, q_data_type="bfloat16", window_left=0,
                                              logits_soft_cap=30.0)
            self.assertEqual(pkg.find("batch_prefill_" + storage, **prefill_axes(config)).family,
                             "batch_prefill_" + storage)
        for variant in pkg.variants():
            self.assertNotIn("sliding_window", variant.axes, variant.uri)
            self.assertNotIn("soft_cap", variant.axes, variant.uri)
        config, _, _ = _args.decode_plan(32, 8, 256, 16, q_data_type="bfloat16")
        with self.assertRaises(aotinfer.NotFound) as miss:
            pkg.find("batch_decode", **decode_axes(config))
        self.assertIn("head_dim=256", str(miss.exception))
        self.assertIn("include", str(miss.exception))

    def test_mla_prefill_names_a_variant_and_other_widths_a_miss(self):
        """MLA prefill (head_dim_qk 192, head_dim_vo 128) resolves to variants the CI package holds,
        with its split-KV merge at 128; qk 128 / vo 64 is a miss naming head_dim_vo, which plan()
        raises as aotinfer.NotFound."""
        pkg = aotinfer.Package()
        for storage in ("paged", "ragged"):
            config, _, _ = _args.prefill_plan("p", 128, 128, 192, head_dim_vo=128, causal=True, q_data_type="bfloat16")
            self.assertEqual(pkg.find("batch_prefill_" + storage, **prefill_axes(config)).axes["head_dim_vo"], "128")
            config, _, _ = _args.prefill_plan("p", 32, 8, 128, head_dim_vo=64, q_data_type="bfloat16")
            with self.assertRaises(aotinfer.NotFound) as miss:
                pkg.find("batch_prefill_" + storage, **prefill_axes(config))
            self.assertIn("head_dim_vo=64", str(miss.exception))
        self.assertEqual(pkg.find("merge_state", dtype="bf16", head_dim=128).family, "merge_state")


def decode_axes(c):
    return dict(dtype_q=c["dtype_q"], dtype_kv=c["dtype_kv"], head_dim=c["head_dim"], dtype_o=c["dtype_o"],
                pos_encoding=c["pos_encoding"])


def prefill_axes(c):
    return dict(dtype_q=c["dtype_q"], head_dim=c["head_dim"], dtype_kv=c["dtype_kv"], dtype_o=c["dtype_o"],
                pos_encoding=c["pos_encoding"], head_dim_vo=c["head_dim_vo"])


class Recorded:
    """A core class stand-in: records the configurations it is made with."""
    made = []

    def __init__(self, package, **config):
        Recorded.made.append(config)


class WindowTest(unittest.TestCase):
    """The window is plan-time (one core object per distinct window, kept), the cap a run value."""

    def planned(self, wrapper, window_left):
        """wrapper as a successful plan() with this window leaves it (no PyTorch needed)."""
        wrapper._core, wrapper._features, wrapper._window_left, wrapper._head_dim = object(), ("none",), window_left, 128
        wrapper._scalars = _args.scalars(128, None, None, None, 0.0)
        return wrapper

    def test_one_core_object_per_window(self):
        Recorded.made = []
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand(), package=aotinfer.Package())
        full = _args.decode_plan(32, 8, 128, 16, q_data_type="bfloat16")[0]
        windowed = _args.decode_plan(32, 8, 128, 16, q_data_type="bfloat16", window_left=511)[0]
        capped = _args.decode_plan(32, 8, 128, 16, q_data_type="bfloat16", window_left=511, logits_soft_cap=30.0)[0]
        cores = [w._core_for(Recorded, c) for c in (full, windowed, full, capped, windowed)]
        self.assertEqual([c["window_left"] for c in Recorded.made], [-1, 511])
        self.assertIs(cores[0], cores[2])
        self.assertIs(cores[1], cores[3])  # the cap is no configuration: the same object
        self.assertIs(cores[1], cores[4])
        self.assertIsNot(cores[0], cores[1])

    def test_run_keeps_the_planned_window(self):
        q, cache = Stand((4, 32, 128), "torch.bfloat16"), (Stand(), Stand())
        for w in (self.planned(flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand()), 127),
                  self.planned(flashinfer.BatchPrefillWithPagedKVCacheWrapper(Stand()), 127)):
            with self.subTest(type(w).__name__), self.assertRaises(ValueError) as e:
                w.run(q, cache, window_left=63)
            self.assertIn("window_left=63 differs from plan()'s 127", str(e.exception))
            self.assertIn("plan again", str(e.exception))

    def test_forward_changes_the_cap_not_the_variant(self):
        """FlashInfer's deprecated forward() may change run values (the cap among them); another
        position encoding selects another variant and is refused."""
        w = self.planned(flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand()), 127)
        w._forward("NONE", 127, 30.0, 0.5, None, None)
        self.assertEqual(w._scalars, (0.5, 30.0, 1.0, 1e4))
        w._forward("NONE", 127, None, None, None, None)
        self.assertEqual(w._scalars[1], 0.0)
        with self.assertRaises(NotImplementedError) as e:
            w._forward("ROPE_LLAMA", 127, None, None, None, None)
        self.assertIn("another kernel variant", str(e.exception))
        p = self.planned(flashinfer.BatchPrefillWithPagedKVCacheWrapper(Stand()), -1)
        p._features = ("none", "causal")
        p._forward("p.forward", True, "NONE", False, -1, 50.0, None, None, None)
        self.assertEqual(p._scalars[1], 50.0)
        with self.assertRaises(NotImplementedError) as e:
            p._forward("p.forward", True, "ROPE_LLAMA", False, -1, None, None, None, None)
        self.assertIn("another kernel variant", str(e.exception))

    def test_forward_plans_again_under_another_mask_or_window(self):
        """As FlashInfer's forward(): its causal (prefill) and window_left replace plan()'s, a
        custom mask staying over causal, and plan() runs again with them on its own arguments;
        not in cudagraph mode, where the refusals stand."""
        wrappers = (flashinfer.BatchDecodeWithPagedKVCacheWrapper, flashinfer.BatchPrefillWithPagedKVCacheWrapper,
                    flashinfer.BatchPrefillWithRaggedKVCacheWrapper)
        for wrapper in wrappers:
            decode = wrapper is flashinfer.BatchDecodeWithPagedKVCacheWrapper
            w = self.planned(wrapper(Stand()), -1)
            w._features = ("none",) if decode else ("none", "causal")
            plans = []

            def plan(**call):
                plans.append(call)
                w._plan_call, w._window_left = call, call["window_left"]
                if not decode:
                    w._features = ("none", "causal" if call["causal"] else "none")

            w._plan_call = dict(indptr="indptr", causal=True, window_left=-1)
            w.plan = lambda **call: self.fail("forward() plans through the class's plan()")
            subclass = type("Recording" + wrapper.__name__, (wrapper,), {"plan": lambda _, **call: plan(**call)})
            w.__class__ = subclass
            forward = (lambda window, cap=None: w._forward("NONE", window, cap, None, None, None)) if decode else \
                (lambda window, cap=None, causal=True: w._forward("p.forward", causal, "NONE", False, window, cap, None,
                                                                   None, None))
            forward(-1)
            self.assertEqual(plans, [])  # the plan's own mask and window: no new plan
            forward(255, 30.0)
            self.assertEqual(plans[-1], dict(indptr="indptr", causal=True, window_left=255))
            self.assertEqual(w._scalars[1], 30.0)
            if not decode:
                forward(255, causal=False)
                self.assertEqual(plans[-1], dict(indptr="indptr", causal=False, window_left=255))
                w._features = ("none", "custom")  # a custom mask outlives forward's causal
                forward(255, causal=True)
                self.assertEqual(len(plans), 2)
            w._use_cuda_graph = True  # the graph holds the plan's kernel
            with self.assertRaises(ValueError) as e:
                forward(8)
            self.assertIn("window_left=8 differs from plan()'s 255", str(e.exception))
            if not decode:
                w._features = ("none", "causal")
                with self.assertRaises(NotImplementedError):
                    forward(255, causal=False)

    def test_mask_layout(self):
        """Packed custom masks as FlashInfer lays them out: each request's qo_len * kv_len bits
        start a new byte."""
        self.assertEqual(_masks.mask_layout([3, 1, 0, 2], [5, 8, 4, 3]), ([15, 8, 0, 6], [0, 2, 3, 3, 4]))
        self.assertEqual(_masks.mask_layout([], []), ([], [0]))
        # Their key counts, from a paged cache's host metadata (an empty request included).
        self.assertEqual(_base.paged_kv_lengths([0, 1, 1, 4], [16, 0, 5], 16), [16, 0, 37])

    def test_multi_item_scoring_is_refused_in_cudagraph_mode(self):
        graph = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(Stand(), use_cuda_graph=True, qo_indptr_buf=Stand((5,)),
                                                                 kv_indptr_buf=Stand((5,)))
        with self.assertRaises(NotImplementedError) as e:
            graph.plan(*ragged_args(), prefix_len_ptr=Stand(), token_pos_in_items_ptr=Stand())
        self.assertIn("prefix_len_ptr=<Stand> is not supported; multi-item scoring is served without use_cuda_graph",
                      str(e.exception))

    def test_multi_item_arguments(self):
        """prefix_len_ptr turns multi-item scoring on; its companions alone are refused, and it
        needs token_pos_in_items_ptr and a count of entries per request."""
        self.assertIsNone(_args.multi_items("p", None, None, 0, None))
        prefix, positions = Stand(), Stand()
        self.assertEqual(_args.multi_items("p", prefix, positions, 0, None), (prefix, positions, 0))
        for bad in (-1, 1.0, True, "8"):
            with self.subTest(token_pos_in_items_len=bad), self.assertRaises(ValueError) as e:
                _args.multi_items("p", prefix, positions, bad, None)
            self.assertIn("token_pos_in_items_len must be an int >= 0", str(e.exception))
        with self.assertRaises(ValueError) as e:
            _args.multi_items("p", prefix, None, 8, None)
        self.assertIn("needs token_pos_in_items_ptr", str(e.exception))
        for kwargs in (dict(token_pos_in_items_ptr=Stand()), dict(token_pos_in_items_len=8),
                       dict(max_item_len_ptr=Stand())):
            args = {**dict(token_pos_in_items_ptr=None, token_pos_in_items_len=0, max_item_len_ptr=None), **kwargs}
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}), self.assertRaises(NotImplementedError) as e:
                _args.multi_items("p", None, *args.values())
            self.assertIn("served with prefix_len_ptr", str(e.exception))

    def test_window_values(self):
        for where, plan in (("BatchDecodeWithPagedKVCacheWrapper.plan", lambda **kw: _args.decode_plan(
                                32, 8, 128, 16, **kw)),
                            ("p", lambda **kw: _args.prefill_plan("p", 32, 8, 128, **kw))):
            self.assertEqual(plan(window_left=0)[0]["window_left"], 0)
            self.assertEqual(plan(window_left=2**31 - 1)[0]["window_left"], 2**31 - 1)
            for bad in (-2, 2**31, 1.5, True, "8"):
                with self.subTest(where=where, window_left=bad), self.assertRaises(NotImplementedError) as e:
                    plan(window_left=bad)
                self.assertIn(f"{where}: window_left={bad!r}", str(e.exception))


class RefusalTest(unittest.TestCase):
    """Each refusal is a NotImplementedError naming the argument and its value, raised before any
    tensor is touched (the stand-ins have no tensor methods) and without PyTorch."""

    def refused(self, call, *words):
        with self.assertRaises(NotImplementedError) as e:
            call()
        message = str(e.exception)
        for word in words:
            self.assertIn(word, message)
        return message

    def test_constructors(self):
        for backend in ("trtllm-gen", "cudnn", "cute-dsl", "cutile"):
            self.refused(lambda: flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand(), backend=backend),
                         "backend", backend, "auto")
            self.refused(lambda: flashinfer.BatchPrefillWithPagedKVCacheWrapper(Stand(), backend=backend), "backend")
        self.refused(lambda: flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand(), jit_args=["m"]), "jit_args")
        self.refused(lambda: flashinfer.BatchPrefillWithPagedKVCacheWrapper(Stand(), jit_kwargs={}), "jit_kwargs")
        self.refused(lambda: flashinfer.BatchPrefillWithRaggedKVCacheWrapper(Stand(), variant_owns_mask=True),
                     "variant_owns_mask")
        self.refused(lambda: flashinfer.BatchPrefillWithRaggedKVCacheWrapper(Stand(), "HND"), "kv_layout", "'HND'",
                     "'NHD'")
        self.refused(lambda: flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand(), "NDH"), "kv_layout", "'NDH'")

    def test_decode_plan(self):
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand())
        # Several query tokens per request need use_tensor_cores=True, as FlashInfer's (its
        # tensor-core decode serves them): the CUDA-core wrapper refuses them by that name.
        with self.assertRaises(ValueError) as e:
            w.plan(*DECODE_ARGS, q_len_per_req=2)
        self.assertIn("use_tensor_cores=True", str(e.exception))
        cases = [
            (dict(is_causal=True), "is_causal=True"),
            (dict(window_right=4), "window_right=4"),
            (dict(block_tables=Stand()), "block_tables=<Stand>"),
            (dict(seq_lens=Stand()), "seq_lens=<Stand>"),
            (dict(pos_encoding_mode="ROPE_LLAMA_INTERLEAVED"), "pos_encoding_mode='ROPE_LLAMA_INTERLEAVED'"),
            (dict(window_left=-2), "window_left=-2"),
            (dict(q_data_type="float32"), "q_data_type='float32'"),
            (dict(q_data_type=DType("torch.float32")), "q_data_type=torch.float32"),
            (dict(q_data_type="float8_e4m3fn"), "q_data_type='float8_e4m3fn'"),
            (dict(o_data_type="float8_e4m3fn"), "o_data_type='float8_e4m3fn'"),
            (dict(kv_data_type="int8"), "kv_data_type='int8'"),
        ]
        for kwargs, words in cases:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                self.refused(lambda: w.plan(*DECODE_ARGS, **kwargs), "BatchDecodeWithPagedKVCacheWrapper.plan", words)

    def test_prefill_plans(self):
        paged = flashinfer.BatchPrefillWithPagedKVCacheWrapper(Stand())
        ragged = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(Stand())
        common = [
            (dict(head_dim_vo=64, pos_encoding_mode="ROPE_LLAMA"), "head_dim_vo=64"),
            (dict(head_dim_vo=64, kv_data_type="float8_e4m3fn"), "16-bit K/V"),
            (dict(head_dim_vo=0), "head_dim_vo=0"),
            (dict(head_dim_vo="128"), "head_dim_vo='128'"),
            (dict(use_fp16_qk_reduction=True), "use_fp16_qk_reduction=True"),
            (dict(token_pos_in_items_ptr=Stand()), "token_pos_in_items_ptr"),
            (dict(token_pos_in_items_len=8), "token_pos_in_items_len=8"),
            (dict(max_item_len_ptr=Stand()), "max_item_len_ptr"),
            (dict(seq_lens=Stand()), "seq_lens=<Stand>"),
            (dict(seq_lens_q=Stand()), "seq_lens_q=<Stand>"),
            (dict(kv_data_type="int8"), "kv_data_type='int8'"),
            (dict(q_data_type="float8_e4m3fn"), "q_data_type='float8_e4m3fn'"),
        ]
        for kwargs, words in common + [(dict(block_tables=Stand()), "block_tables=<Stand>")]:
            with self.subTest("paged", **{k: str(v) for k, v in kwargs.items()}):
                self.refused(lambda: paged.plan(*paged_args(), **kwargs), "BatchPrefillWithPagedKVCacheWrapper.plan",
                             words)
        for kwargs, words in common + [(dict(v_indptr=Stand()), "v_indptr"), (dict(o_indptr=Stand()), "o_indptr")]:
            with self.subTest("ragged", **{k: str(v) for k, v in kwargs.items()}):
                self.refused(lambda: ragged.plan(*ragged_args(), **kwargs),
                             "BatchPrefillWithRaggedKVCacheWrapper.plan", words)

    def test_run(self):
        """run()'s unserved arguments are refused before the plan is even looked at; sinks are
        served (decode and paged prefill: they get as far as the plan check)."""
        decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand())
        q, cache = Stand((4, 32, 128), "torch.bfloat16"), (Stand(), Stand())
        self.refused(lambda: decode.run(q, cache, kv_cache_sf=Stand()), "kv_cache_sf")
        self.refused(lambda: decode.run(q, cache, skip_softmax_threshold_scale_factor=1.0),
                     "skip_softmax_threshold_scale_factor=1.0")
        self.refused(lambda: decode.run(q, cache, Stand()), "*args")
        with self.assertRaises(ValueError) as e:  # another q_len_per_req than the plan's
            decode.run(q, cache, q_len_per_req=2)
        self.assertIn("q_len_per_req=2 differs from plan()'s 1", str(e.exception))
        paged = flashinfer.BatchPrefillWithPagedKVCacheWrapper(Stand())
        self.refused(lambda: paged.run(q, cache, kv_cache_sf=Stand()), "BatchPrefillWithPagedKVCacheWrapper.run",
                     "kv_cache_sf")
        ragged = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(Stand())
        self.refused(lambda: ragged.run(q, Stand(), Stand(), kv_cache_sf=Stand()), "kv_cache_sf")
        with self.assertRaises(ValueError):
            paged.run(q, cache, lse_base="log10")
        with self.assertRaises(ValueError):
            ragged.run(q, Stand(), Stand(), lse_layout="TN")
        sinks = Stand((32,), "torch.float32")
        for call in (lambda: decode.run(q, cache), lambda: paged.run(q, cache), lambda: ragged.run(q, Stand(), Stand()),
                     lambda: decode.run(q, cache, sinks=sinks), lambda: paged.run(q, cache, sinks=sinks),
                     lambda: decode.run_return_lse(q, cache, sinks=sinks),
                     lambda: paged.run_return_lse(q, cache, sinks=sinks)):
            with self.assertRaises(RuntimeError) as e:
                call()
            self.assertIn("plan() first", str(e.exception))

    def test_append_paged_kv_cache_layout(self):
        self.refused(lambda: flashinfer.append_paged_kv_cache(*([Stand()] * 8), kv_layout="HDN"), "kv_layout", "'HDN'")


class CudaGraphBuffersTest(unittest.TestCase):
    def test_decode_buffers_give_the_batch(self):
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            Stand(), use_cuda_graph=True, paged_kv_indptr_buffer=Stand((9,)), paged_kv_indices_buffer=Stand((4096,)),
            paged_kv_last_page_len_buffer=Stand((8,)))
        self.assertTrue(w.is_cuda_graph_enabled)
        self.assertEqual(w._fixed_batch_size, 8)

    def test_flashinfer_checks(self):
        with self.assertRaises(ValueError) as e:
            flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand(), use_cuda_graph=True,
                                                          paged_kv_indptr_buffer=Stand((9,)),
                                                          paged_kv_last_page_len_buffer=Stand((8,)))
        self.assertIn("paged_kv_indices_buffer", str(e.exception))
        with self.assertRaises(ValueError) as e:
            flashinfer.BatchPrefillWithPagedKVCacheWrapper(
                Stand(), use_cuda_graph=True, qo_indptr_buf=Stand((5,)), paged_kv_indptr_buf=Stand((6,)),
                paged_kv_indices_buf=Stand((64,)), paged_kv_last_page_len_buf=Stand((4,)))
        self.assertIn("paged_kv_indptr_buf", str(e.exception))
        w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(Stand(), use_cuda_graph=True, qo_indptr_buf=Stand((5,)),
                                                            kv_indptr_buf=Stand((5,)))
        self.assertEqual(w._fixed_batch_size, 4)

    def test_metadata_buffers_are_int32(self):
        with self.assertRaises(NotImplementedError) as e:
            flashinfer.BatchPrefillWithRaggedKVCacheWrapper(Stand(), use_cuda_graph=True,
                                                            qo_indptr_buf=Stand((5,), "torch.int64"),
                                                            kv_indptr_buf=Stand((5,)))
        self.assertIn("qo_indptr_buf.dtype", str(e.exception))
        self.assertIn("int64", str(e.exception))


CASCADE_CLASSES = ("MultiLevelCascadeAttentionWrapper", "BatchDecodeWithSharedPrefixPagedKVCacheWrapper",
                   "BatchPrefillWithSharedPrefixPagedKVCacheWrapper")


def level_arrays(levels):
    """plan()'s per-level arrays for `levels` levels: a shared prefix of 4 pages, one page each."""
    return ([[0, 4]] * levels, [[0, 4]] * levels, [[0, 1, 2, 3]] * levels, [[16]] * levels)


class CascadeApiTest(unittest.TestCase):
    def test_names_live_where_flashinfer_has_them(self):
        for name in CASCADE_CLASSES:
            self.assertIs(getattr(flashinfer, name), getattr(flashinfer.cascade, name))
        self.assertIs(flashinfer.fast_decode_plan, flashinfer.decode.fast_decode_plan)
        self.assertIs(flashinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper,
                      flashinfer.decode.CUDAGraphBatchDecodeWithPagedKVCacheWrapper)
        self.assertTrue(issubclass(flashinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper,
                                   flashinfer.BatchDecodeWithPagedKVCacheWrapper))

    def test_aliases_and_package_keyword(self):
        cls = flashinfer.MultiLevelCascadeAttentionWrapper
        self.assertIs(cls.begin_forward, cls.plan)
        self.assertIs(cls.forward, cls.run)
        for name in CASCADE_CLASSES + ("CUDAGraphBatchDecodeWithPagedKVCacheWrapper",):
            p = inspect.signature(getattr(flashinfer, name).__init__).parameters["package"]
            self.assertEqual((p.kind, p.default), (p.KEYWORD_ONLY, None), name)


class MultiLevelCascadeTest(unittest.TestCase):
    """Construction, level counts and refusals, all before PyTorch or a GPU is needed."""

    def refused(self, call, *words):
        with self.assertRaises(NotImplementedError) as e:
            call()
        for word in words:
            self.assertIn(word, str(e.exception))

    def test_one_paged_prefill_wrapper_per_level(self):
        pkg = aotinfer.Package()
        w = flashinfer.MultiLevelCascadeAttentionWrapper(3, Stand(), "HND", package=pkg)
        levels = w._batch_prefill_wrappers
        self.assertEqual(len(levels), 3)
        self.assertEqual(len({id(level) for level in levels}), 3)  # each its own int workspace and plan
        for level in levels:
            self.assertIsInstance(level, flashinfer.BatchPrefillWithPagedKVCacheWrapper)
            self.assertEqual((level._kv_layout, level._package, level.is_cuda_graph_enabled), ("HND", pkg, False))
        self.assertFalse(w.is_cuda_graph_enabled)

    def test_num_levels(self):
        for bad in (0, -1, 2.0, True, "2", None):
            with self.subTest(num_levels=bad), self.assertRaises(ValueError) as e:
                flashinfer.MultiLevelCascadeAttentionWrapper(bad, Stand())
            self.assertIn("num_levels", str(e.exception))

    def test_layout_refusal_names_the_wrapper(self):
        self.refused(lambda: flashinfer.MultiLevelCascadeAttentionWrapper(2, Stand(), "NDH"),
                     "MultiLevelCascadeAttentionWrapper", "kv_layout", "'NDH'")

    def test_cuda_graph_buffers_per_level(self):
        w = flashinfer.MultiLevelCascadeAttentionWrapper(
            2, Stand(), use_cuda_graph=True, qo_indptr_buf_arr=[Stand((2,)), Stand((9,))],
            paged_kv_indptr_buf_arr=[Stand((2,)), Stand((9,))], paged_kv_indices_buf_arr=[Stand((64,))] * 2,
            paged_kv_last_page_len_buf_arr=[Stand((1,)), Stand((8,))])
        self.assertTrue(w.is_cuda_graph_enabled)
        self.assertEqual([level._fixed_batch_size for level in w._batch_prefill_wrappers], [1, 8])
        self.assertTrue(all(level.is_cuda_graph_enabled for level in w._batch_prefill_wrappers))

    def test_cuda_graph_buffer_lists_are_checked(self):
        good = dict(qo_indptr_buf_arr=[Stand((5,))] * 2, paged_kv_indptr_buf_arr=[Stand((5,))] * 2,
                    paged_kv_indices_buf_arr=[Stand((64,))] * 2, paged_kv_last_page_len_buf_arr=[Stand((4,))] * 2)
        cases = [(dict(paged_kv_indices_buf_arr=None), ValueError, "paged_kv_indices_buf_arr must be a list"),
                 (dict(qo_indptr_buf_arr=[Stand((5,))]), ValueError, "qo_indptr_buf_arr has 1 entries for 2 levels"),
                 (dict(paged_kv_indptr_buf_arr=[Stand((5,)), Stand((6,))]), ValueError, "paged_kv_indptr_buf"),
                 (dict(qo_indptr_buf_arr=[Stand((5,)), Stand((5,), "torch.int64")]), NotImplementedError,
                  "qo_indptr_buf.dtype")]
        for change, error, words in cases:
            with self.subTest(words), self.assertRaises(error) as e:
                flashinfer.MultiLevelCascadeAttentionWrapper(2, Stand(), use_cuda_graph=True, **dict(good, **change))
            self.assertIn(words, str(e.exception))

    def test_plan_level_counts(self):
        w = flashinfer.MultiLevelCascadeAttentionWrapper(2, Stand())
        qo, kv_indptr, kv_indices, last = level_arrays(2)
        heads = (32, 8, 128, 16)
        for args, words in [((qo[:1], kv_indptr, kv_indices, last), "qo_indptr_arr has 1 entries for 2 levels"),
                            ((qo, kv_indptr, kv_indices * 2, last), "paged_kv_indices_arr has 4 entries"),
                            ((qo, kv_indptr, kv_indices, Stand()), "paged_kv_last_page_len must be a list of 2")]:
            with self.subTest(words), self.assertRaises(ValueError) as e:
                w.plan(*args, *heads)
            self.assertIn(words, str(e.exception))

    def test_plan_refusals_name_the_wrapper(self):
        w = flashinfer.MultiLevelCascadeAttentionWrapper(2, Stand())
        args = level_arrays(2) + (32, 8, 128, 16)
        for kwargs, words in [(dict(pos_encoding_mode="ALIBI"), "pos_encoding_mode='ALIBI'"),
                              (dict(use_fp16_qk_reduction=True), "use_fp16_qk_reduction=True"),
                              (dict(window_left=-2), "window_left=-2"),
                              (dict(window_left=0), "window_left=0"),
                              (dict(window_left=4095), "positions restart"),
                              (dict(q_data_type="float8_e4m3fn"), "q_data_type='float8_e4m3fn'"),
                              (dict(kv_data_type="float8_e5m2"), "kv_data_type='float8_e5m2'")]:
            with self.subTest(**{k: str(v) for k, v in kwargs.items()}):
                self.refused(lambda: w.plan(*args, **kwargs), "MultiLevelCascadeAttentionWrapper.plan", words)

    def test_run_needs_a_plan(self):
        w = flashinfer.MultiLevelCascadeAttentionWrapper(1, Stand())
        with self.assertRaises(RuntimeError) as e:
            w.run(Stand((4, 32, 128), "torch.float16"), Stand())
        self.assertIn("plan() first", str(e.exception))

    def test_reset_workspace_buffer(self):
        w = flashinfer.MultiLevelCascadeAttentionWrapper(2, Stand())
        with self.assertRaises(ValueError) as e:
            w.reset_workspace_buffer(Stand(), [Stand()])
        self.assertIn("int_workspace_buffers has 1 entries for 2 levels", str(e.exception))
        shared = Stand()
        with self.assertRaises(ValueError) as e:
            w.reset_workspace_buffer(Stand(), [shared, shared])
        self.assertIn("own int workspace", str(e.exception))
        floats, ints = Stand(), [Stand(), None]
        w.reset_workspace_buffer(floats, ints)
        self.assertEqual([(level._float_workspace_buffer, level._int_workspace_buffer)
                          for level in w._batch_prefill_wrappers], [(floats, ints[0]), (floats, None)])


class SharedPrefixTest(unittest.TestCase):
    def test_composition(self):
        d = flashinfer.BatchDecodeWithSharedPrefixPagedKVCacheWrapper(Stand(), "HND")
        self.assertIsInstance(d._batch_decode_wrapper, flashinfer.BatchDecodeWithPagedKVCacheWrapper)
        p = flashinfer.BatchPrefillWithSharedPrefixPagedKVCacheWrapper(Stand())
        self.assertIsInstance(p._batch_prefill_wrapper, flashinfer.BatchPrefillWithPagedKVCacheWrapper)
        for name in CASCADE_CLASSES[1:]:
            with self.assertRaises(NotImplementedError) as e:
                getattr(flashinfer, name)(Stand(), "NDH")
            self.assertIn(name, str(e.exception))

    def test_forward_needs_begin_forward(self):
        q, shared, cache = Stand((4, 32, 128), "torch.float16"), Stand((64, 8, 128), "torch.float16"), Stand()
        for call in (lambda: flashinfer.BatchDecodeWithSharedPrefixPagedKVCacheWrapper(Stand()).forward(
                         q, shared, shared, cache),
                     lambda: flashinfer.BatchPrefillWithSharedPrefixPagedKVCacheWrapper(Stand()).forward(
                         q, shared, shared, cache, causal=True)):
            with self.assertRaises(RuntimeError) as e:
                call()
            self.assertIn("begin_forward() first", str(e.exception))

    def test_refusals(self):
        p = flashinfer.BatchPrefillWithSharedPrefixPagedKVCacheWrapper(Stand())
        with self.assertRaises(NotImplementedError) as e:
            p.forward(Stand(), Stand(), Stand(), Stand(), use_fp16_qk_reduction=True)
        self.assertIn("BatchPrefillWithSharedPrefixPagedKVCacheWrapper.forward: use_fp16_qk_reduction=True",
                      str(e.exception))
        d = flashinfer.BatchDecodeWithSharedPrefixPagedKVCacheWrapper(Stand())
        with self.assertRaises(NotImplementedError) as e:
            d.begin_forward(*DECODE_ARGS, data_type="float32")
        self.assertIn("float32", str(e.exception))


class RecordingDecode(flashinfer.BatchDecodeWithPagedKVCacheWrapper):
    """Keeps what plan() is called with instead of planning."""

    def plan(self, *args, **kwargs):
        self.seen = args, kwargs


class DecodeGraphTest(unittest.TestCase):
    def test_cuda_graph_wrapper_is_the_decode_wrapper_in_graph_mode(self):
        w = flashinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(Stand(), Stand((9,)), Stand((64,)), Stand((8,)),
                                                                   "HND", True)
        self.assertEqual((w.is_cuda_graph_enabled, w._fixed_batch_size, w.use_tensor_cores, w._kv_layout),
                         (True, 8, True, "HND"))
        with self.assertRaises(ValueError) as e:
            flashinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(Stand(), Stand((9,)), None, Stand((8,)))
        self.assertIn("paged_kv_indices_buffer", str(e.exception))
        with self.assertRaises(NotImplementedError):
            flashinfer.CUDAGraphBatchDecodeWithPagedKVCacheWrapper(Stand(), Stand((9,), "torch.int64"), Stand((64,)),
                                                                   Stand((8,)))

    def test_fast_decode_plan_is_plan(self):
        """Installed as the instance's plan (as engines do) it calls the class's plan, with the
        CPU indptr in place of the GPU one, FlashInfer's dtype defaults and the split options."""
        import functools
        w = RecordingDecode(Stand())
        w.plan = w.begin_forward = functools.partial(flashinfer.fast_decode_plan, w)
        w.plan([0, 2, 5], [0, 1, 2, 3, 4], [3, 1], 32, 8, 128, 16, data_type="bfloat16", non_blocking=False,
               global_override_indptr_cpu=[0, 2, 5, 7, 7], fixed_split_size=4, disable_split_kv=True,
               window_left=127, logits_soft_cap=30.0)
        args, kwargs = w.seen
        self.assertEqual(args, ([0, 2, 5], [0, 1, 2, 3, 4], [3, 1], 32, 8, 128, 16))
        self.assertEqual((kwargs["q_data_type"], kwargs["kv_data_type"], kwargs["non_blocking"]),
                         ("bfloat16", "bfloat16", False))
        self.assertEqual((kwargs["window_left"], kwargs["logits_soft_cap"]), (127, 30.0))
        self.assertEqual((kwargs["fixed_split_size"], kwargs["disable_split_kv"]), (4, True))
        w.begin_forward([0, 2], [0, 1], [5], 32, 8, 128, 16)
        self.assertEqual((w.seen[0][0], w.seen[1]["q_data_type"], w.seen[1]["kv_data_type"]),
                         ([0, 2], "float16", None))
        w.begin_forward([0, 2], [0, 1], [5], 32, 8, 128, 16, q_data_type="bfloat16", data_type="float8_e4m3fn")
        self.assertEqual((w.seen[1]["q_data_type"], w.seen[1]["kv_data_type"]), ("bfloat16", "float8_e4m3fn"))

    def test_fast_decode_plan_refuses_as_plan(self):
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand())
        with self.assertRaises(NotImplementedError) as e:
            flashinfer.fast_decode_plan(w, *DECODE_ARGS, pos_encoding_mode="ROPE_LLAMA_INTERLEAVED")
        self.assertIn("pos_encoding_mode='ROPE_LLAMA_INTERLEAVED'", str(e.exception))
        with self.assertRaises(TypeError) as e:
            flashinfer.fast_decode_plan(flashinfer.BatchPrefillWithPagedKVCacheWrapper(Stand()), *DECODE_ARGS)
        self.assertIn("BatchDecodeWithPagedKVCacheWrapper", str(e.exception))


class MlaTest(unittest.TestCase):
    """BatchMLAPagedAttentionWrapper's refusals, each a NotImplementedError naming the argument,
    before PyTorch or a GPU is needed."""
    ARGS = ([0, 1], [0, 1], [0], [5], 16, 512, 64, 64, True, 0.07)

    def refused(self, call, *names):
        with self.assertRaises(NotImplementedError) as e:
            call()
        for name in names:
            self.assertIn(name, str(e.exception))

    def test_constructor(self):
        with self.assertRaises(ValueError) as e:  # CUDA-graph mode needs FlashInfer's four buffers
            flashinfer.BatchMLAPagedAttentionWrapper(Stand(), use_cuda_graph=True, qo_indptr=Stand(), kv_indptr=Stand())
        self.assertIn("missing: kv_indices, kv_len_arr", str(e.exception))
        self.assertTrue(flashinfer.BatchMLAPagedAttentionWrapper(Stand(), True, Stand(), Stand(), Stand(),
                                                                 Stand()).is_cuda_graph_enabled)
        self.refused(lambda: flashinfer.BatchMLAPagedAttentionWrapper(Stand(), backend="cutlass"), "backend='cutlass'")
        self.assertIs(flashinfer.mla.BatchMLAPagedAttentionWrapper, flashinfer.BatchMLAPagedAttentionWrapper)

    def test_plan_refusals(self):
        w = flashinfer.BatchMLAPagedAttentionWrapper(Stand())
        a = list(self.ARGS)
        self.refused(lambda: w.plan(*a[:5], 256, *a[6:]), "head_dim_ckv", "512 and 64")
        self.refused(lambda: w.plan(*a, q_data_type=DType("float8_e4m3fn")), "q_data_type")
        self.refused(lambda: w.plan(*a, q_data_type=DType("bfloat16"), kv_data_type=DType("float16")), "kv_data_type")
        self.refused(lambda: w.plan(*a, query_layout="packed"), "query_layout='packed'")
        self.refused(lambda: w.plan(*a, q_data_type=DType("bfloat16"), kv_data_type=DType("float8_e5m2")), "kv_data_type")
        self.refused(lambda: w.plan(*a, scale_mode="kv-per-tensor"), "scale_mode='kv-per-tensor'")
        self.refused(lambda: w.plan(*a, kv_data_type=DType("float8_e4m3fn"), scale_mode="bmm-scalar"), "scale_mode")
        self.refused(lambda: w.plan(*a, use_sinks=True), "use_sinks")
        self.refused(lambda: w.plan(metadata=Stand()), "metadata")

    def test_run_refusals_and_order(self):
        w = flashinfer.BatchMLAPagedAttentionWrapper(Stand())
        self.refused(lambda: w.run(query=Stand(), kv_cache=Stand()), "query")
        self.refused(lambda: w.run(Stand(), Stand(), Stand(), Stand(), ckv_scale_arr=Stand()), "ckv_scale_arr")
        with self.assertRaises(RuntimeError) as e:
            w.run(Stand(), Stand(), Stand(), Stand())
        self.assertIn("call plan() first", str(e.exception))


class WithoutTorchTest(unittest.TestCase):
    def setUp(self):
        if has_torch():
            self.skipTest("PyTorch is installed: this checks machines without it")

    def test_a_served_plan_asks_for_torch(self):
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand())
        with self.assertRaises(ImportError) as e:
            w.plan(*DECODE_ARGS, q_data_type="bfloat16")
        self.assertIn("torch", str(e.exception))

    def test_hints_and_ignored_options_pass_the_checks(self):
        paged = flashinfer.BatchPrefillWithPagedKVCacheWrapper(Stand(), backend="fa3")
        with self.assertRaises(ImportError):
            paged.plan(*paged_args(), max_token_per_sequence=4, max_sequence_kv=4096, uniform_q_len=4,
                       q_data_type="bfloat16", head_dim_vo=128)
        # MLA prefill (head_dim_qk 192, head_dim_vo 128) passes every check of both wrappers.
        ragged = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(Stand())
        for plan in (lambda: paged.plan([0, 4], [0, 1], [0], [4], 128, 128, 192, 16, head_dim_vo=128, causal=True,
                                        q_data_type="bfloat16"),
                     lambda: ragged.plan([0, 4], [0, 4], 128, 128, 192, head_dim_vo=128, causal=True,
                                         q_data_type="bfloat16")):
            with self.assertRaises(ImportError):
                plan()
        decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand(), use_tensor_cores=True)
        with self.assertRaises(ImportError):
            decode.plan(*DECODE_ARGS, q_len_per_req=1, is_causal=False, window_right=0)

    def test_functions_ask_for_torch(self):
        for call in (lambda: flashinfer.merge_state(Stand(), Stand(), Stand(), Stand()),
                     lambda: flashinfer.merge_states(Stand(), Stand()),
                     lambda: flashinfer.get_seq_lens(Stand(), Stand(), 16),
                     lambda: flashinfer.append_paged_kv_cache(*([Stand()] * 8))):
            with self.assertRaises(ImportError):
                call()

    def test_served_cascade_and_fast_plans_reach_torch(self):
        """Served arguments pass every check and stop only at PyTorch: the cascade's levels (one
        causal last level), the shared-prefix plans, fast_decode_plan with FlashInfer's dtype
        defaults, the split options and page_size 1."""
        multi = flashinfer.MultiLevelCascadeAttentionWrapper(3, Stand())
        decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(Stand())
        page_1 = ([0, 1], [0], [1], 32, 8, 128, 1)
        for call in (lambda: multi.plan(*level_arrays(3), 32, 8, 128, 16, causal=True, q_data_type="bfloat16"),
                     lambda: multi.plan(*level_arrays(3), 32, 8, 128, 16, logits_soft_cap=30.0),
                     lambda: flashinfer.BatchDecodeWithSharedPrefixPagedKVCacheWrapper(Stand()).begin_forward(
                         *DECODE_ARGS),
                     lambda: flashinfer.BatchPrefillWithSharedPrefixPagedKVCacheWrapper(Stand()).begin_forward(
                         *paged_args()),
                     lambda: flashinfer.fast_decode_plan(decode, *DECODE_ARGS, global_override_indptr_cpu=[0, 1]),
                     lambda: flashinfer.fast_decode_plan(decode, *DECODE_ARGS, fixed_split_size=8),
                     lambda: flashinfer.fast_decode_plan(decode, *DECODE_ARGS, disable_split_kv=True),
                     lambda: flashinfer.fast_decode_plan(decode, *page_1),
                     lambda: flashinfer.fast_decode_plan(decode, *DECODE_ARGS, window_left=0, logits_soft_cap=1.0),
                     lambda: decode.plan(*DECODE_ARGS, window_left=4095, logits_soft_cap=50.0),
                     lambda: flashinfer.BatchPrefillWithRaggedKVCacheWrapper(Stand()).plan(
                         *ragged_args(), causal=True, window_left=127, logits_soft_cap=30.0),
                     lambda: flashinfer.BatchPrefillWithPagedKVCacheWrapper(Stand()).plan(
                         *paged_args(), causal=True, prefix_len_ptr=Stand(), token_pos_in_items_ptr=Stand(),
                         token_pos_in_items_len=100, max_item_len_ptr=Stand())):
            with self.assertRaises(ImportError):
                call()


class MultiItemMaskTest(unittest.TestCase):
    """Multi-item scoring's mask (_masks.multi_item_bits) against a formulation from item numbers
    and delimiters, and on FlashInfer's test cases; needs PyTorch (the GPU machine's checks run
    it through the kernels: gpu_flashinfer.py)."""

    def setUp(self):
        if not has_torch():
            self.skipTest("PyTorch is not installed")
        import torch
        self.torch = torch
        _base.torch = torch

    def items(self, prefix, positions, stride):
        t = self.torch
        return _args.multi_items("t", t.tensor(prefix).to(t.uint32), t.tensor(positions).to(t.uint16), stride, None)

    def expected(self, cached, tail, items):
        """The mask of one request from item numbers: a token sees the prefix (the cached keys and
        the tail) and the tokens of its own item up to itself, except the item's delimiter."""
        t = self.torch
        number = t.tensor([0] * tail + [i + 1 for i, n in enumerate(items) for _ in range(n)], dtype=t.long)
        opens = t.tensor([False] * tail + [j == 0 for n in items for j in range(n)], dtype=t.bool)
        key_number = t.cat([t.zeros(cached, dtype=t.long), number])
        key_opens = t.cat([t.zeros(cached, dtype=t.bool), opens])
        own = (key_number[None, :] == number[:, None]) & (number[:, None] > 0) & ~key_opens[None, :]
        causal = t.arange(cached + len(number))[None, :] <= t.arange(len(number))[:, None] + cached
        return (causal & ((key_number[None, :] == 0) | own)).reshape(-1)

    def packed(self, masks, qo, kv):
        """Booleans packed as a custom_mask's (the bytes in use)."""
        bits, offsets = _masks.custom_masks("t", self.torch.cat(masks), None, None, qo, kv, "cpu")
        return bits[:int(offsets[-1])]

    def test_flashinfer_cases(self):
        # FlashInfer's parametrized cases: (kv_len, qo_len, prefix_len, item lengths, entries per request)
        for kv, qo, prefix, items, stride in ((54, 37, 17, [17, 19, 1], 100), (97, 81, 16, [80, 1], 97)):
            positions = [j for n in items for j in range(n)]
            got = _masks.multi_item_bits("t", self.items(prefix, positions, stride), [qo], [kv], "cpu")
            self.assertTrue(self.torch.equal(got, self.packed([self.expected(kv - qo, 0, items)], [qo], [kv])))

    def test_random_batches(self):
        """Requests with and without a prefix tail among the queries, rows in several chunks."""
        import random
        rng = random.Random(5)
        step_before = _masks.STEP_BITS
        _masks.STEP_BITS = 320  # 8 to 40 rows a step (requests of 1 to 72 keys): several a request, the last short
        try:
            for _ in range(100):
                requests = [(rng.randint(0, 30), rng.randint(0, 6),
                             [rng.randint(1, 9) for _ in range(rng.randint(1, 4))]) for _ in range(rng.randint(1, 5))]
                qo = [tail + sum(items) for _, tail, items in requests]
                kv = [cached + m for (cached, _, _), m in zip(requests, qo)]
                rows = [[j for n in items for j in range(n)] for _, _, items in requests]
                stride = max(map(len, rows)) + rng.randint(0, 3)
                positions = [0] * (stride * len(requests))
                for i, r in enumerate(rows):
                    positions[i * stride:i * stride + len(r)] = r
                items = self.items([c + t for c, t, _ in requests], positions, stride)
                got = _masks.multi_item_bits("t", items, qo, kv, "cpu")
                self.assertTrue(self.torch.equal(got, self.packed([self.expected(*r) for r in requests], qo, kv)),
                                requests)
                # Through custom_masks, which lays them out for the run.
                bits, offsets = _masks.custom_masks("t", None, None, items, qo, kv, "cpu")
                self.assertTrue(self.torch.equal(bits[:int(offsets[-1])], got))
                self.assertEqual(offsets.tolist(), _masks.mask_layout(qo, kv)[1])
        finally:
            _masks.STEP_BITS = step_before

    def test_too_few_positions(self):
        with self.assertRaises(ValueError) as e:
            _masks.multi_item_bits("t", self.items([2], [0, 1, 2], 3), [5], [7], "cpu")
        self.assertIn("reads token_pos_in_items_ptr up to entry 5, which holds 3", str(e.exception))


if __name__ == "__main__":
    unittest.main()
