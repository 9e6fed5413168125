// Operator schemas: one forward and one backward operator per algorithm, so profiler traces and
// the dispatcher name the algorithm that ran. Kernels register per backend in cpu/ and cuda/;
// autograd in autograd.cpp; fake (meta) implementations in torchconv/ops.py.
#include <Python.h>
#include <torch/library.h>

#include "conv_shape.h"
#include "tuning.h"
#include "variant.h"
#include "weight_cache.h"
#include "workspace.h"

TORCH_LIBRARY(torchconv, m) {
  for (const char* algo : {"direct", "csg", "gemm", "winograd"}) {
    const std::string name = std::string("conv2d_") + algo;
    m.def((name +
           "(Tensor input, Tensor weight, Tensor? bias, int[2] stride, int[2] padding, int[2] dilation, "
           "int groups) -> Tensor")
              .c_str());
    // Masked-off gradients come back as empty tensors.
    m.def((name +
           "_backward(Tensor grad_output, Tensor input, Tensor weight, int[2] stride, int[2] padding, "
           "int[2] dilation, int groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)")
              .c_str());
  }
}

namespace {

PyObject* set_workspace_limit(PyObject*, PyObject* arg) {
  const long long bytes = PyLong_AsLongLong(arg);
  if (bytes == -1 && PyErr_Occurred()) return nullptr;
  if (bytes <= 0) {
    PyErr_SetString(PyExc_ValueError, "torchconv.set_workspace_limit: bytes must be a positive integer");
    return nullptr;
  }
  torchconv::set_workspace_limit_bytes(bytes);
  Py_RETURN_NONE;
}

PyObject* get_workspace_limit(PyObject*, PyObject*) { return PyLong_FromLongLong(torchconv::workspace_limit_bytes()); }

PyObject* set_poison_outputs(PyObject*, PyObject* arg) {
  const int on = PyObject_IsTrue(arg);
  if (on < 0) return nullptr;
  torchconv::set_poison_outputs(on != 0);
  Py_RETURN_NONE;
}

// c10 errors raised inside a raw C-API function become the matching Python exception.
template <typename F>
PyObject* translate_errors(F&& body) {
  try {
    return body();
  } catch (const c10::ValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  }
  return nullptr;
}

PyObject* set_variant(PyObject*, PyObject* args) {
  const char *algorithm = nullptr, *name = nullptr;
  if (!PyArg_ParseTuple(args, "ss", &algorithm, &name)) return nullptr;
  return translate_errors([&]() -> PyObject* {
    torchconv::set_variant(algorithm, name);
    Py_RETURN_NONE;
  });
}

PyObject* get_variant(PyObject*, PyObject* arg) {
  const char* algorithm = PyUnicode_AsUTF8(arg);
  if (!algorithm) return nullptr;
  return translate_errors([&]() -> PyObject* { return PyUnicode_FromString(torchconv::get_variant(algorithm).c_str()); });
}

PyObject* variants(PyObject*, PyObject* arg) {
  const char* algorithm = PyUnicode_AsUTF8(arg);
  if (!algorithm) return nullptr;
  return translate_errors([&]() -> PyObject* {
    const auto& names = torchconv::variants(algorithm);
    PyObject* tuple = PyTuple_New(Py_ssize_t(names.size()));
    for (size_t i = 0; i < names.size(); ++i) PyTuple_SET_ITEM(tuple, i, PyUnicode_FromString(names[i].c_str()));
    return tuple;
  });
}

PyObject* last_workspace_bytes(PyObject*, PyObject*) { return PyLong_FromLongLong(torchconv::last_workspace_bytes()); }
PyObject* weight_cache_size(PyObject*, PyObject*) { return PyLong_FromLongLong(torchconv::weight_cache_size()); }
PyObject* clear_weight_cache(PyObject*, PyObject*) {
  torchconv::clear_weight_cache();
  Py_RETURN_NONE;
}

PyObject* set_tuning(PyObject*, PyObject* arg) {
  const int on = PyObject_IsTrue(arg);
  if (on < 0) return nullptr;
  torchconv::set_tuning_enabled(on != 0);
  Py_RETURN_NONE;
}
PyObject* get_tuning(PyObject*, PyObject*) { return PyBool_FromLong(torchconv::tuning_enabled()); }
PyObject* tuned_choice_count(PyObject*, PyObject*) { return PyLong_FromLongLong(torchconv::tuned_choice_count()); }
PyObject* clear_tuned_choices(PyObject*, PyObject*) {
  torchconv::clear_tuned_choices();
  Py_RETURN_NONE;
}
PyObject* tuned_choices(PyObject*, PyObject*) {
  PyObject* dict = PyDict_New();
  if (!dict) return nullptr;
  for (const auto& [key, choice] : torchconv::tuned_choice_list()) {
    PyObject* value = PyUnicode_FromString(choice.c_str());
    if (!value || PyDict_SetItemString(dict, key.c_str(), value) < 0) {
      Py_XDECREF(value);
      Py_DECREF(dict);
      return nullptr;
    }
    Py_DECREF(value);
  }
  return dict;
}
PyObject* record_tuned_choice(PyObject*, PyObject* args) {
  const char *key = nullptr, *choice = nullptr;
  if (!PyArg_ParseTuple(args, "ss", &key, &choice)) return nullptr;
  torchconv::record_tuned_choice(key, choice);
  Py_RETURN_NONE;
}
PyObject* last_choice(PyObject*, PyObject*) { return PyUnicode_FromString(torchconv::last_choice().c_str()); }
PyObject* set_direct_tile(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (!name) return nullptr;
  return translate_errors([&]() -> PyObject* {
    torchconv::set_forced_direct_tile(name);
    Py_RETURN_NONE;
  });
}
PyObject* get_direct_tile(PyObject*, PyObject*) {
  return translate_errors([&]() -> PyObject* {  // a bad TORCHCONV_DIRECT_TILE raises on first use
    const int forced = torchconv::forced_direct_tile();
    return PyUnicode_FromString(forced < 0 ? "" : torchconv::kDirectTileNames[forced]);
  });
}
PyObject* set_direct_grad_input(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (!name) return nullptr;
  return translate_errors([&]() -> PyObject* {
    torchconv::set_forced_direct_grad_input(name);
    Py_RETURN_NONE;
  });
}
PyObject* get_direct_grad_input(PyObject*, PyObject*) {
  const int forced = torchconv::forced_direct_grad_input();
  return PyUnicode_FromString(forced < 0 ? "" : torchconv::kDirectGradInputNames[forced]);
}

PyMethodDef methods[] = {
    {"set_workspace_limit", set_workspace_limit, METH_O, "Set the per-call workspace limit in bytes."},
    {"get_workspace_limit", get_workspace_limit, METH_NOARGS, "Per-call workspace limit in bytes."},
    {"set_poison_outputs", set_poison_outputs, METH_O,
     "Testing aid: fill every operator output with NaN before the kernel writes it."},
    {"set_variant", set_variant, METH_VARARGS, "set_variant(algorithm, name): choose an algorithm's variant."},
    {"get_variant", get_variant, METH_O, "The variant an algorithm runs."},
    {"variants", variants, METH_O, "An algorithm's variants, default first."},
    {"last_workspace_bytes", last_workspace_bytes, METH_NOARGS,
     "Scratch bytes the last operator call in the process allocated."},
    {"weight_cache_size", weight_cache_size, METH_NOARGS, "Entries in the per-weight transform cache."},
    {"clear_weight_cache", clear_weight_cache, METH_NOARGS, "Drop every cached filter transform."},
    {"set_tuning", set_tuning, METH_O, "Time the candidate configs of a shape on first use (CSG) instead of a rule."},
    {"get_tuning", get_tuning, METH_NOARGS, "Whether tuning is on."},
    {"tuned_choice_count", tuned_choice_count, METH_NOARGS, "Shapes with a tuned choice in this process."},
    {"clear_tuned_choices", clear_tuned_choices, METH_NOARGS, "Forget every tuned choice."},
    {"tuned_choices", tuned_choices, METH_NOARGS, "Tuned CSG plans by key (shape, dtype, GPU, pass): {key: plan}."},
    {"record_tuned_choice", record_tuned_choice, METH_VARARGS, "record_tuned_choice(key, plan) (torchconv.load_cache)."},
    {"last_choice", last_choice, METH_NOARGS,
     "The config and split the last CSG or direct launch ran, per pass, e.g. 'forward:wide/splits=8'."},
    {"set_direct_tile", set_direct_tile, METH_O,
     "Force the direct kernel's float tile config (wide or small; '' for the rule), to time or test each."},
    {"get_direct_tile", get_direct_tile, METH_NOARGS, "The forced direct tile config, '' when the rule picks."},
    {"set_direct_grad_input", set_direct_grad_input, METH_O,
     "Force how the direct kernel runs a strided grad_input (phases or gather; '' for the rule)."},
    {"get_direct_grad_input", get_direct_grad_input, METH_NOARGS,
     "The forced strided grad_input path of the direct kernel, '' when the rule picks."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "torchconv kernels (operators register on import)", -1,
                          methods};

}  // namespace

// Importing torchconv._C loads this library, whose static initializers register the operators.
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module_def); }
