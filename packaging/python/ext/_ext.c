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
 * described by aotinfer._tensor.describe (DLPack, __cuda_array_interface__). */
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "aotinfer/tensor.h"

/* describe_all fills a tensors struct as an array of its aotinfer_tensor members. */
_Static_assert(sizeof(aotinfer_batch_decode_tensors) == 10 * sizeof(aotinfer_tensor), "decode tensors are 10 tensors");
_Static_assert(sizeof(aotinfer_batch_prefill_tensors) == 10 * sizeof(aotinfer_tensor), "prefill tensors are 10 tensors");
_Static_assert(sizeof(aotinfer_merge_state_tensors) == 6 * sizeof(aotinfer_tensor), "merge tensors are 6 tensors");
_Static_assert(sizeof(aotinfer_append_paged_kv_tensors) == 9 * sizeof(aotinfer_tensor), "append tensors are 9 tensors");

typedef int (*decode_fn)(const void*, const aotinfer_batch_decode_tensors*, const aotinfer_attention_scalars*, void*);
typedef int (*prefill_fn)(const void*, const aotinfer_batch_prefill_tensors*, const aotinfer_attention_scalars*, void*);
typedef int (*merge_fn)(const void*, const aotinfer_merge_state_tensors*, void*);
typedef int (*append_fn)(const void*, const aotinfer_append_paged_kv_tensors*, const char*, void*);

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
enum { DL_CUDA = 2 };

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
} S;

static PyObject *s_is_cuda, *s_data_ptr, *s_dtype, *s_shape, *s_stride, *s_get_device;

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
  if (ndim > AOTINFER_TENSOR_MAX_DIMS) {
    PyErr_Format(S.invalid, "%s: has %zd dimensions; aotinfer takes at most %d", name, ndim, AOTINFER_TENSOR_MAX_DIMS);
    return -1;
  }
  if (PySequence_Size(strides) != ndim) {
    PyErr_Format(S.invalid, "%s: its strides and shape differ in length", name);
    return -1;
  }
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

