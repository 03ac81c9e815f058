/* aotinfer._ext: the per-call path of the Python layer, in C. It describes each tensor argument
 * (aotinfer/tensor.h) and calls the runtime's checked entry point, so one run() costs a few
 * attribute reads per tensor and one launch instead of DLPack capsules and ctypes structs.
 *
 * Built against Python's stable ABI (abi3, 3.10+) and linked to nothing: the runtime's entry
 * points arrive as addresses from the ctypes-loaded libaotinfer (bind), so one library instance
 * serves both and no compiler is needed at install or import. PyTorch tensors on the GPU take a
 * fast path once aotinfer._tensor has handed over torch's types (bind_torch): DLPack's C exchange
 * API (`__dlpack_c_exchange_api__`, PyTorch 2.10+), which fills a DLTensor and names the current
 * stream without allocating, or else five attribute reads per tensor. Any other object is
 * described by aotinfer._tensor.describe (DLPack, __cuda_array_interface__).
 *
 * plan() comes here too (bind_plan): its host metadata is read in place from PyTorch CPU int32
 * tensors and copied from lists of ints without a Python object per entry, its workspaces are
 * described as run()'s tensors are, so a plan costs about what the runtime's planner does.
 * Other metadata goes through aotinfer._host_int32 (NumPy arrays, int64 tensors, ...). */
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "aotinfer/aotinfer.h"

/* describe_all fills a tensors struct as an array of its aotinfer_tensor members. */
_Static_assert(sizeof(aotinfer_batch_decode_tensors) == 12 * sizeof(aotinfer_tensor), "decode tensors are 12 tensors");
_Static_assert(sizeof(aotinfer_batch_prefill_tensors) == 12 * sizeof(aotinfer_tensor), "prefill tensors are 12 tensors");
_Static_assert(sizeof(aotinfer_merge_state_tensors) == 6 * sizeof(aotinfer_tensor), "merge tensors are 6 tensors");
_Static_assert(sizeof(aotinfer_append_paged_kv_tensors) == 9 * sizeof(aotinfer_tensor), "append tensors are 9 tensors");

typedef int (*decode_fn)(const void*, const aotinfer_batch_decode_tensors*, const aotinfer_attention_scalars*, void*);
typedef int (*prefill_fn)(const void*, const aotinfer_batch_prefill_tensors*, const aotinfer_attention_scalars*, void*);
typedef int (*merge_fn)(const void*, const aotinfer_merge_state_tensors*, void*);
typedef int (*append_fn)(const void*, const aotinfer_append_paged_kv_tensors*, const char*, void*);
/* The plan entries' types come from the header: a change of their arguments fails to compile. */
typedef __typeof__(aotinfer_batch_decode_plan)* decode_plan_fn;
typedef __typeof__(aotinfer_batch_prefill_plan_paged)* prefill_paged_fn;
typedef __typeof__(aotinfer_batch_prefill_plan_ragged)* prefill_ragged_fn;

/* DLPack's C exchange API (DLPack 1.x), declared as the DLPack specification lays it out. */
typedef struct { uint32_t major, minor; } dl_version;
typedef struct dl_api_header { dl_version version; struct dl_api_header* prev_api; } dl_api_header;
typedef struct { int32_t device_type, device_id; } dl_device;
typedef struct { uint8_t code, bits; uint16_t lanes; } dl_dtype;
typedef struct {
  void* data;
  dl_device device;
  int32_t ndim;
  dl_dtype dtype;
  int64_t* shape;
  int64_t* strides; /* NULL: contiguous */
  uint64_t byte_offset;
} dl_tensor;
typedef struct {
  dl_api_header header;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* py_object, dl_tensor* out); /* may be NULL */
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
} dl_exchange_api;
enum { DL_CPU = 1, DL_CUDA = 2, DL_CUDA_HOST = 3 };

static struct {
  decode_fn decode;
  prefill_fn prefill;
  merge_fn merge;
  append_fn append;
  PyObject* describe;      /* aotinfer._tensor.describe(obj, name) -> tuple */
  PyObject* stream_of;     /* aotinfer._tensor.stream_handle(obj) -> int */
  PyObject* invalid;       /* aotinfer.InvalidArgument */
  PyObject* torch_tensor;  /* torch.Tensor, once bound */
  PyObject* torch_dtypes;  /* {torch.dtype: aotinfer_dtype} */
  PyObject* torch_stream;  /* torch's current raw stream of a device index */
  PyObject* exchange_capsule;      /* torch.Tensor.__dlpack_c_exchange_api__, when usable */
  const dl_exchange_api* exchange; /* its table */
  decode_plan_fn decode_plan;
  prefill_paged_fn prefill_paged;
  prefill_ragged_fn prefill_ragged;
  PyObject* host_int32;    /* aotinfer._host_int32(obj, name) -> (address, count, keepalive) */
} S;

