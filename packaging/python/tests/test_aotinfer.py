"""The Python layer without a GPU: package queries, errors, how tensors are described, argument
checks that need no driver, and the C struct mirrors. Run against an installed wheel whose
package is specs/ci.json's (tests/python_wheel.sh)."""
import ctypes
import unittest

import aotinfer
from aotinfer import _capi, _ext, _tensor


class FakeCudaArray:
    """A device array as __cuda_array_interface__ describes it (nothing is dereferenced)."""

    def __init__(self, shape, typestr="<f2", ptr=0x7000_0000_0000):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "version": 3}


class PackageTest(unittest.TestCase):
    def test_default_package_lists_its_variants(self):
        variants = aotinfer.Package().variants()
        self.assertEqual(len(variants), 16)
        self.assertEqual({v.family for v in variants}, {"merge_state", "append_paged_kv", "batch_decode",
                                                       "batch_prefill_paged", "batch_prefill_ragged", "batch_mla_decode"})

    def test_filters_by_family_and_axis(self):
        pkg = aotinfer.Package()
        self.assertEqual([v.uri for v in pkg.variants("merge_state", dtype="bf16", head_dim=64)],
                         ["merge_state.dtype-bf16.head_dim-64"])
        self.assertEqual(pkg.variants("merge_state", head_dim=256), [])

    def test_find_and_a_miss_that_says_how_to_add_it(self):
        pkg = aotinfer.Package()
        self.assertEqual(pkg.find("merge_state", dtype="f16", head_dim=128).axes, {"dtype": "f16", "head_dim": "128"})
        with self.assertRaises(aotinfer.NotFound) as miss:
            pkg.find("merge_state", dtype="f16", head_dim=256)
        message = str(miss.exception)
        self.assertIn("head_dim=256", message)
        self.assertIn("nearest", message)
        self.assertIn("include", message)

    def test_missing_package_folder(self):
        with self.assertRaises(aotinfer.NotFound) as e:
            aotinfer.Package("/nonexistent/aotinfer-package")
        self.assertIn("/nonexistent/aotinfer-package", str(e.exception))


class TensorTest(unittest.TestCase):
    def test_cuda_array_interface(self):
        t = _tensor.tensor(FakeCudaArray((4, 8, 128)))
        self.assertEqual((t.ptr, t.shape, t.strides, t.dtype, t.on_gpu),
                         (0x7000_0000_0000, (4, 8, 128), (1024, 128, 1), _tensor.F16, True))

    def test_an_unknown_dtype_keeps_its_name(self):
        t = _tensor.tensor(FakeCudaArray((3,), "<f8"))
        self.assertEqual((t.dtype, t.dtype_name), (_tensor.OTHER, "<f8"))

    def test_rejects_what_is_not_a_gpu_array(self):
        with self.assertRaises(TypeError) as e:
            _tensor.tensor([1, 2, 3], "q")
        self.assertIn("q:", str(e.exception))
        self.assertIn("__dlpack__", str(e.exception))


class AbiTest(unittest.TestCase):
    def test_the_mirrors_match_the_library(self):
        self.assertEqual(_capi.layout_mismatches(), [])

    def test_windows_are_config_fields_and_caps_run_values(self):
        """The configs carry the window (a flag and window_left), no soft_cap flag; the scalars
        lost window_left (six floats)."""
        for mirror in (_capi.DecodeConfig, _capi.PrefillConfig):
            names = [name for name, _ in mirror._fields_]
            self.assertEqual(names[names.index("sliding_window") + 1], "window_left")
            self.assertNotIn("soft_cap", names)
        self.assertEqual([name for name, _ in _capi.Scalars._fields_],
                         ["sm_scale", "logits_soft_cap", "rope_scale", "rope_theta", "k_scale", "v_scale"])
        self.assertEqual(ctypes.sizeof(_capi.Scalars), 6 * 4)

    def test_prefill_config_ends_with_head_dim_vo(self):
        """Added last, so that the fields before it (and the cascade's embedded level) keep their place."""
        self.assertEqual(_capi.PrefillConfig._fields_[-1], ("head_dim_vo", ctypes.c_int32))
        self.assertEqual(_capi.PrefillConfig().head_dim_vo, 0)  # 0: head_dim

    def test_a_shifted_field_is_caught(self):
        class Shifted(ctypes.Structure):  # a field the header does not have, ahead of the others
            _fields_ = [("added", ctypes.c_void_p)] + _capi.DecodeConfig._fields_
        saved = dict(_capi.MIRRORS)
        try:
            _capi.MIRRORS["aotinfer_batch_decode_config"] = Shifted
            problems = _capi.layout_mismatches()
        finally:
            _capi.MIRRORS.clear()
            _capi.MIRRORS.update(saved)
        self.assertIn("aotinfer_batch_decode_config.added: offset None in the library, 0 in _capi.py", problems)
        self.assertIn("aotinfer_batch_decode_config.dtype_q: offset 0 in the library, 8 in _capi.py", problems)
        self.assertTrue(any("bytes in the library" in p for p in problems), problems)


