// _finegemm_fastcall: CPython functions that call a launch through its address:
// - call_prepared: a prepared launch of the host library (fg_launch_prepared_<family>(handle,
//   workspace, counters, stream)); rebind_prepared: a copy of one at other tensors' addresses
//   (fg_rebind_prepared_<family>);
// - launch_kernel: the driver's cuLaunchKernel, for the small kernels rendered in finegemm/ops
//   (e.g. the contiguous layout check) whose argument block the caller built once;
// - tensor_signature: the host fast paths' key of a call's tensors (address, shape, strides,
//   dtype, device of each) in one bytes object, read through PyTorch's stable C accessors
//   (aoti_torch_get_*) instead of ~20 Python attribute calls (~0.15-0.25 us each);
//   tensor_layout: the same without the addresses (their second level's key), and the addresses.
//
// Why: a cached GEMM call's host cost is a few microseconds, and a ctypes call with converted
// arguments is ~0.4-1 us of it (argument objects, libffi). A METH_FASTCALL function reads four
// integers and calls the pointer directly (~0.05 us). Built by jit.compiler.build_python_shim for
// the running interpreter; when it cannot be built (no Python headers) the callers keep ctypes.
// The GIL is released around the launch, as ctypes does, so other Python threads may run.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <cstring>

namespace {

using PreparedLaunchFn = int (*)(uint64_t, void*, void*, uint64_t);

// An unsigned 64-bit integer argument; None reads as 0 (a null workspace / counters pointer).
bool read_u64(PyObject* obj, uint64_t* out) {
  if (obj == Py_None) {
    *out = 0;
    return true;
  }
  *out = PyLong_AsUnsignedLongLong(obj);
  return !(*out == static_cast<uint64_t>(-1) && PyErr_Occurred());
}

// call_prepared(function_address, handle, workspace, counters, stream) -> int (the CUresult).
PyObject* call_prepared(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 5) {
    PyErr_Format(PyExc_TypeError, "call_prepared: expected 5 arguments, got %zd", nargs);
    return nullptr;
  }
  uint64_t v[5];
  for (int i = 0; i < 5; ++i) {
    if (!read_u64(args[i], &v[i])) return nullptr;
  }
  if (v[0] == 0) {
    PyErr_SetString(PyExc_ValueError, "call_prepared: null function address");
    return nullptr;
  }
  const auto fn = reinterpret_cast<PreparedLaunchFn>(static_cast<uintptr_t>(v[0]));
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = fn(v[1], reinterpret_cast<void*>(static_cast<uintptr_t>(v[2])),
          reinterpret_cast<void*>(static_cast<uintptr_t>(v[3])), v[4]);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(rc);
}

using RebindPreparedFn = int (*)(uint64_t, const uint64_t*, int, uint64_t*);

// rebind_prepared(function_address, handle, *pointers) -> int: a prepared launch re-pointed at other
// tensors by the host library's fg_rebind_prepared_<family>(handle, pointers, count, &out) (None
// reads as a null pointer); the new handle, or 0 where the library refused (the caller then
// encodes the launch anew, which reports any real error).
PyObject* rebind_prepared(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  constexpr Py_ssize_t kMaxPointers = 8;
  if (nargs < 2 || nargs > 2 + kMaxPointers) {
    PyErr_Format(PyExc_TypeError, "rebind_prepared: expected 2 to %zd arguments, got %zd", 2 + kMaxPointers, nargs);
    return nullptr;
  }
  uint64_t address, handle, pointers[kMaxPointers];
  if (!read_u64(args[0], &address) || !read_u64(args[1], &handle)) return nullptr;
  for (Py_ssize_t i = 2; i < nargs; ++i) {
    if (!read_u64(args[i], &pointers[i - 2])) return nullptr;
  }
  if (address == 0) {
    PyErr_SetString(PyExc_ValueError, "rebind_prepared: null function address");
    return nullptr;
  }
  const auto fn = reinterpret_cast<RebindPreparedFn>(static_cast<uintptr_t>(address));
  uint64_t out = 0;
  const int rc = fn(handle, pointers, static_cast<int>(nargs - 2), &out);
  return PyLong_FromUnsignedLongLong(rc == 0 ? out : 0u);
}

using CuLaunchKernelFn = int (*)(void* f, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                                 unsigned block_y, unsigned block_z, unsigned shared_bytes, void* stream,
                                 void** params, void** extra);