static PyObject *s_is_cuda, *s_is_cpu, *s_data_ptr, *s_dtype, *s_shape, *s_stride, *s_get_device;

/* Raises aotinfer.InvalidArgument(message, 1), the status the runtime's own refusals carry
 * (AOTINFER_INVALID_ARGUMENT). Returns -1. */
static int invalid(const char* format, ...) {
  va_list args;
  va_start(args, format);
  PyObject* message = PyUnicode_FromFormatV(format, args);
  va_end(args);
  PyObject* error = message ? PyObject_CallFunction(S.invalid, "Oi", message, 1) : NULL;
  if (error) {
    PyErr_SetObject((PyObject*)Py_TYPE(error), error);
    Py_DECREF(error);
  }
  Py_XDECREF(message);
  return -1;
}

/* Describes one argument. *torch_device is set to a torch GPU tensor's device index. Returns
 * -1 with a Python exception set. */
static int describe(PyObject* obj, const char* name, aotinfer_tensor* t, int* torch_device);

static int int64s(PyObject* seq, int64_t* out, int n) {
  const int tuple = PyTuple_Check(seq); /* torch.Size and stride(): borrowed items, no new references */
  for (int i = 0; i < n; ++i) {
    PyObject* item = tuple ? PyTuple_GetItem(seq, i) : PySequence_GetItem(seq, i);
    if (!item) return -1;
    out[i] = PyLong_AsLongLong(item);
    if (!tuple) Py_DECREF(item);
    if (out[i] == -1 && PyErr_Occurred()) return -1;
  }
  return 0;
}

static int set_dims(const char* name, PyObject* shape, PyObject* strides, aotinfer_tensor* t) {
  const Py_ssize_t ndim = PySequence_Size(shape);
  if (ndim < 0) return -1;
  if (ndim > AOTINFER_TENSOR_MAX_DIMS)
    return invalid("%s: has %zd dimensions; aotinfer takes at most %d", name, ndim, AOTINFER_TENSOR_MAX_DIMS);
  if (PySequence_Size(strides) != ndim) return invalid("%s: its strides and shape differ in length", name);
  t->ndim = (int32_t)ndim;
  return int64s(shape, t->shape, (int)ndim) || int64s(strides, t->strides, (int)ndim) ? -1 : 0;
}

static void set_dtype_name(PyObject* dtype, aotinfer_tensor* t) {
  PyObject* text = PyObject_Str(dtype);
  const char* s = text ? PyUnicode_AsUTF8AndSize(text, NULL) : NULL;
  if (s) {
    if (strncmp(s, "torch.", 6) == 0) s += 6;
    strncpy(t->dtype_name, s, sizeof t->dtype_name - 1);
  }
  Py_XDECREF(text);
  PyErr_Clear();
}

/* A torch tensor on a GPU, or with host_too also one in CPU memory: 1 when described, 0 when it
 * is something else, -1 on error. */
static int describe_torch(PyObject* obj, const char* name, aotinfer_tensor* t, int* torch_device, int host_too) {
  PyObject* is_cuda = PyObject_GetAttr(obj, s_is_cuda);
  if (!is_cuda) return -1;
  const int cuda = is_cuda == Py_True;
  Py_DECREF(is_cuda);
  if (!cuda) {
    if (!host_too) return 0;
    PyObject* is_cpu = PyObject_GetAttr(obj, s_is_cpu);
    if (!is_cpu) return -1;
    const int cpu = is_cpu == Py_True;
    Py_DECREF(is_cpu);
    if (!cpu) return 0; /* meta, another accelerator: the slow path names it */
  }

  PyObject* ptr = PyObject_CallMethodObjArgs(obj, s_data_ptr, NULL);
  if (!ptr) return -1;
  t->data = PyLong_AsVoidPtr(ptr);
  Py_DECREF(ptr);
  t->device_type = cuda ? AOTINFER_DEVICE_CUDA : AOTINFER_DEVICE_CPU; /* pinned or not: plan() reads either */
  if (cuda) {
    PyObject* device = PyObject_CallMethodObjArgs(obj, s_get_device, NULL);
    if (!device) return -1;
    t->device_id = (int32_t)PyLong_AsLong(device);
    Py_DECREF(device);
    *torch_device = t->device_id;
  }

  PyObject* dtype = PyObject_GetAttr(obj, s_dtype);
  if (!dtype) return -1;
  PyObject* code = PyDict_GetItemWithError(S.torch_dtypes, dtype); /* borrowed */
  if (code) {
    t->dtype = (int32_t)PyLong_AsLong(code);
  } else {
    t->dtype = AOTINFER_DTYPE_OTHER;
    set_dtype_name(dtype, t);
  }
  Py_DECREF(dtype);
  if (PyErr_Occurred()) return -1;

  PyObject* shape = PyObject_GetAttr(obj, s_shape);
  PyObject* strides = shape ? PyObject_CallMethodObjArgs(obj, s_stride, NULL) : NULL;
  const int status = strides ? set_dims(name, shape, strides, t) : -1;
  Py_XDECREF(shape);
  Py_XDECREF(strides);
  return status < 0 ? -1 : 1;
}