class FrontEndTest(unittest.TestCase):
    def test_merge_state_checks_shapes_before_anything_runs(self):
        pkg = aotinfer.Package()
        v, s = FakeCudaArray((16, 128)), FakeCudaArray((16,), "<f4")
        with self.assertRaises(aotinfer.InvalidArgument) as e:
            aotinfer.merge_state(pkg, v, s, FakeCudaArray((16, 64)), s, v)
        self.assertIn("v_b", str(e.exception))

    def test_each_argument_is_checked_before_the_driver_is_needed(self):
        pkg = aotinfer.Package()
        v, s = FakeCudaArray((16, 128)), FakeCudaArray((16,), "<f4")
        cases = [
            ((FakeCudaArray((16, 128), "<f4"), s, v, s, v), "v_a: expected dtype f16 or bf16, got f32"),
            ((v, FakeCudaArray((16,), "<f2"), v, s, v), "s_a: expected dtype f32, got f16"),
            ((v, s, v, s, FakeCudaArray((15, 128))), "v_out: expected shape [16, 128] (rows, head_dim), got [15, 128]"),
            ((v, s, v, FakeCudaArray((16, 1), "<f4"), v), "s_b: expected shape [16] (rows), got [16, 1]"),
            ((v, s, v, s, FakeCudaArray((16, 128), ptr=0x7000_0000_0002)), "v_out: data must be 16-byte aligned"),
            ((FakeCudaArray((1, 2, 3, 4, 128)), s, v, s, v), "v_a: has 5 dimensions"),
        ]
        for args, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(aotinfer.InvalidArgument) as e:
                    aotinfer.merge_state(pkg, *args)
                self.assertIn(message, str(e.exception))

    def test_run_passes_sinks_in_its_slot(self):
        """run()'s tensors reach the runtime in its struct's order: a bad sinks is refused by name
        while it is described, and a good one gets as far as the handle check (no driver here, so
        no decode or prefill object: a NULL handle stands in)."""
        q, i32 = FakeCudaArray((4, 8, 128)), FakeCudaArray((5,), "<i4")
        pool = FakeCudaArray((9, 16, 2, 128))
        decode, prefill = object.__new__(aotinfer.BatchDecode), object.__new__(aotinfer.BatchPrefill)
        decode._address = prefill._address = 0
        runs = {"decode": lambda sinks: decode.run(q, pool, pool, i32, i32, FakeCudaArray((4,), "<i4"), q, sinks=sinks),
                "prefill": lambda sinks: prefill.run(q, pool, pool, i32, i32, q, sinks=sinks)}
        for name, run in runs.items():
            with self.subTest(name):
                with self.assertRaises(aotinfer.InvalidArgument) as e:
                    run(FakeCudaArray((1, 1, 1, 1, 8), "<f4"))
                self.assertIn("sinks: has 5 dimensions", str(e.exception))
                with self.assertRaises(TypeError) as e:
                    run([0.5] * 8)
                self.assertIn("sinks: expected a tensor", str(e.exception))
                with self.assertRaises(aotinfer.InvalidArgument) as e:
                    run(FakeCudaArray((8,), "<f4"))
                self.assertIn(f"{name} must not be NULL", str(e.exception))

    def test_plan_reaches_the_runtime(self):
        """plan()'s arguments get as far as the runtime's handle check (a NULL handle stands in)."""
        ws = FakeCudaArray((1024,), "|u1")
        decode, prefill = object.__new__(aotinfer.BatchDecode), object.__new__(aotinfer.BatchPrefill)
        decode._address = prefill._address = 0
        plans = {"decode": lambda: decode.plan([0, 2], [5], ws, ws, kv_indices=[3, 4], num_pages=8),
                 "prefill": lambda: prefill.plan([0, 4], [0, 2], ws, ws, kv_last_page_len=[5])}
        for kv_storage in ("paged", "ragged"):
            prefill.kv_storage = kv_storage
            for name, plan in plans.items():
                with self.subTest(name=name, kv_storage=kv_storage):
                    with self.assertRaises(aotinfer.InvalidArgument) as e:
                        plan()
                    self.assertIn(f"{name} must not be NULL", str(e.exception))
                    self.assertEqual(e.exception.status, 1)

    def test_without_a_driver_the_error_is_clear(self):
        if _has_driver():
            self.skipTest("a CUDA driver is present: this checks machines without one")
        pkg = aotinfer.Package()
        v, s = FakeCudaArray((16, 128)), FakeCudaArray((16,), "<f4")
        with self.assertRaises(aotinfer.NoDriver) as e:
            aotinfer.merge_state(pkg, v, s, v, s, v)
        self.assertIn("libcuda", str(e.exception))

    def test_batch_prefill_names_the_allowed_values_of_an_unknown_option(self):
        # The C API parses the config's strings before anything touches the driver.
        pkg = aotinfer.Package()
        for option, allowed in (("kv_storage", ("paged", "ragged")), ("mask", ("none", "causal")),
                                ("layout", ("nhd", "hnd")), ("pos_encoding", ("none", "rope_llama")),
                                ("dtype_q", ("f16", "bf16"))):
            with self.subTest(option=option):
                with self.assertRaises(aotinfer.InvalidArgument) as e:
                    aotinfer.BatchPrefill(pkg, 8, 2, 128, **{option: "bogus"})
                message = str(e.exception)
                for word in (option, "bogus") + allowed:
                    self.assertIn(word, message)

    def test_window_left_becomes_the_config_flag_and_value(self):
        self.assertEqual(aotinfer._window(-1, "x"), (0, 0))
        self.assertEqual(aotinfer._window(-7, "x"), (0, 0))
        self.assertEqual(aotinfer._window(0, "x"), (1, 0))

        class Index:  # NumPy integers and the like
            def __index__(self):
                return 4095
        self.assertEqual(aotinfer._window(Index(), "x"), (1, 4095))

    def test_window_left_refusals_name_the_object(self):
        """A bool (an old sliding_window=True / soft_cap flag) or a non-int is refused before the
        C API sees the config."""
        pkg = aotinfer.Package()
        makers = {"batch_decode": lambda w: aotinfer.BatchDecode(pkg, 8, 2, 128, 16, window_left=w),
                  "batch_prefill": lambda w: aotinfer.BatchPrefill(pkg, 8, 2, 128, window_left=w),
                  "cascade": lambda w: aotinfer.Cascade(pkg, 2, 8, 2, 128, window_left=w)}
        for name, make in makers.items():
            for bad, words in ((True, "window_left must be an int"), (1.5, "window_left must be an int"),
                               ("64", "window_left must be an int"), (2**31, "outside int32")):
                with self.subTest(name=name, window_left=bad):
                    with self.assertRaises(aotinfer.InvalidArgument) as e:
                        make(bad)
                    self.assertIn(f"{name}: ", str(e.exception))
                    self.assertIn(words, str(e.exception))

    def test_the_old_flags_are_gone(self):
        pkg = aotinfer.Package()
        for make in (lambda: aotinfer.BatchDecode(pkg, 8, 2, 128, 16, soft_cap=True),
                     lambda: aotinfer.BatchPrefill(pkg, 8, 2, 128, sliding_window=True),
                     lambda: aotinfer.Cascade(pkg, 2, 8, 2, 128, soft_cap=True)):
            with self.assertRaises(TypeError):
                make()
        decode, prefill = object.__new__(aotinfer.BatchDecode), object.__new__(aotinfer.BatchPrefill)
        decode._address = prefill._address = 0
        q, i32 = FakeCudaArray((4, 8, 128)), FakeCudaArray((5,), "<i4")
        with self.assertRaises(TypeError):  # the window is the object's now
            decode.run(q, q, q, i32, i32, i32, q, window_left=3)
        with self.assertRaises(TypeError):
            prefill.run(q, q, q, i32, i32, q, window_left=3)
        with self.assertRaises(TypeError) as e:
            _ext.decode_run(*([None] * 21))
        self.assertIn("takes 20 arguments", str(e.exception))

    def test_windowed_configs_pass_the_c_api_checks(self):
        """Every variant serves windows and caps: a windowed config gets as far as the driver
        (the C API parsed it), with the package's plain variants."""
        if _has_driver():
            self.skipTest("a CUDA driver is present: this checks machines without one")
        pkg = aotinfer.Package()
        for make in (lambda: aotinfer.BatchDecode(pkg, 8, 2, 128, 16, window_left=4095),
                     lambda: aotinfer.BatchDecode(pkg, 8, 2, 128, 16, window_left=0),
                     lambda: aotinfer.BatchPrefill(pkg, 8, 2, 128, window_left=127),
                     lambda: aotinfer.BatchPrefill(pkg, 8, 2, 128, kv_storage="ragged", window_left=127)):
            with self.assertRaises(aotinfer.NoDriver):
                make()

    def test_cascade_refuses_a_window_by_name(self):
        pkg = aotinfer.Package()
        with self.assertRaises(aotinfer.InvalidArgument) as e:
            aotinfer.Cascade(pkg, 2, 8, 2, 128, window_left=64)
        self.assertIn("sliding_window", str(e.exception))
        self.assertIn("restart in each level", str(e.exception))

    def test_batch_prefill_head_dim_vo_goes_to_the_config(self):
        """V and o rows head_dim_vo wide: MLA prefill's 192 / 128 names a variant of the package (the
        driver is all it lacks), a pair the package lacks is NotFound naming it, and RoPE at unequal
        widths is refused by the config check; all before the driver."""
        pkg = aotinfer.Package()
        with self.assertRaises(aotinfer.NotFound) as e:
            aotinfer.BatchPrefill(pkg, 8, 2, 128, head_dim_vo=64)
        self.assertIn("head_dim_vo=64", str(e.exception))
        with self.assertRaises(aotinfer.InvalidArgument) as e:
            aotinfer.BatchPrefill(pkg, 8, 2, 192, head_dim_vo=128, pos_encoding="rope_llama")
        self.assertIn("served with 16-bit K/V and pos_encoding none", str(e.exception))
        with self.assertRaises(aotinfer.InvalidArgument) as e:
            aotinfer.BatchPrefill(pkg, 8, 2, 128, head_dim_vo=-1)
        self.assertIn("head_dim_vo", str(e.exception))
        self.assertEqual(aotinfer.BatchPrefill.__init__.__defaults__[-1], None)
        if _has_driver():
            return
        for kv_storage in ("paged", "ragged"):
            with self.subTest(kv_storage=kv_storage), self.assertRaises(aotinfer.NoDriver):
                aotinfer.BatchPrefill(pkg, 8, 2, 192, head_dim_vo=128, kv_storage=kv_storage)

    def test_batch_prefill_without_a_driver_the_error_is_clear(self):
        if _has_driver():
            self.skipTest("a CUDA driver is present: this checks machines without one")
        pkg = aotinfer.Package()
        for kv_storage in ("paged", "ragged"):
            with self.subTest(kv_storage=kv_storage):
                with self.assertRaises(aotinfer.NoDriver) as e:
                    aotinfer.BatchPrefill(pkg, 8, 2, 128, kv_storage=kv_storage)
                self.assertIn("libcuda", str(e.exception))
                self.assertEqual(e.exception.status, 4)


