// _finegemm_fastcall: CPython functions that call a launch through its address:
// - call_prepared: a prepared launch of the host library (fg_launch_prepared_<family>(handle,
//   workspace, counters, stream));
// - launch_kernel: the driver's cuLaunchKernel, for the small kernels rendered in finegemm/ops
//   (e.g. the contiguous layout check) whose argument block the caller built once.
//
// Why: a cached GEMM call's host cost is a few microseconds, and a ctypes call with converted
// arguments is ~0.4-1 us of it (argument objects, libffi). A METH_FASTCALL function reads four
// integers and calls the pointer directly (~0.05 us). Built by jit.compiler.build_python_shim for
// the running interpreter; when it cannot be built (no Python headers) the callers keep ctypes.
// The GIL is released around the launch, as ctypes does, so other Python threads may run.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>

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

PyMethodDef kMethods[] = {
    {"call_prepared", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call_prepared)), METH_FASTCALL,
     "call_prepared(function_address, handle, workspace, counters, stream) -> int"},
    {"launch_kernel", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(launch_kernel)), METH_FASTCALL,
     "launch_kernel(cuLaunchKernel_address, function, grid_x, block_x, shared_bytes, stream, params) -> int"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_finegemm_fastcall", "finegemm's launch calls", -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__finegemm_fastcall(void) { return PyModule_Create(&kModule); }
