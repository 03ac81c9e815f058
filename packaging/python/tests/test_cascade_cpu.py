"""aotinfer.Cascade without a GPU: its argument checks in Python, and that plan() and run() hand
well-formed arrays to the C API, whose checks all pass until it meets a handle that is not one.
Run against an installed wheel (tests/python_wheel.sh)."""
import ctypes
import unittest

import aotinfer


class FakeCudaArray:
    """A device array as __cuda_array_interface__ describes it (nothing is dereferenced)."""

    def __init__(self, shape, typestr="<f2", ptr=0x7000_0000_0000):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "version": 3}


NOT_HANDLE = "cascade: expected a handle from aotinfer_cascade_create, got a pointer to something else"


class CascadeArgumentsTest(unittest.TestCase):
    def setUp(self):
        # A Cascade around zeroed memory: every C call refuses it once its other arguments pass.
        self.junk = (ctypes.c_uint64 * 8)()
        self.cascade = object.__new__(aotinfer.Cascade)
        self.cascade._handle, self.cascade.num_levels = ctypes.c_void_p(ctypes.addressof(self.junk)), 2
        self.ws = FakeCudaArray((4096,), "|u1")
        self.levels = ([[0, 8], [0, 3, 8]], [[0, 2], [0, 1, 2]], [[16], [4, 9]])

    def refused(self, call, *words):
        with self.assertRaises(aotinfer.InvalidArgument) as caught:
            call()
        for word in words:
            self.assertIn(word, str(caught.exception))

    def test_plan_reaches_the_handle_check(self):
        self.refused(lambda: self.cascade.plan(*self.levels, self.ws, self.ws), "aotinfer_cascade_plan", NOT_HANDLE)
        self.refused(lambda: self.cascade.plan(*self.levels, self.ws, self.ws, kv_indices_list=[[0, 1], [2, 3]],
                                               num_pages=4), "aotinfer_cascade_plan", NOT_HANDLE)

    def test_plan_refuses_levels_of_the_wrong_count_or_length(self):
        qo, kv, last = self.levels
        self.refused(lambda: self.cascade.plan(qo[:1], kv, last, self.ws, self.ws),
                     "qo_indptr_list must be a list of 2 entries")
        self.refused(lambda: self.cascade.plan(qo, [[0, 2], [0, 1]], last, self.ws, self.ws),
                     "level 1 has 3 qo_indptr, 2 kv_indptr")
        self.refused(lambda: self.cascade.plan([[0, 8], []], kv, last, self.ws, self.ws),
                     "level 1 qo_indptr must have groups + 1 entries")
        self.refused(lambda: self.cascade.plan(qo, kv, last, self.ws, self.ws, kv_indices_list=[[1 << 40], []]),
                     "kv_indices_list[0]: an entry is outside int32")

    def test_run_reaches_the_handle_check(self):
        q, pool, i32 = FakeCudaArray((8, 8, 64)), FakeCudaArray((4, 16, 2, 64)), FakeCudaArray((3,), "<i4")
        meta = [[i32, i32]] * 4
        self.refused(lambda: self.cascade.run(q, pool, pool, *meta, q), "aotinfer_cascade_tensors_run", NOT_HANDLE)
        self.refused(lambda: self.cascade.run(q, pool, pool, [i32], *meta[1:], q), "qo_indptr_list must be a list")

    def test_config_refusals_name_the_argument(self):
        self.refused(lambda: aotinfer.Cascade(None, 2, 8, 2, 64, mask="diagonal"), "mask must be one of")
        self.refused(lambda: aotinfer.Cascade(None, 2, 8, 2, 64, layout="xyz"), "layout must be one of")
        self.refused(lambda: aotinfer.Cascade(None, 2, 8, 2, 64, window_left=True), "cascade: window_left must be an int")

    def test_a_window_is_refused_a_soft_cap_served(self):
        """Windows count positions, which restart in each level: the runtime refuses one by name
        (no window is a zeroed flag); the soft cap is a run value and reaches the C API."""
        self.refused(lambda: aotinfer.Cascade(aotinfer.Package(), 2, 8, 2, 128, window_left=0),
                     "aotinfer_cascade_create", "sliding_window", "restart in each level")
        q, pool, i32 = FakeCudaArray((8, 8, 64)), FakeCudaArray((4, 16, 2, 64)), FakeCudaArray((3,), "<i4")
        meta = [[i32, i32]] * 4
        self.refused(lambda: self.cascade.run(q, pool, pool, *meta, q, logits_soft_cap=30.0, sm_scale=0.125),
                     "aotinfer_cascade_tensors_run", NOT_HANDLE)


if __name__ == "__main__":
    unittest.main()