// An unsigned 32-bit launch dimension (a value past 32 bits is an OverflowError, not a wrap).
bool read_u32(PyObject* obj, unsigned* out) {
  const unsigned long v = PyLong_AsUnsignedLong(obj);
  if (v == static_cast<unsigned long>(-1) && PyErr_Occurred()) return false;
  if (v > 0xffffffffUL) {
    PyErr_SetString(PyExc_OverflowError, "launch_kernel: a launch dimension exceeds 32 bits");
    return false;
  }
  *out = static_cast<unsigned>(v);
  return true;
}

// launch_kernel(cuLaunchKernel_address, function, grid_x, block_x, shared_bytes, stream, params)
// -> int (the CUresult): a one-dimensional launch; params is the address of the kernel's argument
// pointer array (void*[]), which the driver copies before returning.
PyObject* launch_kernel(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 7) {
    PyErr_Format(PyExc_TypeError, "launch_kernel: expected 7 arguments, got %zd", nargs);
    return nullptr;
  }
  uint64_t launch_address, function, stream, params;
  unsigned grid_x, block_x, shared_bytes;
  if (!read_u64(args[0], &launch_address) || !read_u64(args[1], &function) || !read_u32(args[2], &grid_x) ||
      !read_u32(args[3], &block_x) || !read_u32(args[4], &shared_bytes) || !read_u64(args[5], &stream) ||
      !read_u64(args[6], &params)) {
    return nullptr;
  }
  if (launch_address == 0 || function == 0 || params == 0) {
    PyErr_SetString(PyExc_ValueError, "launch_kernel: null launch address, function or params");
    return nullptr;
  }
  const auto launch = reinterpret_cast<CuLaunchKernelFn>(static_cast<uintptr_t>(launch_address));
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = launch(reinterpret_cast<void*>(static_cast<uintptr_t>(function)), grid_x, 1, 1, block_x, 1, 1, shared_bytes,
              reinterpret_cast<void*>(static_cast<uintptr_t>(stream)),
              reinterpret_cast<void**>(static_cast<uintptr_t>(params)), nullptr);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(rc);
}

// ---- tensor_signature -------------------------------------------------------------------------
// A torch.Tensor's Python object (THPVariable) holds its at::Tensor, one TensorImpl pointer, a
// few words past the object header: at byte 16 in current PyTorch (`at::Tensor cdata`), at 24
// where it was a c10::MaybeOwned<at::Tensor> (a flag, then the pointer). A pointer to that word
// is an at::Tensor*, which is what the stable C shim's AtenTensorHandle is. The offset is not
// assumed: jit/tensor_signature.py finds it (impl_word against Tensor._cdata), configures it, and
// checks every field against the Python accessors on probe tensors (switching it off again on any
// difference). Unconfigured, and for any object that is not exactly a torch.Tensor or
// torch.nn.Parameter, tensor_signature answers None and the caller builds its key in Python.
using AtenGetPtrFn = int32_t (*)(void* tensor, void** out);
using AtenGetI64Fn = int32_t (*)(void* tensor, int64_t* out);
using AtenGetI64PtrFn = int32_t (*)(void* tensor, int64_t** out);
using AtenGetI32Fn = int32_t (*)(void* tensor, int32_t* out);

struct TensorAbi {
  Py_ssize_t offset = 0;  // 0: not configured
  PyTypeObject* tensor_type = nullptr;
  PyTypeObject* parameter_type = nullptr;
  AtenGetPtrFn data_ptr = nullptr;
  AtenGetI64Fn dim = nullptr;
  AtenGetI64PtrFn sizes = nullptr;
  AtenGetI64PtrFn strides = nullptr;
  AtenGetI32Fn dtype = nullptr;
  AtenGetI32Fn device_type = nullptr;
  AtenGetI32Fn device_index = nullptr;
};
TensorAbi g_abi;

constexpr int kMaxSignatureTensors = 8;
constexpr int64_t kMaxSignatureDims = 8;
constexpr int kWordsPerTensor = 5 + 2 * kMaxSignatureDims;  // dim, address, dtype, device type, index, sizes, strides