/* A torch tensor on a GPU: 1 when described, 0 when it is something else, -1 on error. */
static int describe_torch(PyObject* obj, const char* name, aotinfer_tensor* t, int* torch_device) {
  PyObject* is_cuda = PyObject_GetAttr(obj, s_is_cuda);
  if (!is_cuda) return -1;
  const int cuda = is_cuda == Py_True;
  Py_DECREF(is_cuda);
  if (!cuda) return 0;

  PyObject* ptr = PyObject_CallMethodObjArgs(obj, s_data_ptr, NULL);
  if (!ptr) return -1;
  t->data = PyLong_AsVoidPtr(ptr);
  Py_DECREF(ptr);
  PyObject* device = PyObject_CallMethodObjArgs(obj, s_get_device, NULL);
  if (!device) return -1;
  t->device_type = AOTINFER_DEVICE_CUDA;
  t->device_id = (int32_t)PyLong_AsLong(device);
  Py_DECREF(device);
  *torch_device = t->device_id;

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

/* A torch tensor on a GPU through DLPack's exchange API: 1 when described, 0 when it is
 * something the slower paths describe better (another device, an unknown dtype: they name it),
 * -1 on error. */
static int describe_exchange(PyObject* obj, const char* name, aotinfer_tensor* t, int* torch_device) {
  dl_tensor d;
  if (S.exchange->dltensor_from_py_object_no_sync(obj, &d) != 0) return -1;
  if (d.device.device_type != DL_CUDA) return 0;
  t->dtype = dtype_of(d.dtype);
  if (t->dtype == AOTINFER_DTYPE_OTHER) return 0;
  if (d.ndim > AOTINFER_TENSOR_MAX_DIMS) {
    PyErr_Format(S.invalid, "%s: has %d dimensions; aotinfer takes at most %d", name, (int)d.ndim, AOTINFER_TENSOR_MAX_DIMS);
    return -1;
  }
  t->data = (char*)d.data + d.byte_offset;
  t->device_type = AOTINFER_DEVICE_CUDA;
  t->device_id = d.device.device_id;
  t->ndim = d.ndim;
  int64_t step = 1;
  for (int i = d.ndim - 1; i >= 0; --i) {
    t->shape[i] = d.shape[i];
    t->strides[i] = d.strides ? d.strides[i] : step;
    step *= d.shape[i];
  }
  *torch_device = t->device_id;
  return 1;
}

static int describe(PyObject* obj, const char* name, aotinfer_tensor* t, int* torch_device) {
  memset(t, 0, sizeof *t);
  if (obj == Py_None) return 0;
  if (S.torch_tensor && PyObject_TypeCheck(obj, (PyTypeObject*)S.torch_tensor)) {
    const int done = S.exchange ? describe_exchange(obj, name, t, torch_device) : describe_torch(obj, name, t, torch_device);
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

static int scalars_arg(PyObject* const* args, aotinfer_attention_scalars* s) {
  float* floats[] = {&s->sm_scale, &s->logits_soft_cap, &s->rope_scale, &s->rope_theta, &s->k_scale, &s->v_scale};
  for (int i = 0; i < 6; ++i) {
    *floats[i] = (float)PyFloat_AsDouble(args[i]);
    if (*floats[i] == -1.0f && PyErr_Occurred()) return -1;
  }
  s->window_left = (int32_t)PyLong_AsLong(args[6]);
  return s->window_left == -1 && PyErr_Occurred() ? -1 : 0;
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
 *            q_positions, sinks, sm_scale, logits_soft_cap, rope_scale, rope_theta, k_scale,
 *            v_scale, window_left, stream) -> status */
static PyObject* decode_run(PyObject* Py_UNUSED(self), PyObject* const* args, Py_ssize_t nargs) {
  static const char* const names[] = {"q", "k_pages", "v_pages", "kv_indptr", "kv_indices", "kv_last_page_len", "o", "lse", "q_positions", "sinks"};
  aotinfer_batch_decode_tensors t;
  aotinfer_attention_scalars s;
  int torch_device = -1;
  void* stream = NULL;
  if (check_nargs("decode_run", nargs, 19) || unbound((void*)S.decode)) return NULL;
  void* handle = PyLong_AsVoidPtr(args[0]);
  if (PyErr_Occurred() || describe_all(args + 1, names, 10, &t.q, &torch_device) || scalars_arg(args + 11, &s) ||
      stream_arg(args[18], torch_device, &stream))
    return NULL;
  /* The GIL is kept: a launch takes microseconds, less than releasing and taking it back. */
  return PyLong_FromLong(S.decode(handle, &t, &s, stream));
}

/* prefill_run(handle, q, k, v, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, o, lse,
 *             sinks, sm_scale, logits_soft_cap, rope_scale, rope_theta, k_scale, v_scale,
 *             window_left, stream) -> status */
static PyObject* prefill_run(PyObject* Py_UNUSED(self), PyObject* const* args, Py_ssize_t nargs) {
  static const char* const names[] = {"q", "k", "v", "qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len", "o", "lse", "sinks"};
  aotinfer_batch_prefill_tensors t;
  aotinfer_attention_scalars s;
  int torch_device = -1;
  void* stream = NULL;
  if (check_nargs("prefill_run", nargs, 19) || unbound((void*)S.prefill)) return NULL;
  void* handle = PyLong_AsVoidPtr(args[0]);
  if (PyErr_Occurred() || describe_all(args + 1, names, 10, &t.q, &torch_device) || scalars_arg(args + 11, &s) ||
      stream_arg(args[18], torch_device, &stream))
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
    {"tensor", tensor, METH_VARARGS, "How a tensor argument is described to the runtime."},
    {"bind", bind, METH_VARARGS, "Binds the runtime's entry points and the Python helpers."},
    {"bind_torch", bind_torch, METH_VARARGS, "Enables the PyTorch fast path."},
    {"torch_path", torch_path, METH_NOARGS, "How PyTorch GPU tensors are read (\"\" until bound)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ext", "aotinfer's per-call path (see _ext.c).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__ext(void) {
  s_is_cuda = PyUnicode_InternFromString("is_cuda");
  s_data_ptr = PyUnicode_InternFromString("data_ptr");
  s_dtype = PyUnicode_InternFromString("dtype");
  s_shape = PyUnicode_InternFromString("shape");
  s_stride = PyUnicode_InternFromString("stride");
  s_get_device = PyUnicode_InternFromString("get_device");
  if (!s_is_cuda || !s_data_ptr || !s_dtype || !s_shape || !s_stride || !s_get_device) return NULL;
  return PyModule_Create(&module);
}