/* (DLPack type code, bits) -> aotinfer_dtype; AOTINFER_DTYPE_OTHER if aotinfer has no such type. */
static int32_t dtype_of(dl_dtype d) {
  static const struct { uint8_t code, bits; int32_t dtype; } known[] = {
      {2, 16, AOTINFER_F16}, {4, 16, AOTINFER_BF16}, {10, 8, AOTINFER_E4M3}, {12, 8, AOTINFER_E5M2},
      {2, 32, AOTINFER_F32}, {0, 32, AOTINFER_I32},  {1, 8, AOTINFER_U8}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; ++i)
    if (known[i].code == d.code && known[i].bits == d.bits && d.lanes == 1) return known[i].dtype;
  return AOTINFER_DTYPE_OTHER;
}

/* A torch tensor on a GPU (or with host_too in host memory) through DLPack's exchange API: 1
 * when described, 0 when it is something the slower paths describe better (another device, an
 * unknown dtype: they name it), -1 on error. */
static int describe_exchange(PyObject* obj, const char* name, aotinfer_tensor* t, int* torch_device, int host_too) {
  dl_tensor d;
  if (S.exchange->dltensor_from_py_object_no_sync(obj, &d) != 0) return -1;
  const int32_t kind = d.device.device_type;
  if (kind != DL_CUDA && !(host_too && (kind == DL_CPU || kind == DL_CUDA_HOST))) return 0;
  t->dtype = dtype_of(d.dtype);
  if (t->dtype == AOTINFER_DTYPE_OTHER) return 0;
  if (d.ndim > AOTINFER_TENSOR_MAX_DIMS)
    return invalid("%s: has %d dimensions; aotinfer takes at most %d", name, (int)d.ndim, AOTINFER_TENSOR_MAX_DIMS);
  t->data = (char*)d.data + d.byte_offset;
  t->device_type = kind; /* aotinfer_device_type takes DLPack's numbers */
  t->device_id = d.device.device_id;
  t->ndim = d.ndim;
  int64_t step = 1;
  for (int i = d.ndim - 1; i >= 0; --i) {
    t->shape[i] = d.shape[i];
    t->strides[i] = d.strides ? d.strides[i] : step;
    step *= d.shape[i];
  }
  if (kind == DL_CUDA) *torch_device = t->device_id;
  return 1;
}

static int describe(PyObject* obj, const char* name, aotinfer_tensor* t, int* torch_device) {
  memset(t, 0, sizeof *t);
  if (obj == Py_None) return 0;
  if (S.torch_tensor && PyObject_TypeCheck(obj, (PyTypeObject*)S.torch_tensor)) {
    const int done = S.exchange ? describe_exchange(obj, name, t, torch_device, 0) : describe_torch(obj, name, t, torch_device, 0);
    if (done != 0) return done < 0 ? -1 : 0;
    memset(t, 0, sizeof *t);
  }
  /* (data, dtype, device_type, device_id, shape, strides, dtype_name) */
  PyObject* d = PyObject_CallFunction(S.describe, "Os", obj, name);
  if (!d) return -1;
  int status = -1;
  PyObject *data, *shape, *strides;
  const char* dtype_name;
  if (PyArg_ParseTuple(d, "OiiiOOs", &data, &t->dtype, &t->device_type, &t->device_id, &shape, &strides, &dtype_name)) {
    t->data = PyLong_AsVoidPtr(data);
    strncpy(t->dtype_name, dtype_name, sizeof t->dtype_name - 1);
    status = PyErr_Occurred() ? -1 : set_dims(name, shape, strides, t);
  }
  Py_DECREF(d);
  return status;
}

/* None: the current torch stream when a torch GPU tensor was given, else the default stream. */
static int stream_arg(PyObject* obj, int torch_device, void** stream) {
  PyObject* value = NULL;
  if (obj == Py_None) {
    if (torch_device < 0 || !S.torch_stream) {
      *stream = NULL;
      return 0;
    }
    if (S.exchange) return S.exchange->current_work_stream(DL_CUDA, torch_device, stream) == 0 ? 0 : -1;
    value = PyObject_CallFunction(S.torch_stream, "i", torch_device);
  } else if (PyLong_Check(obj)) {
    Py_INCREF(obj);
    value = obj;
  } else {
    value = PyObject_CallFunctionObjArgs(S.stream_of, obj, NULL);
  }
  if (!value) return -1;
  *stream = PyLong_AsVoidPtr(value);
  Py_DECREF(value);
  return PyErr_Occurred() ? -1 : 0;
}

/* The six floats of aotinfer_attention_scalars, in its order (the sliding window is the config's,
 * fixed at plan time; logits_soft_cap <= 0 is no cap). */
