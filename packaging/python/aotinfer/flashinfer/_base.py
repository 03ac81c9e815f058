"""What the wrappers and functions share: PyTorch imported on first use, the shared package, the
int workspace, one aotinfer object per configuration (the sliding window included: it is fixed
at plan time), the run scalars fixed at plan time (the soft cap among them), and the tensor
plumbing of run()."""
from .. import Package
from . import _args

LOG2E = 1.4426950408889634  # aotinfer writes natural-log LSE; FlashInfer's is base 2
LN2 = 0.6931471805599453

torch = None     # set by need_torch(): plan() and the functions import it, run() reads it
_package = None  # the aotinfer.Package() shared by every wrapper not given package=


def need_torch():
    global torch
    if torch is None:
        try:
            import torch as module
        except ImportError as e:
            raise ImportError("aotinfer.flashinfer: plan(), run() and the functions work on PyTorch tensors; "
                              "install torch") from e
        torch = module
    return torch


def arguments(scope):
    """A plan()'s arguments, from its locals() taken first thing (forward() plans again with them)."""
    return {name: value for name, value in scope.items() if name != "self"}


def shared_package():
    global _package
    if _package is None:
        _package = Package()
    return _package


def call(op_name, core_function, target, *args, **kwargs):
    """core_function(target, *args, **kwargs): the core's eager call, or inside torch.compile the
    aotinfer.torch_ops function of the same signature, whose custom op traces without a graph
    break. target is the planned object or the package. (The run() methods make the same choice
    inline: forwarding *args costs as much as their own work.)"""
    if torch.compiler.is_compiling():
        core_function = traced(op_name)
    core_function(target, *args, **kwargs)


def traced(op_name):
    """The aotinfer.torch_ops function that stands for a core call while torch.compile traces."""
    from .. import torch_ops
    return getattr(torch_ops, op_name)


def split_cache(cache, kv_layout):
    """(k, v) of a (k, v) tuple or of one [pages, 2, ...] tensor, as views (no copy); the 3-D and
    4-D forms are page_size 1, as in FlashInfer."""
    page_axis = -3 if kv_layout == "NHD" else -2
    if isinstance(cache, (tuple, list)):
        k, v = cache
        return (k.unsqueeze(page_axis), v.unsqueeze(page_axis)) if k.dim() == 3 else (k, v)
    if cache.dim() == 4:
        cache = cache.unsqueeze(page_axis)
    return cache.unbind(1)


def token_strided(q):
    """q as the kernels read it: itself when only its tokens are strided (a slice of a fused qkv
    tensor: heads and dimensions dense, rows 16-byte aligned), else a dense copy."""
    heads, dim = q.shape[-2], q.shape[-1]
    if (q.dim() == 3 and q.stride(2) == 1 and q.stride(1) == dim and q.stride(0) >= heads * dim
            and (q.stride(0) * q.element_size()) % 16 == 0 and q.data_ptr() % 16 == 0):
        return q
    return q.contiguous()


def host_int32(x):
    """A CPU int32 tensor of x (a tensor anywhere, or a list), for the planner."""
    if isinstance(x, torch.Tensor):
        return x.to("cpu", torch.int32)
    return torch.as_tensor(x, dtype=torch.int32)


def paged_kv_lengths(indptr, last_page_len, page_size):
    """Keys per request of a paged cache, from host lists of its indptr (pages) and
    last_page_len."""
    return [0 if b == a else (b - a - 1) * page_size + n for a, b, n in zip(indptr, indptr[1:], last_page_len)]


def device_int32(x, device, non_blocking):
    """x as an int32 tensor on device: x itself when it already is one (as FlashInfer keeps it)."""
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=torch.int32, non_blocking=non_blocking)
    return torch.tensor(x, dtype=torch.int32, device=device)


def device_int32s(xs, device, non_blocking):
    """device_int32 of each x; when all are on the host (CPU tensors, lists), with one copy: their
    concatenation in pinned memory goes over, and they are views of it. A plan copies two to four
    arrays, and each copy from pageable memory waits for its own staging."""
    if device.type != "cuda" or any(isinstance(x, torch.Tensor) and not x.is_cpu for x in xs):
        return [device_int32(x, device, non_blocking) for x in xs]
    host = [x.to(torch.int32) if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=torch.int32) for x in xs]
    packed = torch.cat(host).pin_memory().to(device, non_blocking=non_blocking)
    return packed.split([h.shape[0] for h in host])  # the runtime reads int32 metadata 4-byte aligned