// impl_word(tensor, offset) -> int: the pointer-sized word at `offset` bytes into the object (the
// calibration's probe; offsets past the THPVariable header's first words are refused).
PyObject* impl_word(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "impl_word: expected 2 arguments, got %zd", nargs);
    return nullptr;
  }
  const Py_ssize_t offset = PyLong_AsSsize_t(args[1]);
  if (offset == -1 && PyErr_Occurred()) return nullptr;
  if (offset < static_cast<Py_ssize_t>(sizeof(PyObject)) || offset > 32 || offset % sizeof(void*) != 0 ||
      Py_TYPE(args[0])->tp_basicsize < offset + static_cast<Py_ssize_t>(sizeof(void*))) {
    PyErr_SetString(PyExc_ValueError, "impl_word: offset outside the object's first words");
    return nullptr;
  }
  void* word;
  std::memcpy(&word, reinterpret_cast<const char*>(args[0]) + offset, sizeof(word));
  return PyLong_FromUnsignedLongLong(static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(word)));
}

// configure_tensor_abi(offset, tensor_type, parameter_type, data_ptr, dim, sizes, strides, dtype,
// device_type, device_index): the addresses of the aoti_torch_get_* accessors; offset 0 turns
// tensor_signature off.
PyObject* configure_tensor_abi(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 10) {
    PyErr_Format(PyExc_TypeError, "configure_tensor_abi: expected 10 arguments, got %zd", nargs);
    return nullptr;
  }
  const Py_ssize_t offset = PyLong_AsSsize_t(args[0]);
  if (offset == -1 && PyErr_Occurred()) return nullptr;
  if (offset == 0) {
    g_abi = TensorAbi{};
    Py_RETURN_NONE;
  }
  if (!PyType_Check(args[1]) || !PyType_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "configure_tensor_abi: tensor_type and parameter_type must be types");
    return nullptr;
  }
  uint64_t fn[7];
  for (int i = 0; i < 7; ++i) {
    if (!read_u64(args[3 + i], &fn[i])) return nullptr;
    if (fn[i] == 0) {
      PyErr_SetString(PyExc_ValueError, "configure_tensor_abi: null accessor address");
      return nullptr;
    }
  }
  TensorAbi abi;
  abi.offset = offset;
  // The types stay referenced by torch for the process's life; held here as borrowed pointers.
  abi.tensor_type = reinterpret_cast<PyTypeObject*>(args[1]);
  abi.parameter_type = reinterpret_cast<PyTypeObject*>(args[2]);
  abi.data_ptr = reinterpret_cast<AtenGetPtrFn>(static_cast<uintptr_t>(fn[0]));
  abi.dim = reinterpret_cast<AtenGetI64Fn>(static_cast<uintptr_t>(fn[1]));
  abi.sizes = reinterpret_cast<AtenGetI64PtrFn>(static_cast<uintptr_t>(fn[2]));
  abi.strides = reinterpret_cast<AtenGetI64PtrFn>(static_cast<uintptr_t>(fn[3]));
  abi.dtype = reinterpret_cast<AtenGetI32Fn>(static_cast<uintptr_t>(fn[4]));
  abi.device_type = reinterpret_cast<AtenGetI32Fn>(static_cast<uintptr_t>(fn[5]));
  abi.device_index = reinterpret_cast<AtenGetI32Fn>(static_cast<uintptr_t>(fn[6]));
  g_abi = abi;
  Py_RETURN_NONE;
}

// One tensor's words (dim, address, dtype, device type, device index, sizes, strides); the
// number written, or -1 where the object is not a plain tensor or an accessor fails.
int signature_words(PyObject* obj, int64_t* out) {
  const PyTypeObject* type = Py_TYPE(obj);
  if (type != g_abi.tensor_type && type != g_abi.parameter_type) return -1;
  void* handle = reinterpret_cast<char*>(obj) + g_abi.offset;
  int64_t dim;
  void* ptr;
  int64_t* sizes;
  int64_t* strides;
  int32_t dtype, device_type, device_index;
  if (g_abi.dim(handle, &dim) != 0 || dim < 0 || dim > kMaxSignatureDims) return -1;
  if (g_abi.data_ptr(handle, &ptr) != 0 || g_abi.sizes(handle, &sizes) != 0 || g_abi.strides(handle, &strides) != 0 ||
      g_abi.dtype(handle, &dtype) != 0 || g_abi.device_type(handle, &device_type) != 0 ||
      g_abi.device_index(handle, &device_index) != 0) {
    return -1;
  }
  out[0] = dim;
  out[1] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(ptr));
  out[2] = dtype;
  out[3] = device_type;
  out[4] = device_index;
  std::memcpy(out + 5, sizes, static_cast<size_t>(dim) * sizeof(int64_t));
  std::memcpy(out + 5 + dim, strides, static_cast<size_t>(dim) * sizeof(int64_t));
  return static_cast<int>(5 + 2 * dim);
}