enum { SCALARS = 6 };
_Static_assert(sizeof(aotinfer_attention_scalars) == SCALARS * sizeof(float), "the scalars are six floats");

static int scalars_arg(PyObject* const* args, aotinfer_attention_scalars* s) {
  float* floats[SCALARS] = {&s->sm_scale, &s->logits_soft_cap, &s->rope_scale, &s->rope_theta, &s->k_scale, &s->v_scale};
  for (int i = 0; i < SCALARS; ++i) {
    *floats[i] = (float)PyFloat_AsDouble(args[i]);
    if (*floats[i] == -1.0f && PyErr_Occurred()) return -1;
  }
  return 0;
}

static int check_nargs(const char* op, Py_ssize_t nargs, Py_ssize_t want) {
  if (nargs == want) return 0;
  PyErr_Format(PyExc_TypeError, "_ext.%s takes %zd arguments, got %zd", op, want, nargs);
  return -1;
}

static int unbound(void* fn) {
  if (fn) return 0;
  PyErr_SetString(PyExc_RuntimeError, "aotinfer._ext is not bound to the runtime library (aotinfer/__init__.py binds it)");
  return -1;
}

/* Describes `count` tensors args[0 ..] into out[] (aotinfer_tensor fields of a tensors struct). */
static int describe_all(PyObject* const* args, const char* const* names, int count, aotinfer_tensor* out, int* torch_device) {
  for (int i = 0; i < count; ++i)
    if (describe(args[i], names[i], &out[i], torch_device) < 0) return -1;
  return 0;
}

/* decode_run(handle, q, k_pages, v_pages, kv_indptr, kv_indices, kv_last_page_len, o, lse,
 *            q_positions, sinks, custom_mask, mask_indptr, sm_scale, logits_soft_cap, rope_scale,
 *            rope_theta, k_scale, v_scale, stream) -> status */
static PyObject* decode_run(PyObject* Py_UNUSED(self), PyObject* const* args, Py_ssize_t nargs) {
  static const char* const names[] = {"q", "k_pages",     "v_pages",    "kv_indptr",     "kv_indices",
                                      "kv_last_page_len", "o",          "lse",           "q_positions",
                                      "sinks",            "custom_mask", "mask_indptr"};
  aotinfer_batch_decode_tensors t;
  aotinfer_attention_scalars s;
  int torch_device = -1;
  void* stream = NULL;
  if (check_nargs("decode_run", nargs, 20) || unbound((void*)S.decode)) return NULL;
  void* handle = PyLong_AsVoidPtr(args[0]);
  if (PyErr_Occurred() || describe_all(args + 1, names, 12, &t.q, &torch_device) || scalars_arg(args + 13, &s) ||
      stream_arg(args[19], torch_device, &stream))
    return NULL;
  /* The GIL is kept: a launch takes microseconds, less than releasing and taking it back. */
  return PyLong_FromLong(S.decode(handle, &t, &s, stream));
}

/* prefill_run(handle, q, k, v, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, o, lse,
 *             sinks, custom_mask, mask_indptr, sm_scale, logits_soft_cap, rope_scale, rope_theta,
 *             k_scale, v_scale, stream) -> status */
static PyObject* prefill_run(PyObject* Py_UNUSED(self), PyObject* const* args, Py_ssize_t nargs) {
  static const char* const names[] = {"q",   "k",   "v",     "qo_indptr",   "kv_indptr",  "kv_indices", "kv_last_page_len",
                                      "o",   "lse", "sinks", "custom_mask", "mask_indptr"};
  aotinfer_batch_prefill_tensors t;
  aotinfer_attention_scalars s;
  int torch_device = -1;
  void* stream = NULL;
  if (check_nargs("prefill_run", nargs, 20) || unbound((void*)S.prefill)) return NULL;
  void* handle = PyLong_AsVoidPtr(args[0]);
  if (PyErr_Occurred() || describe_all(args + 1, names, 12, &t.q, &torch_device) || scalars_arg(args + 13, &s) ||
      stream_arg(args[19], torch_device, &stream))
    return NULL;
  return PyLong_FromLong(S.prefill(handle, &t, &s, stream));
}

/* merge_state(package, v_a, s_a, v_b, s_b, v_out, s_out, stream) -> status */
static PyObject* merge_state(PyObject* Py_UNUSED(self), PyObject* const* args, Py_ssize_t nargs) {
  static const char* const names[] = {"v_a", "s_a", "v_b", "s_b", "v_out", "s_out"};
  aotinfer_merge_state_tensors t;
  int torch_device = -1;
  void* stream = NULL;
  if (check_nargs("merge_state", nargs, 8) || unbound((void*)S.merge)) return NULL;
  void* package = PyLong_AsVoidPtr(args[0]);
  if (PyErr_Occurred() || describe_all(args + 1, names, 6, &t.v_a, &torch_device) ||
      stream_arg(args[7], torch_device, &stream))
    return NULL;
  return PyLong_FromLong(S.merge(package, &t, stream));
}