def longest_request(config, indptr_host, keys_per_entry):
    """An upper bound on the keys of the plan's longest request (indptr in pages or tokens), which
    sizes a fixed KV split's workspace; 0 for the other splits, which need none."""
    if config.get("kv_split") != "fixed" or indptr_host.shape[0] < 2:
        return 0
    return int((indptr_host[1:] - indptr_host[:-1]).max()) * keys_per_entry


def graph_max_kv_len(float_workspace, rows, chunk, bytes_per_row_chunk, where):
    """CUDA-graph mode with a fixed KV split: the longest request the fixed grid serves, as long
    as the caller's float workspace holds every chunk's partial state: rows (requests, or query
    tokens) x chunks x bytes_per_row_chunk."""
    usable = float_workspace.numel() * float_workspace.element_size() - 1024  # the core aligns its arrays
    chunks = max(usable, 0) // (max(rows, 1) * bytes_per_row_chunk)
    if chunks < 1:
        raise ValueError(f"aotinfer.flashinfer {where}: the float workspace cannot hold one KV chunk per row in "
                         "cudagraph mode with fixed_split_size; give a larger one")
    return min(chunks * chunk, 2**31 - 1)


def copy_into(where, name, buffer, x, non_blocking):
    """CUDA-graph mode: x into the head of the caller's buffer, which run() then reads."""
    n = len(x)
    if n > buffer.shape[0]:
        raise ValueError(f"aotinfer.flashinfer {where}: {name} holds {buffer.shape[0]} entries, the plan needs {n}")
    buffer[:n].copy_(x if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=torch.int32),
                     non_blocking=non_blocking)


def finish_lse(lse, base, layout, dest):
    """The kernel's natural-log LSE [tokens, heads] in FlashInfer's base and layout."""
    if layout == "NH":
        if base == "log2":
            lse.mul_(LOG2E)
        return lse
    if dest is None:
        dest = torch.empty((lse.shape[1], lse.shape[0]), dtype=torch.float32, device=lse.device)
    torch.mul(lse.t(), LOG2E if base == "log2" else 1.0, out=dest)
    return dest