// tensor_signature(*tensors) -> bytes or None: every tensor's words, one after the other (each
// starts with its rank, so different tensor lists never give equal bytes); None when the ABI is
// not configured, a tensor is not a plain torch.Tensor / Parameter (subclasses may override
// what the accessors read), or there are more than 8 tensors or 8 dims.
PyObject* tensor_signature(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (g_abi.offset == 0 || nargs > kMaxSignatureTensors) Py_RETURN_NONE;
  int64_t words[kMaxSignatureTensors * kWordsPerTensor];
  int n = 0;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    const int w = signature_words(args[i], words + n);
    if (w < 0) Py_RETURN_NONE;
    n += w;
  }
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(words), static_cast<Py_ssize_t>(n) * 8);
}

// tensor_layout(*tensors) -> (bytes, addresses) or None: tensor_signature's words with each
// address word replaced by the address modulo 16, and the addresses as a tuple of ints. Equal
// layouts mean equal shapes, strides, dtypes, devices and 16-byte alignment classes: everything
// the dense calls' rules read except where the tensors lie (api/_validate.MovedCalls, the host
// fast paths' second level, re-checks only that).
PyObject* tensor_layout(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (g_abi.offset == 0 || nargs > kMaxSignatureTensors) Py_RETURN_NONE;
  int64_t words[kMaxSignatureTensors * kWordsPerTensor];
  uint64_t addresses[kMaxSignatureTensors];
  int n = 0;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    const int w = signature_words(args[i], words + n);
    if (w < 0) Py_RETURN_NONE;
    addresses[i] = static_cast<uint64_t>(words[n + 1]);
    words[n + 1] = static_cast<int64_t>(addresses[i] & 15u);
    n += w;
  }
  PyObject* layout = PyBytes_FromStringAndSize(reinterpret_cast<const char*>(words), static_cast<Py_ssize_t>(n) * 8);
  PyObject* where = layout != nullptr ? PyTuple_New(nargs) : nullptr;
  if (where == nullptr) {
    Py_XDECREF(layout);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    PyObject* address = PyLong_FromUnsignedLongLong(static_cast<unsigned long long>(addresses[i]));
    if (address == nullptr) {
      Py_DECREF(layout);
      Py_DECREF(where);
      return nullptr;
    }
    PyTuple_SET_ITEM(where, i, address);
  }
  PyObject* out = PyTuple_Pack(2, layout, where);
  Py_DECREF(layout);
  Py_DECREF(where);
  return out;
}

PyMethodDef kMethods[] = {
    {"call_prepared", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call_prepared)), METH_FASTCALL,
     "call_prepared(function_address, handle, workspace, counters, stream) -> int"},
    {"rebind_prepared", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(rebind_prepared)), METH_FASTCALL,
     "rebind_prepared(function_address, handle, *pointers) -> int"},
    {"launch_kernel", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(launch_kernel)), METH_FASTCALL,
     "launch_kernel(cuLaunchKernel_address, function, grid_x, block_x, shared_bytes, stream, params) -> int"},
    {"tensor_signature", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(tensor_signature)),
     METH_FASTCALL, "tensor_signature(*tensors) -> bytes or None"},
    {"tensor_layout", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(tensor_layout)), METH_FASTCALL,
     "tensor_layout(*tensors) -> (bytes, addresses) or None"},
    {"impl_word", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(impl_word)), METH_FASTCALL,
     "impl_word(tensor, offset) -> int"},
    {"configure_tensor_abi", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(configure_tensor_abi)),
     METH_FASTCALL,
     "configure_tensor_abi(offset, tensor_type, parameter_type, data_ptr, dim, sizes, strides, dtype, "
     "device_type, device_index)"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_finegemm_fastcall", "finegemm's launch calls", -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__finegemm_fastcall(void) { return PyModule_Create(&kModule); }