/* append_paged_kv(package, k, v, batch_indices, positions, k_pages, v_pages, kv_indptr,
 *                 kv_indices, kv_last_page_len, layout, stream) -> status */
static PyObject* append_paged_kv(PyObject* Py_UNUSED(self), PyObject* const* args, Py_ssize_t nargs) {
  static const char* const names[] = {"k", "v", "batch_indices", "positions", "k_pages", "v_pages", "kv_indptr", "kv_indices", "kv_last_page_len"};
  aotinfer_append_paged_kv_tensors t;
  int torch_device = -1;
  void* stream = NULL;
  if (check_nargs("append_paged_kv", nargs, 12) || unbound((void*)S.append)) return NULL;
  void* package = PyLong_AsVoidPtr(args[0]);
  const char* layout = PyUnicode_AsUTF8AndSize(args[10], NULL);
  if (PyErr_Occurred() || describe_all(args + 1, names, 9, &t.k, &torch_device) ||
      stream_arg(args[11], torch_device, &stream))
    return NULL;
  return PyLong_FromLong(S.append(package, &t, layout, stream));
}

/* --- plan() ------------------------------------------------------------------------------- */

/* One array of plan()'s host metadata: read in place (a PyTorch CPU int32 tensor), copied (a list
 * or tuple of ints: inline up to batch 128's indptr, else on the heap) or held by what
 * aotinfer._host_int32 returned (anything else). */
enum { INLINE_INTS = 136 };
typedef struct {
  const int32_t* data;
  Py_ssize_t n;
  PyObject* keep;
  int32_t* heap;
  int32_t inline_ints[INLINE_INTS];
} host_ints;

static int gpu_metadata(const char* name) {
  return invalid("%s: plan() reads host metadata: pass a CPU tensor, array or list (run() takes the GPU copies)", name);
}

/* A list or tuple of ints into h: 1 when copied, 0 when an entry is no int (NumPy integers, ...:
 * the slow path converts them), -1 on error. */
static int copy_ints(PyObject* seq, const char* name, host_ints* h) {
  const int list = PyList_Check(seq);
  const Py_ssize_t n = list ? PyList_Size(seq) : PyTuple_Size(seq);
  int32_t* out = n <= INLINE_INTS ? h->inline_ints : (h->heap = PyMem_Malloc((size_t)n * sizeof(int32_t)));
  if (!out) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = list ? PyList_GetItem(seq, i) : PyTuple_GetItem(seq, i); /* borrowed */
    if (!item) return -1;
    if (!PyLong_Check(item)) return 0;
    int overflow;
    const long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
    if (overflow || v < INT32_MIN || v > INT32_MAX) return invalid("%s: entry %zd is %S, outside int32", name, i, item);
    out[i] = (int32_t)v;
  }
  h->data = out;
  h->n = n;
  return 1;
}

/* A PyTorch tensor in host memory that is 1-D, int32 and dense: 1 when read in place, 0 when
 * the slow path converts (or refuses) it, -1 on error (a GPU tensor is refused by name). */
static int torch_ints(PyObject* obj, const char* name, host_ints* h) {
  aotinfer_tensor t;
  int torch_device = -1;
  memset(&t, 0, sizeof t);
  const int done = S.exchange ? describe_exchange(obj, name, &t, &torch_device, 1) : describe_torch(obj, name, &t, &torch_device, 1);
  if (done <= 0) return done;
  if (t.device_type == AOTINFER_DEVICE_CUDA) return gpu_metadata(name);
  if (t.dtype != AOTINFER_I32 || t.ndim != 1 || (t.shape[0] > 1 && t.strides[0] != 1)) return 0;
  h->data = t.data;
  h->n = (Py_ssize_t)t.shape[0];
  return 1;
}

/* obj (None: NULL, 0) into h, which release_ints frees, also after an error. */
static int read_ints(PyObject* obj, const char* name, host_ints* h) {
  int done = 0;
  if (obj == Py_None) return 0;
  if (PyList_Check(obj) || PyTuple_Check(obj)) done = copy_ints(obj, name, h);
  else if (S.torch_tensor && PyObject_TypeCheck(obj, (PyTypeObject*)S.torch_tensor)) done = torch_ints(obj, name, h);
  if (done < 0) return -1;
  if (done == 0) {
    PyObject *address, *kept;
    PyMem_Free(h->heap);
    h->heap = NULL;
    h->keep = PyObject_CallFunction(S.host_int32, "Os", obj, name); /* (address, count, keepalive) */
    if (!h->keep || !PyArg_ParseTuple(h->keep, "OnO", &address, &h->n, &kept)) return -1;
    h->data = PyLong_AsVoidPtr(address);
    if (PyErr_Occurred()) return -1;
  }
  /* The runtime takes int32 counts. */
  return h->n > INT32_MAX ? invalid("%s: has %zd entries; at most 2^31 - 1 are served", name, h->n) : 0;
}