class Wrapper:
    """Base of the three wrappers. run() leaves the checks of its tensors (device, dtype, shape
    against the config and the plan, strides) to the core, which makes them before any launch
    and raises aotinfer.InvalidArgument, a ValueError as FlashInfer's."""

    def _setup(self, float_workspace_buffer, kv_layout, use_cuda_graph, package):
        self._float_workspace_buffer = float_workspace_buffer
        self._int_workspace_buffer = None  # sized by aotinfer at plan()
        self._kv_layout = kv_layout
        self._use_cuda_graph = bool(use_cuda_graph)
        self._package = package
        self._cores = {}    # configuration (window_left included) -> aotinfer.BatchDecode / BatchPrefill
        self._core = None   # the last plan's; None until a plan succeeds
        self._features = None
        self._window_left = -1

    @property
    def is_cuda_graph_enabled(self):
        return self._use_cuda_graph

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer):
        """New workspaces; the next plan() uses them (aotinfer checks their sizes there)."""
        self._float_workspace_buffer, self._int_workspace_buffer = float_workspace_buffer, int_workspace_buffer
        self._core = None

    @property
    def device(self):
        return self._float_workspace_buffer.device

    def _core_for(self, cls, config):
        key = tuple(sorted(config.items()))
        core = self._cores.get(key)
        if core is None:
            core = self._cores[key] = cls(self._package or shared_package(), **config)
        return core

    def _int_workspace(self, nbytes):
        ws = self._int_workspace_buffer
        if ws is None or ws.numel() * ws.element_size() < nbytes:
            if ws is not None and self._use_cuda_graph:  # a captured graph holds the old address
                raise ValueError(f"aotinfer.flashinfer: this plan needs a {nbytes}-byte int workspace, the CUDA-graph "
                                 f"wrapper has {ws.numel() * ws.element_size()}: use one wrapper per configuration")
            ws = self._int_workspace_buffer = torch.empty(max(nbytes, 256), dtype=torch.uint8, device=self.device)
        return ws

    def _keep(self, core, config, features, scalars):
        """What run() reads, kept by a successful plan()."""
        self._o_dtype = getattr(torch, _args.TORCH_NAMES[config["dtype_o"]])
        self._head_dim = config["head_dim"]
        self._head_dim_vo = config.get("head_dim_vo", self._head_dim)  # o's rows (decode: head_dim)
        self._features, self._scalars, self._sm_scale = features, scalars, scalars[0]
        self._window_left = config["window_left"]
        self._core = core

    def _planned(self, where, window_left):
        if self._core is None:
            raise RuntimeError(f"aotinfer.flashinfer {where}: call plan() first")
        if window_left is not None and window_left != self._window_left:
            _args.window_changed(where, window_left, self._window_left)

    def _replan(self, pos, **changes):
        """forward(): FlashInfer's forward() replaces plan()'s mask and window, which shape
        aotinfer's plan, so plan() runs again on the same arguments with these changes. Not in
        cudagraph mode, whose graph holds the plan's kernel; nor for another position encoding,
        another variant, which _override refuses."""
        if changes and self._core is not None and not self._use_cuda_graph and pos == self._features[0]:
            # The class's plan(): an engine may have replaced the instance's (fast_decode_plan).
            type(self).plan(self, **dict(self._plan_call, **changes))

    def _override(self, where, features, sm_scale, rope_scale, rope_theta, cap, window_left):
        """forward(): FlashInfer's deprecated per-call settings, after _replan: run scalars (the
        soft cap among them) change here; a setting that selects another kernel variant is
        refused, and so are another mask or window where _replan did not plan again."""
        if self._core is None:
            raise RuntimeError(f"aotinfer.flashinfer {where}: call plan() first")
        if features != self._features:
            raise NotImplementedError(f"aotinfer.flashinfer {where}: these settings select another kernel variant "
                                      f"or plan than plan()'s ({features} vs {self._features}: the position "
                                      f"encoding picks the variant, the mask shapes the plan); pass them to plan()")
        if window_left != self._window_left:
            _args.window_changed(where, window_left, self._window_left)
        self._scalars = _args.scalars(self._head_dim, sm_scale, rope_scale, rope_theta, cap)
        self._sm_scale = self._scalars[0]

    def _outputs(self, where, q, out, lse, return_lse, lse_layout):
        """(o, lse_rows, lse_dest): o for the kernel (out itself when contiguous), the float32
        [tokens, heads] buffer it writes its LSE to (None: no LSE), and the caller's HN buffer."""
        shape = (*q.shape[:-1], self._head_dim_vo)
        if out is None:
            o = torch.empty(shape, dtype=self._o_dtype, device=q.device)
        elif out.is_contiguous():
            o = out  # the core checks its dtype and shape
        else:  # the kernel writes densely: a temporary, copied back by _deliver
            if out.dtype != self._o_dtype or out.shape != shape:
                raise ValueError(f"aotinfer.flashinfer {where}: out must be {self._o_dtype} {list(shape)}, "
                                 f"got {out.dtype} {list(out.shape)}")
            o = torch.empty(shape, dtype=self._o_dtype, device=q.device)
        if not return_lse and lse is None:
            return o, None, None
        rows = shape[:2]
        if lse_layout == "HN" and lse is not None and (lse.dtype != torch.float32 or lse.shape != rows[::-1]
                                                        or not lse.is_contiguous()):
            raise ValueError(f"aotinfer.flashinfer {where}: lse must be a contiguous torch.float32 {list(rows[::-1])} "
                             f'for lse_layout="HN"')
        if lse is None or lse_layout == "HN":
            return o, torch.empty(rows, dtype=torch.float32, device=q.device), lse
        return o, lse, None  # the core checks it

    @staticmethod
    def _deliver(o, out, lse_rows, return_lse, lse_base="log2", lse_layout="NH", lse_dest=None):
        if out is not None and o is not out:
            out.copy_(o)
            o = out
        if lse_rows is None:
            return o
        lse = finish_lse(lse_rows, lse_base, lse_layout, lse_dest)
        return (o, lse) if return_lse else o