_I32P = ctypes.POINTER(ctypes.c_int32)
_WORKSPACES = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


class PlanTest(unittest.TestCase):
    """plan() through _ext, with recording stand-ins bound in place of the runtime's plan entries:
    what reaches them, and the checks the runtime cannot make (it takes pointers)."""

    def setUp(self):
        self.calls = []

        def ints(p, n):
            return [p[i] for i in range(n)] if p else None

        def decode(_, indptr, batch, last, indices, count, num_pages, fw, fb, iw, ib, stream):
            self.calls.append((ints(indptr, batch + 1), ints(last, batch), ints(indices, count), num_pages,
                               fw, fb, iw, ib, stream))
            return 0

        def paged(_, qo, kv, batch, last, indices, count, num_pages, fw, fb, iw, ib, stream):
            self.calls.append((ints(qo, batch + 1), ints(kv, batch + 1), ints(last, batch), ints(indices, count),
                               num_pages))
            return 0

        def ragged(_, qo, kv, batch, fw, fb, iw, ib, stream):
            self.calls.append((ints(qo, batch + 1), ints(kv, batch + 1)))
            return 0

        head = (ctypes.c_int, ctypes.c_void_p, _I32P)
        self.entries = [ctypes.CFUNCTYPE(*head, ctypes.c_int32, _I32P, _I32P, ctypes.c_int32, ctypes.c_int32,
                                         *_WORKSPACES)(decode),
                        ctypes.CFUNCTYPE(*head, _I32P, ctypes.c_int32, _I32P, _I32P, ctypes.c_int32, ctypes.c_int32,
                                         *_WORKSPACES)(paged),
                        ctypes.CFUNCTYPE(*head, _I32P, ctypes.c_int32, *_WORKSPACES)(ragged)]
        _ext.bind_plan(*(ctypes.cast(e, ctypes.c_void_p).value for e in self.entries), aotinfer._host_int32)
        self.addCleanup(_ext.bind_plan, _capi.entry_address("aotinfer_batch_decode_plan"),
                        _capi.entry_address("aotinfer_batch_prefill_plan_paged"),
                        _capi.entry_address("aotinfer_batch_prefill_plan_ragged"), aotinfer._host_int32)
        self.decode, self.prefill = object.__new__(aotinfer.BatchDecode), object.__new__(aotinfer.BatchPrefill)
        self.decode._address = self.prefill._address = 0
        self.prefill.kv_storage = "paged"
        self.fw = FakeCudaArray((1024,), "|u1", 0x7000_0000_0000)
        self.iw = FakeCudaArray((64,), "<f4", 0x7100_0000_0000)

    def refused(self, plan, message):
        with self.assertRaises(aotinfer.InvalidArgument) as e:
            plan()
        self.assertIn(message, str(e.exception))
        self.assertEqual(e.exception.status, 1)
        self.assertEqual(self.calls, [])

    def test_decode_gets_lists_tuples_and_other_ints(self):
        class Number:  # neither an int nor an array: converted by aotinfer._host_int32
            def __int__(self):
                return 7
        indices = list(range(300))  # longer than _ext's inline buffer
        self.decode.plan([0, 2, 300], (5, Number()), self.fw, self.iw, kv_indices=indices, num_pages=300, stream=5)
        self.assertEqual(self.calls, [([0, 2, 300], [5, 7], indices, 300, 0x7000_0000_0000, 1024, 0x7100_0000_0000,
                                       256, 5)])
        self.assertEqual(self.decode._batch, 2)

    def test_prefill_reads_what_its_storage_needs(self):
        self.prefill.plan([0, 3, 7], [0, 1, 2], self.fw, self.iw, kv_last_page_len=[4, 5], kv_indices=[1, 0])
        self.prefill.kv_storage = "ragged"  # kv_last_page_len and kv_indices are not read
        self.prefill.plan((0, 3, 7), (0, 9, 20), self.fw, self.iw, kv_last_page_len="unread", kv_indices="unread")
        self.assertEqual(self.calls, [([0, 3, 7], [0, 1, 2], [4, 5], [1, 0], 0), ([0, 3, 7], [0, 9, 20])])
        self.assertEqual((self.prefill._batch, self.prefill._total_q), (2, 7))

    def test_lengths_the_runtime_cannot_see(self):
        d, p, fw, iw = self.decode, self.prefill, self.fw, self.iw
        cases = [(lambda: d.plan([], [], fw, iw), "batch_decode: kv_indptr must have batch + 1 entries"),
                 (lambda: d.plan([0, 1, 2], [1], fw, iw), "kv_last_page_len has 1 entries, the batch is 2"),
                 (lambda: p.plan([], [], fw, iw), "batch_prefill: qo_indptr must have batch + 1 entries"),
                 (lambda: p.plan([0, 1], [0, 1, 2], fw, iw), "qo_indptr has 2 entries, kv_indptr 3"),
                 (lambda: p.plan([0, 1], [0, 1], fw, iw), "batch_prefill: paged KV needs kv_last_page_len"),
                 (lambda: p.plan([0, 1], [0, 1], fw, iw, kv_last_page_len=[]), "kv_last_page_len has 0 entries")]
        for plan, message in cases:
            with self.subTest(message=message):
                self.refused(plan, message)

    def test_what_plan_refuses_by_name(self):
        class Big:
            def __int__(self):
                return 2**40
        d, fw, iw = self.decode, self.fw, self.iw
        strided = FakeCudaArray((64,), "|u1")
        strided.__cuda_array_interface__["strides"] = (2,)
        cases = [(lambda: d.plan([0, 2**31], [1], fw, iw), "kv_indptr: entry 1 is 2147483648, outside int32"),
                 (lambda: d.plan([0, 1], [Big()], fw, iw), "kv_last_page_len: an entry is outside int32"),
                 (lambda: d.plan(FakeCudaArray((2,), "<i4"), [1], fw, iw), "kv_indptr: plan() reads host metadata"),
                 (lambda: d.plan([0, 1], [1], None, iw), "float_workspace: expected a GPU tensor, got None"),
                 (lambda: d.plan([0, 1], [1], fw, strided), "int_workspace: the workspace must be contiguous"),
                 (lambda: d.plan([0, 1], [1], fw, iw, num_pages=2**32), "num_pages: 4294967296 is outside int32")]
        for plan, message in cases:
            with self.subTest(message=message):
                self.refused(plan, message)


def _has_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


if __name__ == "__main__":
    unittest.main()