static int read_all_ints(PyObject* const* args, const char* const* names, int count, host_ints* h) {
  for (int i = 0; i < count; ++i) {
    h[i].data = NULL, h[i].n = 0, h[i].keep = NULL, h[i].heap = NULL;
  }
  for (int i = 0; i < count; ++i)
    if (read_ints(args[i], names[i], &h[i]) < 0) return -1;
  return 0;
}

static void release_ints(host_ints* h, int count) {
  for (int i = 0; i < count; ++i) {
    Py_XDECREF(h[i].keep);
    PyMem_Free(h[i].heap);
  }
}

/* A plan's device workspace: a dense GPU tensor as (pointer, bytes). */
static int workspace_arg(PyObject* obj, const char* name, void** data, size_t* bytes, int* torch_device) {
  static const size_t sizes[] = {[AOTINFER_F16] = 2, [AOTINFER_BF16] = 2, [AOTINFER_E4M3] = 1, [AOTINFER_E5M2] = 1,
                                 [AOTINFER_F32] = 4, [AOTINFER_I32] = 4, [AOTINFER_U8] = 1};
  aotinfer_tensor t;
  if (obj == Py_None) return invalid("%s: expected a GPU tensor, got None", name);
  if (describe(obj, name, &t, torch_device) < 0) return -1;
  if (t.device_type != AOTINFER_DEVICE_CUDA && t.device_type != AOTINFER_DEVICE_CUDA_MANAGED)
    return invalid("%s: the workspace must be GPU memory, got a tensor in %s", name,
                   t.device_type == AOTINFER_DEVICE_CPU ? "the CPU" : "host memory");
  int64_t numel = 1;
  int dense = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    dense &= t.shape[i] == 1 || t.strides[i] == numel;
    numel *= t.shape[i];
  }
  if (!dense && numel > 1) return invalid("%s: the workspace must be contiguous", name);
  *data = t.data;
  /* An unknown dtype counts one byte an element: never more than the buffer holds. */
  *bytes = (size_t)numel * ((size_t)t.dtype < sizeof sizes / sizeof sizes[0] ? sizes[t.dtype] : 1);
  return 0;
}

/* (float_workspace, int_workspace, stream): None is the current PyTorch stream of the int
 * workspace's device, where the plan's copy goes. */
static int workspaces_arg(PyObject* const* args, void** ws, size_t* bytes, void** stream) {
  int float_device = -1, int_device = -1;
  if (workspace_arg(args[0], "float_workspace", &ws[0], &bytes[0], &float_device) < 0 ||
      workspace_arg(args[1], "int_workspace", &ws[1], &bytes[1], &int_device) < 0)
    return -1;
  return stream_arg(args[2], int_device, stream);
}

/* An int the runtime takes as int32_t. */
static int int32_arg(PyObject* obj, const char* name, int32_t* out) {
  const long long v = PyLong_AsLongLong(obj);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (v < INT32_MIN || v > INT32_MAX) return invalid("%s: %lld is outside int32", name, v);
  *out = (int32_t)v;
  return 0;
}

/* The runtime takes pointers: the lengths it cannot see are checked here. */
static int decode_lengths(const host_ints* h) {
  if (h[0].n < 1) return invalid("batch_decode: kv_indptr must have batch + 1 entries, got an empty array");
  if (h[1].n != h[0].n - 1)
    return invalid("batch_decode: kv_last_page_len has %zd entries, the batch is %zd", h[1].n, h[0].n - 1);
  return 0;
}

static int prefill_lengths(const host_ints* h, int paged, PyObject* last) {
  if (h[0].n < 1) return invalid("batch_prefill: qo_indptr must have batch + 1 entries, got an empty array");
  if (h[1].n != h[0].n)
    return invalid("batch_prefill: qo_indptr has %zd entries, kv_indptr %zd; both need batch + 1", h[0].n, h[1].n);
  if (paged && last == Py_None) return invalid("batch_prefill: paged KV needs kv_last_page_len");
  if (paged && h[2].n != h[0].n - 1)
    return invalid("batch_prefill: kv_last_page_len has %zd entries, the batch is %zd", h[2].n, h[0].n - 1);
  return 0;
}

/* decode_plan(handle, kv_indptr, kv_last_page_len, kv_indices, num_pages, float_workspace,
 *             int_workspace, stream) -> (status, batch) */
