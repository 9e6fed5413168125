// Operator schemas: one forward and one backward operator per algorithm, so profiler traces and
// the dispatcher name the algorithm that ran. Kernels register per backend in cpu/ and cuda/;
// autograd in autograd.cpp; fake (meta) implementations in torchconv/ops.py.
#include <Python.h>
#include <torch/library.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <pybind11/pybind11.h>

#include <array>
#include <vector>

#include "autograd.h"
#include "conv_shape.h"
#include "plans.h"
#include "precision.h"
#include "tuning.h"
#include "variant.h"
#include "weight_cache.h"
#include "workspace.h"

TORCH_LIBRARY(torchconv, m) {
  for (const char* algo : torchconv::kAlgorithmNames) {
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

// A process-wide switch's setter and getter as METH_O / METH_NOARGS functions: the argument's truth
// (a Python error where it has none).
template <void (*kSet)(bool)>
PyObject* set_switch(PyObject*, PyObject* arg) {
  const int on = PyObject_IsTrue(arg);
  if (on < 0) return nullptr;
  kSet(on != 0);
  Py_RETURN_NONE;
}

template <bool (*kGet)()>
PyObject* get_switch(PyObject*, PyObject*) {
  return PyBool_FromLong(kGet());
}

// c10 errors raised inside a raw C-API function become the matching Python exception.
template <typename F>
PyObject* translate_errors(F&& body) {
  try {
    return body();
  } catch (const c10::ValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
  } catch (const c10::TypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what_without_backtrace());
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

PyObject* set_tf32_source_reads(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (!name) return nullptr;
  return translate_errors([&]() -> PyObject* {
    torchconv::set_tf32_source_reads(name);
    Py_RETURN_NONE;
  });
}

PyObject* get_tf32_source_reads(PyObject*, PyObject*) {
  return PyUnicode_FromString(torchconv::tf32_source_reads_name().c_str());
}

PyObject* last_workspace_bytes(PyObject*, PyObject*) { return PyLong_FromLongLong(torchconv::last_workspace_bytes()); }
PyObject* weight_cache_size(PyObject*, PyObject*) { return PyLong_FromLongLong(torchconv::weight_cache_size()); }
PyObject* clear_weight_cache(PyObject*, PyObject*) {
  torchconv::clear_weight_cache();
  Py_RETURN_NONE;
}

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
// A sequence of integers as a vector; false (with a Python error set) when it is not one.
bool int_list(PyObject* obj, std::vector<int64_t>* out, const char* what) {
  PyObject* seq = PySequence_Fast(obj, what);
  if (!seq) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  out->clear();
  for (Py_ssize_t i = 0; i < n; ++i) {
    const long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return false;
    }
    out->push_back(v);
  }
  Py_DECREF(seq);
  return true;
}

c10::ScalarType dtype_from_name(const std::string& name) {
  static const std::pair<const char*, c10::ScalarType> kNames[] = {
      {"float32", at::kFloat}, {"float64", at::kDouble}, {"float16", at::kHalf}, {"bfloat16", at::kBFloat16},
      {"int8", at::kChar},     {"uint8", at::kByte},     {"int16", at::kShort}, {"int32", at::kInt},
      {"int64", at::kLong},    {"bool", at::kBool},      {"complex64", at::kComplexFloat},
      {"complex128", at::kComplexDouble}};
  for (const auto& [n, t] : kNames)
    if (name == n) return t;
  TORCH_CHECK_TYPE(false, "torchconv.conv2d: unsupported dtype ", name);
  return at::kFloat;
}

// unsupported_reason(algorithm, input_sizes, input_dtype, weight_sizes, weight_dtype, bias_sizes or
// None, stride, padding, dilation, groups, device, channels_last, deterministic) -> None or why
// not. The arguments are validated as the operators validate them (ValueError / TypeError naming
// the argument), so callers never do arithmetic on bad ones; then the plan registry answers.
PyObject* unsupported_reason(PyObject*, PyObject* args) {
  const char *algorithm = nullptr, *input_dtype = nullptr, *weight_dtype = nullptr, *device = nullptr;
  PyObject *input_sizes, *weight_sizes, *bias_sizes, *stride, *padding, *dilation;
  long long groups = 0;
  int channels_last = 0, deterministic = 0;
  if (!PyArg_ParseTuple(args, "sOsOsOOOOLspp", &algorithm, &input_sizes, &input_dtype, &weight_sizes, &weight_dtype,
                        &bias_sizes, &stride, &padding, &dilation, &groups, &device, &channels_last, &deterministic))
    return nullptr;
  std::vector<int64_t> in, wt, bs, st, pd, dl;
  if (!int_list(input_sizes, &in, "input sizes") || !int_list(weight_sizes, &wt, "weight sizes") ||
      (bias_sizes != Py_None && !int_list(bias_sizes, &bs, "bias sizes")) || !int_list(stride, &st, "stride") ||
      !int_list(padding, &pd, "padding") || !int_list(dilation, &dl, "dilation"))
    return nullptr;
  return translate_errors([&]() -> PyObject* {
    const torchconv::Algorithm algo = torchconv::algorithm_from_name(algorithm, "torchconv: algorithm");
    const auto meta = [](const std::vector<int64_t>& sizes, const char* dtype) {
      return at::empty(sizes, at::TensorOptions().dtype(dtype_from_name(dtype)).device(at::kMeta));
    };
    const at::Tensor x = meta(in, input_dtype), w = meta(wt, weight_dtype);
    std::optional<at::Tensor> b;
    if (bias_sizes != Py_None) b = meta(bs, weight_dtype);
    const torchconv::ConvShape shape =
        torchconv::check_conv2d_forward("conv2d", x, w, b, st, pd, dl, int64_t(groups));
    const c10::Device dev(device);
    const torchconv::ConvProblem problem{shape,      x.scalar_type(), channels_last != 0, dev.type(),
                                         dev.index(), deterministic != 0};
    const std::string reason = torchconv::unsupported_reason(algo, problem);
    if (reason.empty()) Py_RETURN_NONE;
    return PyUnicode_FromString(reason.c_str());
  });
}

PyObject* set_config(PyObject*, PyObject* args) {
  const char *algorithm = nullptr, *name = nullptr;
  if (!PyArg_ParseTuple(args, "ss", &algorithm, &name)) return nullptr;
  return translate_errors([&]() -> PyObject* {
    torchconv::set_forced_config(torchconv::algorithm_from_name(algorithm, "torchconv.set_config: algorithm"), name);
    Py_RETURN_NONE;
  });
}

PyObject* get_config(PyObject*, PyObject* arg) {
  const char* algorithm = PyUnicode_AsUTF8(arg);
  if (!algorithm) return nullptr;
  return translate_errors([&]() -> PyObject* {
    const auto algo = torchconv::algorithm_from_name(algorithm, "torchconv.get_config: algorithm");
    return PyUnicode_FromString(torchconv::forced_config_name(algo).c_str());
  });
}

PyObject* configs(PyObject*, PyObject* arg) {
  const char* algorithm = PyUnicode_AsUTF8(arg);
  if (!algorithm) return nullptr;
  return translate_errors([&]() -> PyObject* {
    const auto names = torchconv::configs(torchconv::algorithm_from_name(algorithm, "torchconv.configs: algorithm"));
    PyObject* tuple = PyTuple_New(Py_ssize_t(names.size()));
    for (size_t i = 0; i < names.size(); ++i) PyTuple_SET_ITEM(tuple, i, PyUnicode_FromString(names[i].c_str()));
    return tuple;
  });
}

PyObject* small_groups(PyObject*, PyObject* args) {
  long long reduced = 0, outputs = 0;
  if (!PyArg_ParseTuple(args, "LL", &reduced, &outputs)) return nullptr;
  return PyBool_FromLong(torchconv::small_groups(reduced, outputs));
}

PyObject* cpu_grouped(PyObject*, PyObject* args) {
  long long groups = 0, reduced = 0, outputs = 0, width = 0;
  int channels_last = 0;
  if (!PyArg_ParseTuple(args, "LLLLp", &groups, &reduced, &outputs, &width, &channels_last)) return nullptr;
  return PyBool_FromLong(torchconv::cpu_grouped(groups, reduced, outputs, width, channels_last != 0));
}

// Two Python ints (a tuple or list of them) into `out`; false, with no Python error set, otherwise.
bool int_pair(PyObject* obj, std::array<int64_t, 2>& out) {
  if (!PyTuple_Check(obj) && !PyList_Check(obj)) return false;
  if (PySequence_Fast_GET_SIZE(obj) != 2) return false;
  for (Py_ssize_t i = 0; i < 2; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(obj, i);
    if (!PyLong_Check(item) || PyBool_Check(item)) return false;
    const long long v = PyLong_AsLongLong(item);
    if (v == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    out[size_t(i)] = v;
  }
  return true;
}

// conv2d(algorithm, input, weight, bias, stride, padding, dilation, groups): the forward operator
// through the dispatcher, for eager calls from Python. A torch.ops call parses its arguments against
// the schema into boxed values (four int lists per convolution), host time that a launch-bound model
// pays on every layer. NotImplemented for anything that path must see
// instead: a tensor subclass or an active torch function mode (__torch_function__ overrides), and
// arguments of other types, so torch.ops gives its own error for them.
PyObject* conv2d(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 8) {
    PyErr_SetString(PyExc_TypeError, "torchconv._C.conv2d takes 8 positional arguments");
    return nullptr;
  }
  PyObject *input = args[1], *weight = args[2], *bias = args[3];
  std::array<int64_t, 2> stride{}, padding{}, dilation{};
  const bool plain = PyUnicode_Check(args[0]) && THPVariable_CheckExact(input) && THPVariable_CheckExact(weight) &&
                     (bias == Py_None || THPVariable_CheckExact(bias)) && !at::impl::torch_function_mode_enabled();
  if (!plain || !int_pair(args[4], stride) || !int_pair(args[5], padding) || !int_pair(args[6], dilation) ||
      !PyLong_Check(args[7]) || PyBool_Check(args[7]))
    Py_RETURN_NOTIMPLEMENTED;
  const long long groups = PyLong_AsLongLong(args[7]);
  if (groups == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    Py_RETURN_NOTIMPLEMENTED;
  }
  const char* name = PyUnicode_AsUTF8(args[0]);
  if (name == nullptr) return nullptr;
  const torchconv::Algorithm algorithm = torchconv::algorithm_from_name(name, "torchconv: algorithm");
  std::optional<at::Tensor> b;
  if (bias != Py_None) b = THPVariable_Unpack(bias);
  at::Tensor out;
  {
    pybind11::gil_scoped_release no_gil;  // as torch's own bindings call operators
    out = torchconv::call_conv2d(algorithm, THPVariable_Unpack(input), THPVariable_Unpack(weight), b, stride, padding,
                                 dilation, int64_t(groups));
  }
  return THPVariable_Wrap(std::move(out));
  END_HANDLE_TH_ERRORS
}

PyMethodDef methods[] = {
    {"conv2d", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(conv2d)), METH_FASTCALL,
     "conv2d(algorithm, input, weight, bias, stride, padding, dilation, groups): the algorithm's forward "
     "operator for an eager call, or NotImplemented where torch.ops must take it."},
    {"set_workspace_limit", set_workspace_limit, METH_O, "Set the per-call workspace limit in bytes."},
    {"get_workspace_limit", get_workspace_limit, METH_NOARGS, "Per-call workspace limit in bytes."},
    {"set_poison_outputs", set_switch<torchconv::set_poison_outputs>, METH_O,
     "Testing aid: fill every operator output with NaN before the kernel writes it."},
    {"set_split_sums_through_workspace", set_switch<torchconv::set_split_sums_through_workspace>, METH_O,
     "Testing aid: the tensor-core GEMM's split reductions add their sums through a workspace, not as clusters."},
    {"get_split_sums_through_workspace", get_switch<torchconv::split_sums_through_workspace>, METH_NOARGS,
     "Whether split_sums_through_workspace is on."},
    {"set_tf32_source_reads", set_tf32_source_reads, METH_O,
     "Testing aid: how the tensor-core GEMM reads float32 channels_last sources: 'rule', 'rounded_copies' "
     "(copied and rounded, or gathered)."},
    {"get_tf32_source_reads", get_tf32_source_reads, METH_NOARGS, "The tf32_source_reads setting's name."},
    {"set_variant", set_variant, METH_VARARGS, "set_variant(algorithm, name): choose an algorithm's variant."},
    {"get_variant", get_variant, METH_O, "The variant an algorithm runs."},
    {"variants", variants, METH_O, "An algorithm's variants, default first."},
    {"last_workspace_bytes", last_workspace_bytes, METH_NOARGS,
     "Scratch bytes the last operator call in the process allocated."},
    {"weight_cache_size", weight_cache_size, METH_NOARGS, "Entries in the per-weight transform cache."},
    {"clear_weight_cache", clear_weight_cache, METH_NOARGS, "Drop every cached filter transform."},
    {"set_tuning", set_switch<torchconv::set_tuning_enabled>, METH_O,
     "Time the candidate configs of a shape on first use (CSG) instead of a rule."},
    {"get_tuning", get_switch<torchconv::tuning_enabled>, METH_NOARGS, "Whether tuning is on."},
    {"tuned_choice_count", tuned_choice_count, METH_NOARGS, "Shapes with a tuned choice in this process."},
    {"clear_tuned_choices", clear_tuned_choices, METH_NOARGS, "Forget every tuned choice."},
    {"tuned_choices", tuned_choices, METH_NOARGS, "Tuned CSG plans by key (shape, dtype, GPU, pass): {key: plan}."},
    {"record_tuned_choice", record_tuned_choice, METH_VARARGS, "record_tuned_choice(key, plan) (torchconv.load_cache)."},
    {"last_choice", last_choice, METH_NOARGS,
     "The config and split the last call ran, per pass, e.g. 'forward:wide/splits=8'."},
    {"unsupported_reason", unsupported_reason, METH_VARARGS,
     "Why an algorithm cannot compute a convolution (None when it can), from the plan registry."},
    {"set_config", set_config, METH_VARARGS, "set_config(algorithm, name): force a tile config ('' for the rule)."},
    {"get_config", get_config, METH_O, "The config forced for an algorithm, '' when its rule picks."},
    {"configs", configs, METH_O, "An algorithm's named tile configs (its CUDA kernels')."},
    {"small_groups", small_groups, METH_VARARGS,
     "small_groups(channels_per_group, filters_per_group): whether direct's depthwise specialist takes them."},
    {"cpu_grouped", cpu_grouped, METH_VARARGS,
     "cpu_grouped(groups, channels_per_group, filters_per_group, output_width, channels_last): whether the CPU "
     "direct kernels along the channels take a grouped layer."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "torchconv kernels (operators register on import)", -1,
                          methods};

}  // namespace

// Importing torchconv._C loads this library, whose static initializers register the operators.
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module_def); }
