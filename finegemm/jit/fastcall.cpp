// _finegemm_fastcall: one CPython function that calls a prepared launch of the host library
// (fg_launch_prepared_<family>(handle, workspace, counters, stream)) through its address.
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

PyMethodDef kMethods[] = {
    {"call_prepared", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(call_prepared)), METH_FASTCALL,
     "call_prepared(function_address, handle, workspace, counters, stream) -> int"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_finegemm_fastcall", "finegemm's prepared-launch call", -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__finegemm_fastcall(void) { return PyModule_Create(&kModule); }