static PyObject* decode_plan(PyObject* Py_UNUSED(self), PyObject* const* args, Py_ssize_t nargs) {
  static const char* const names[] = {"kv_indptr", "kv_last_page_len", "kv_indices"};
  host_ints h[3];
  void *ws[2], *stream;
  size_t bytes[2];
  int32_t num_pages = 0;
  PyObject* result = NULL;
  if (check_nargs("decode_plan", nargs, 8) || unbound((void*)S.decode_plan)) return NULL;
  void* handle = PyLong_AsVoidPtr(args[0]);
  if (PyErr_Occurred() || int32_arg(args[4], "num_pages", &num_pages) < 0) return NULL;
  if (read_all_ints(args + 1, names, 3, h) == 0 && decode_lengths(h) == 0 &&
      workspaces_arg(args + 5, ws, bytes, &stream) == 0) {
    const int32_t batch = (int32_t)(h[0].n - 1);
    const int status = S.decode_plan(handle, h[0].data, batch, h[1].data, h[2].data, (int32_t)h[2].n, num_pages, ws[0],
                                     bytes[0], ws[1], bytes[1], stream);
    result = Py_BuildValue("(ii)", status, batch);
  }
  release_ints(h, 3);
  return result;
}

/* prefill_plan(handle, paged, qo_indptr, kv_indptr, kv_last_page_len, kv_indices, num_pages,
 *              float_workspace, int_workspace, stream) -> (status, batch, total_q); a ragged
 * plan reads neither kv_last_page_len nor kv_indices. */
static PyObject* prefill_plan(PyObject* Py_UNUSED(self), PyObject* const* args, Py_ssize_t nargs) {
  static const char* const names[] = {"qo_indptr", "kv_indptr", "kv_last_page_len", "kv_indices"};
  host_ints h[4];
  void *ws[2], *stream;
  size_t bytes[2];
  int32_t num_pages = 0;
  PyObject* result = NULL;
  if (check_nargs("prefill_plan", nargs, 10) || unbound((void*)S.prefill_paged)) return NULL;
  void* handle = PyLong_AsVoidPtr(args[0]);
  const int paged = PyObject_IsTrue(args[1]);
  if (paged < 0 || PyErr_Occurred() || int32_arg(args[6], "num_pages", &num_pages) < 0) return NULL;
  const int arrays = paged ? 4 : 2;
  if (read_all_ints(args + 2, names, arrays, h) == 0 && prefill_lengths(h, paged, args[4]) == 0 &&
      workspaces_arg(args + 7, ws, bytes, &stream) == 0) {
    const int32_t batch = (int32_t)(h[0].n - 1);
    const int status =
        paged ? S.prefill_paged(handle, h[0].data, h[1].data, batch, h[2].data, h[3].data, (int32_t)h[3].n, num_pages,
                                ws[0], bytes[0], ws[1], bytes[1], stream)
              : S.prefill_ragged(handle, h[0].data, h[1].data, batch, ws[0], bytes[0], ws[1], bytes[1], stream);
    result = Py_BuildValue("(iii)", status, batch, h[0].data[batch]);
  }
  release_ints(h, arrays);
  return result;
}

/* tensor(obj, name) -> (data, dtype, device_type, device_id, shape, strides, dtype_name): what
 * the runtime would be told, for tests. */
static PyObject* tensor(PyObject* Py_UNUSED(self), PyObject* args) {
  PyObject* obj;
  const char* name;
  aotinfer_tensor t;
  int torch_device = -1;
  if (!PyArg_ParseTuple(args, "Os", &obj, &name) || describe(obj, name, &t, &torch_device) < 0) return NULL;
  PyObject* shape = PyTuple_New(t.ndim);
  PyObject* strides = PyTuple_New(t.ndim);
  for (int i = 0; shape && strides && i < t.ndim; ++i) {
    PyTuple_SetItem(shape, i, PyLong_FromLongLong(t.shape[i]));
    PyTuple_SetItem(strides, i, PyLong_FromLongLong(t.strides[i]));
  }
  return Py_BuildValue("(NiiiNNs)", PyLong_FromVoidPtr(t.data), t.dtype, t.device_type, t.device_id, shape, strides,
                       t.dtype_name);
}

static void replace(PyObject** slot, PyObject* value) {
  PyObject* old = *slot;
  Py_XINCREF(value);
  *slot = value;
  Py_XDECREF(old);
}

/* bind(decode, prefill, merge, append, describe, stream_of, invalid_argument): the runtime's
 * checked entry points (addresses) and the Python helpers. */
static PyObject* bind(PyObject* Py_UNUSED(self), PyObject* args) {
  PyObject *decode, *prefill, *merge, *append, *describe_fn, *stream_of, *invalid;
  if (!PyArg_ParseTuple(args, "OOOOOOO", &decode, &prefill, &merge, &append, &describe_fn, &stream_of, &invalid)) return NULL;
  S.decode = (decode_fn)PyLong_AsVoidPtr(decode);
  S.prefill = (prefill_fn)PyLong_AsVoidPtr(prefill);
  S.merge = (merge_fn)PyLong_AsVoidPtr(merge);
  S.append = (append_fn)PyLong_AsVoidPtr(append);
  if (PyErr_Occurred()) return NULL;
  replace(&S.describe, describe_fn);
  replace(&S.stream_of, stream_of);
  replace(&S.invalid, invalid);
  Py_RETURN_NONE;
}

/* bind_plan(decode_plan, prefill_plan_paged, prefill_plan_ragged, host_int32): the runtime's
 * plan entry points (addresses) and plan()'s converter of other host metadata. */
static PyObject* bind_plan(PyObject* Py_UNUSED(self), PyObject* args) {
  PyObject *decode, *paged, *ragged, *host_int32;
  if (!PyArg_ParseTuple(args, "OOOO", &decode, &paged, &ragged, &host_int32)) return NULL;
  S.decode_plan = (decode_plan_fn)PyLong_AsVoidPtr(decode);
  S.prefill_paged = (prefill_paged_fn)PyLong_AsVoidPtr(paged);
  S.prefill_ragged = (prefill_ragged_fn)PyLong_AsVoidPtr(ragged);
  if (PyErr_Occurred()) return NULL;
  replace(&S.host_int32, host_int32);
  Py_RETURN_NONE;
}

/* bind_torch(torch.Tensor, {torch.dtype: aotinfer_dtype}, current_raw_stream(device_index),
 *            torch.Tensor.__dlpack_c_exchange_api__ or None) */
static PyObject* bind_torch(PyObject* Py_UNUSED(self), PyObject* args) {
  PyObject *tensor_type, *dtypes, *stream, *capsule;
  if (!PyArg_ParseTuple(args, "OO!OO", &tensor_type, &PyDict_Type, &dtypes, &stream, &capsule)) return NULL;
  if (!PyType_Check(tensor_type)) {
    PyErr_SetString(PyExc_TypeError, "bind_torch: expected torch.Tensor");
    return NULL;
  }
  replace(&S.torch_tensor, tensor_type);
  replace(&S.torch_dtypes, dtypes);
  replace(&S.torch_stream, stream);
  S.exchange = NULL;
  replace(&S.exchange_capsule, NULL);
  if (capsule != Py_None) {
    const dl_exchange_api* api = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
    if (!api) return NULL;
    /* A major version we do not know, or no DLTensor export: the attribute path serves. */
    if (api->header.version.major == 1 && api->dltensor_from_py_object_no_sync && api->current_work_stream) {
      replace(&S.exchange_capsule, capsule);
      S.exchange = api;
    }
  }
  Py_RETURN_NONE;
}

/* "dlpack-exchange", "attributes" or "" (not bound): how PyTorch GPU tensors are read. */
static PyObject* torch_path(PyObject* Py_UNUSED(self), PyObject* Py_UNUSED(unused)) {
  return PyUnicode_FromString(!S.torch_tensor ? "" : S.exchange ? "dlpack-exchange" : "attributes");
}

static PyMethodDef methods[] = {
    {"decode_run", (PyCFunction)(void (*)(void))decode_run, METH_FASTCALL, "BatchDecode.run's checked launch."},
    {"prefill_run", (PyCFunction)(void (*)(void))prefill_run, METH_FASTCALL, "BatchPrefill.run's checked launch."},
    {"merge_state", (PyCFunction)(void (*)(void))merge_state, METH_FASTCALL, "merge_state's checked launch."},
    {"append_paged_kv", (PyCFunction)(void (*)(void))append_paged_kv, METH_FASTCALL, "append_paged_kv's checked launch."},
    {"decode_plan", (PyCFunction)(void (*)(void))decode_plan, METH_FASTCALL, "BatchDecode.plan's call."},
    {"prefill_plan", (PyCFunction)(void (*)(void))prefill_plan, METH_FASTCALL, "BatchPrefill.plan's call."},
    {"tensor", tensor, METH_VARARGS, "How a tensor argument is described to the runtime."},
    {"bind", bind, METH_VARARGS, "Binds the runtime's entry points and the Python helpers."},
    {"bind_plan", bind_plan, METH_VARARGS, "Binds the runtime's plan entry points."},
    {"bind_torch", bind_torch, METH_VARARGS, "Enables the PyTorch fast path."},
    {"torch_path", torch_path, METH_NOARGS, "How PyTorch GPU tensors are read (\"\" until bound)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ext", "aotinfer's per-call path (see _ext.c).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__ext(void) {
  s_is_cuda = PyUnicode_InternFromString("is_cuda");
  s_is_cpu = PyUnicode_InternFromString("is_cpu");
  s_data_ptr = PyUnicode_InternFromString("data_ptr");
  s_dtype = PyUnicode_InternFromString("dtype");
  s_shape = PyUnicode_InternFromString("shape");
  s_stride = PyUnicode_InternFromString("stride");
  s_get_device = PyUnicode_InternFromString("get_device");
  if (!s_is_cuda || !s_is_cpu || !s_data_ptr || !s_dtype || !s_shape || !s_stride || !s_get_device) return NULL;
  return PyModule_Create(&module);
}
