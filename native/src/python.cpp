// Python-object entry points: DLPack capsules and the C exchange API, read in C.
//
// The library does not link libpython (one wheel serves every Python version): the few
// CPython functions needed are looked up in the running process with dlsym. These entry
// points are called through ctypes.PyDLL or as CPython builtins, so the GIL is held.
#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "guard.h"
#include "runtime.h"

namespace pcr {
namespace {

struct PyObject;

// DLPack producer structures (dlpack.h 1.x layout).
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned*);
  uint64_t flags;
  DLTensor dl_tensor;
};
constexpr uint64_t kFlagReadOnly = 1;
constexpr uint64_t kFlagIsCopied = 2;  // DLPack 1.1: the producer exported a copy
struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  DLPackExchangeAPIHeader* prev_api;
};
struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out);
  int (*current_work_stream)(int device_type, int32_t device_id, void** out_stream);
};

struct PyApi {
  void* (*capsule_get_pointer)(PyObject*, const char*);
  const char* (*capsule_get_name)(PyObject*);
  PyObject* (*object_type)(PyObject*);
  PyObject* (*get_attr)(PyObject*, const char*);
  void (*inc_ref)(PyObject*);
  void (*dec_ref)(PyObject*);
  void (*err_clear)();
  long (*tuple_size)(PyObject*);  // Py_ssize_t
  PyObject* (*tuple_item)(PyObject*, long);
  long (*long_value)(PyObject*);
  void* (*long_pointer)(PyObject*);
  PyObject* (*long_from)(long);
  double (*float_value)(PyObject*);
  PyObject* (*err_occurred)();
  void* (*save_thread)();  // PyThreadState*: the GIL released, and taken back
  void (*restore_thread)(void*);
  PyObject* capsule_type;
  PyObject* none;
  bool ok;
};

const PyApi& py() {
  static const PyApi api = [] {
    PyApi a{};
    bool found = true;
    auto load = [&found](auto& field, const char* name) {  // a function or an object
      using T = std::remove_reference_t<decltype(field)>;
      void* symbol = dlsym(RTLD_DEFAULT, name);
      if constexpr (std::is_pointer_v<T> && std::is_function_v<std::remove_pointer_t<T>>)
        field = reinterpret_cast<T>(symbol);
      else
        field = static_cast<T>(symbol);
      found = found && symbol;
    };
    load(a.capsule_get_pointer, "PyCapsule_GetPointer");
    load(a.capsule_get_name, "PyCapsule_GetName");
    load(a.object_type, "PyObject_Type");
    load(a.get_attr, "PyObject_GetAttrString");
    load(a.inc_ref, "Py_IncRef");
    load(a.dec_ref, "Py_DecRef");
    load(a.err_clear, "PyErr_Clear");
    load(a.save_thread, "PyEval_SaveThread");
    load(a.restore_thread, "PyEval_RestoreThread");
    load(a.tuple_size, "PyTuple_Size");
    load(a.tuple_item, "PyTuple_GetItem");
    load(a.long_value, "PyLong_AsLong");
    load(a.long_pointer, "PyLong_AsVoidPtr");
    load(a.long_from, "PyLong_FromLong");
    load(a.float_value, "PyFloat_AsDouble");
    load(a.err_occurred, "PyErr_Occurred");
    load(a.capsule_type, "PyCapsule_Type");
    load(a.none, "_Py_NoneStruct");
    a.ok = found;
    return a;
  }();
  return api;
}

// type -> its DLPackExchangeAPI (or null). Holds a reference to each type so that a
// cached address is never reused by another type.
std::mutex g_types_mutex;
std::vector<std::pair<PyObject*, const DLPackExchangeAPI*>> g_types;

const DLPackExchangeAPI* exchange_api_locked(PyObject* type);

const DLPackExchangeAPI* exchange_api(PyObject* type) {
  // Most calls see the same few types: a per-thread memo of the last ones avoids the lock.
  thread_local std::pair<PyObject*, const DLPackExchangeAPI*> recent[4];
  thread_local int next = 0;
  for (auto& e : recent)
    if (e.first == type) return e.second;
  const DLPackExchangeAPI* found = exchange_api_locked(type);
  recent[next] = {type, found};
  next = (next + 1) % 4;
  return found;
}

const DLPackExchangeAPI* exchange_api_locked(PyObject* type) {
  {
    std::lock_guard<std::mutex> lock(g_types_mutex);
    for (auto& e : g_types)
      if (e.first == type) return e.second;
  }
  const PyApi& P = py();
  const DLPackExchangeAPI* api = nullptr;
  PyObject* cap = P.get_attr(type, "__dlpack_c_exchange_api__");
  if (cap) {
    api = static_cast<const DLPackExchangeAPI*>(P.capsule_get_pointer(cap, "dlpack_exchange_api"));
    if (api && (api->header.version.major != 1 || !api->dltensor_from_py_object_no_sync))
      api = nullptr;
    P.dec_ref(cap);
  }
  P.err_clear();
  std::lock_guard<std::mutex> lock(g_types_mutex);
  P.inc_ref(type);
  g_types.emplace_back(type, api);
  return api;
}

struct Operand {
  DLTensor dl{};
  const DLPackExchangeAPI* api = nullptr;
  bool read_only = false;
  bool copied = false;  // writes would not reach the producer's array
  bool present = false;
};

int ingest(void* object, const char* name, Operand* out) {
  const PyApi& P = py();
  auto* obj = static_cast<PyObject*>(object);
  if (!obj || obj == P.none) return PCR_OK;
  out->present = true;
  PyObject* type = P.object_type(obj);
  P.dec_ref(type);  // types outlive their instances; the borrowed pointer stays valid
  if (type == P.capsule_type) {
    const char* cname = P.capsule_get_name(obj);
    if (cname && std::strcmp(cname, "dltensor_versioned") == 0) {
      auto* mt = static_cast<DLManagedTensorVersioned*>(P.capsule_get_pointer(obj, cname));
      if (!mt) return set_error(PCR_ERR_PYTHON, "%s: its DLPack capsule holds no tensor", name);
      if (mt->version.major != 1)
        return set_error(PCR_ERR_INVALID_ARGUMENT,
                         "%s: DLPack version %u.%u is not supported (1.x is)", name,
                         mt->version.major, mt->version.minor);
      out->dl = mt->dl_tensor;
      out->read_only = mt->flags & kFlagReadOnly;
      out->copied = mt->flags & kFlagIsCopied;
      return check_tensors({{&out->dl, name}});
    }
    if (cname && std::strcmp(cname, "dltensor") == 0) {
      auto* mt = static_cast<DLManagedTensor*>(P.capsule_get_pointer(obj, cname));
      if (!mt) return set_error(PCR_ERR_PYTHON, "%s: its DLPack capsule holds no tensor", name);
      out->dl = mt->dl_tensor;
      return check_tensors({{&out->dl, name}});
    }
    if (cname && std::strncmp(cname, "used_", 5) == 0)
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "%s is a DLPack capsule that was already consumed; a capsule can be "
                       "used once: export the tensor again",
                       name);
    return set_error(PCR_ERR_INVALID_DTYPE, "%s is a capsule named '%s', not a DLPack tensor", name,
                     cname ? cname : "");
  }
  out->api = exchange_api(type);
  if (!out->api)
    return set_error(PCR_ERR_INVALID_DTYPE,
                     "%s is neither a DLPack capsule nor an object whose type offers "
                     "__dlpack_c_exchange_api__",
                     name);
  // A failing producer sets its Python exception (PCR_ERR_PYTHON), or should: the message
  // speaks for one that does not.
  if (out->api->dltensor_from_py_object_no_sync(obj, &out->dl) != 0)
    return set_error(PCR_ERR_PYTHON, "%s: its producer's DLPack exchange API failed to export it",
                     name);
  return check_tensors({{&out->dl, name}});
}

// An output as a producer exported it: writable, and the array itself (not a copy).
int check_output(const Operand& op, const char* name) {
  if (op.read_only)
    return set_error(PCR_ERR_READ_ONLY,
                     "%s is read-only (its producer exported it so, e.g. a numpy array with "
                     "writeable=False); pass a writable output",
                     name);
  if (op.copied)
    return set_error(PCR_ERR_READ_ONLY,
                     "%s was exported as a copy (DLPack's IS_COPIED flag): what the library "
                     "wrote would not reach the array; pass an output the producer shares",
                     name);
  return PCR_OK;
}

// The operands of one call: a, b, c, d, then the extras' bias, scale_a, scale_b, aux, amax,
// scale_d (c and the extras optional), named as the call names them.
constexpr int kOperands = 10;
constexpr const char* kOperandNames[kOperands] = {"a",       "b",       "c",   "d",    "bias",
                                                  "scale_a", "scale_b", "aux", "amax", "scale_d"};

// The extras tuple (bias, scale_a, scale_b, activation, math, activation_alpha,
// activation_beta, conv, aux, amax, scale_d), or None / NULL; conv is None or the tuple of
// pcr_conv's 8 ints.
struct PyExtras {
  void* tensors[6] = {};  // bias, scale_a, scale_b, aux, amax, scale_d
  pcr_extras fields{};
  pcr_conv conv{};
  bool present = false;
};

// pcr_conv from its tuple (op, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w,
// groups).
int read_conv(PyObject* obj, pcr_conv* out) {
  const PyApi& P = py();
  int32_t* fields[] = {&out->op,       &out->pad_h,      &out->pad_w,      &out->stride_h,
                       &out->stride_w, &out->dilation_h, &out->dilation_w, &out->groups};
  bool ok = P.tuple_size(obj) == 8;
  for (int i = 0; ok && i < 8; ++i) {
    const long v = P.long_value(P.tuple_item(obj, i));
    ok = !(v == -1 && P.err_occurred()) && v >= INT32_MIN && v <= INT32_MAX;
    *fields[i] = int32_t(v);
  }
  if (ok) return PCR_OK;
  P.err_clear();
  return set_error(PCR_ERR_INVALID_ARGUMENT,
                   "extras: conv must be None or 8 ints (op, pad_h, pad_w, stride_h, stride_w, "
                   "dilation_h, dilation_w, groups)");
}

int read_extras(void* object, PyExtras* out) {
  const PyApi& P = py();
  auto* obj = static_cast<PyObject*>(object);
  if (!obj || obj == P.none) return PCR_OK;
  long n = P.tuple_size(obj);
  if (n != 11) {
    P.err_clear();
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "extras must be the tuple (bias, scale_a, scale_b, activation, math, "
                     "activation_alpha, activation_beta, conv, aux, amax, scale_d)");
  }
  for (int i = 0; i < 3; ++i) out->tensors[i] = P.tuple_item(obj, i);
  for (int i = 3; i < 6; ++i) out->tensors[i] = P.tuple_item(obj, i + 5);
  const long activation = P.long_value(P.tuple_item(obj, 3));
  const long math = P.long_value(P.tuple_item(obj, 4));
  if ((activation == -1 || math == -1) && P.err_occurred()) {  // not ints, or past a long
    P.err_clear();
    return set_error(PCR_ERR_INVALID_ARGUMENT, "extras: activation and math must be ints");
  }
  const double act_alpha = P.float_value(P.tuple_item(obj, 5));
  const double act_beta = P.float_value(P.tuple_item(obj, 6));
  if ((act_alpha == -1.0 || act_beta == -1.0) && P.err_occurred()) {
    P.err_clear();
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "extras: the activation's parameters must be floats");
  }
  out->fields.activation = int32_t(activation);
  out->fields.math = int32_t(math);
  out->fields.activation_alpha = act_alpha;
  out->fields.activation_beta = act_beta;
  auto* conv = static_cast<PyObject*>(P.tuple_item(obj, 7));
  if (conv != P.none) {
    if (int st = read_conv(conv, &out->conv)) return st;
    out->fields.conv = &out->conv;
  }
  out->present = true;
  return PCR_OK;
}

const DLTensor* dl_or_null(const Operand& op) { return op.present ? &op.dl : nullptr; }

// The pcr_extras of ingested operands (null when the call has none).
const pcr_extras* extras_of(PyExtras& x, const Operand ops[kOperands]) {
  if (!x.present) return nullptr;
  x.fields.bias = dl_or_null(ops[4]);
  x.fields.scale_a = dl_or_null(ops[5]);
  x.fields.scale_b = dl_or_null(ops[6]);
  x.fields.aux = dl_or_null(ops[7]);
  x.fields.amax = dl_or_null(ops[8]);
  x.fields.scale_d = dl_or_null(ops[9]);
  return &x.fields;
}

int ingest_all(void* a, void* b, void* c, void* d, const PyExtras& x, Operand ops[kOperands]) {
  if (!py().ok)
    return set_error(PCR_ERR_INTERNAL,
                     "the Python-object entry points need a CPython process; use pcr_gemm");
  void* const objects[kOperands] = {
      a,           b, c, d, x.tensors[0], x.tensors[1], x.tensors[2], x.tensors[3], x.tensors[4],
      x.tensors[5]};
  for (int i = 0; i < kOperands; ++i)
    if (int st = ingest(objects[i], kOperandNames[i], &ops[i])) return st;
  if (!ops[0].present || !ops[1].present || !ops[3].present)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "a, b and d are required");
  for (int i : {3, 7, 8})  // the outputs: d, aux, amax
    if (ops[i].present)
      if (int st = check_output(ops[i], kOperandNames[i])) return st;
  return PCR_OK;
}

// The entry points with an extras object: the tuple read, then every operand ingested.
int ingest_call(void* a, void* b, void* c, void* d, void* extras, Operand ops[kOperands],
                PyExtras* x) {
  if (int st = read_extras(extras, x)) return st;
  return ingest_all(a, b, c, d, *x, ops);
}

// The operand whose producer names the work stream: the first GPU operand (d first: the
// output's stream orders the write) whose exchange API offers a current stream.
const Operand* stream_source(const Operand* ops) {
  for (int i : {3, 0, 1, 2})
    if (ops[i].api && ops[i].api->current_work_stream && ops[i].dl.device.device_type == kDLCUDA)
      return &ops[i];
  return nullptr;
}

// `api`'s current work stream on `device` when flags ask for it; else `stream` unchanged.
int api_stream(const DLPackExchangeAPI* api, int device, int32_t flags, void** stream) {
  if (!(flags & PCR_STREAM_FROM_PRODUCER) || !api) return PCR_OK;
  if (api->current_work_stream(kDLCUDA, device, stream) != 0)
    return set_error(PCR_ERR_PYTHON,
                     "the producer's DLPack exchange API gave no current stream for cuda:%d",
                     device);
  return PCR_OK;
}

int producer_stream(const Operand* ops, int32_t flags, void** stream) {
  const Operand* src = stream_source(ops);
  return src ? api_stream(src->api, src->dl.device.device_id, flags, stream) : PCR_OK;
}

// A plan on its bound tensors, on the producer's current stream when flags ask for it.
int run_bound(pcr_plan* plan, int32_t flags, void* stream) {
  auto* api = static_cast<const DLPackExchangeAPI*>(plan->stream_api);
  if (int st = api_stream(api, plan->problem.device, flags, &stream)) return st;
  return plan_run(plan, nullptr, nullptr, nullptr, nullptr, nullptr,
                  static_cast<cudaStream_t>(stream));
}

// ---- the builtins' work --------------------------------------------------------------
// What gemm, plan_run and plan_launch do; they have no C function of their own.

int py_gemm(void* a, void* b, void* c, void* d, double alpha, double beta, void* extras,
            int32_t kernel, int32_t flags, void* stream, pcr_problem* problem) {
  clear_error();
  Operand ops[kOperands];
  PyExtras x;
  int st = ingest_call(a, b, c, d, extras, ops, &x);
  if (st != PCR_OK) return st;
  if ((st = producer_stream(ops, flags, &stream))) return st;
  auto run = [&] {
    return gemm(&ops[0].dl, &ops[1].dl, dl_or_null(ops[2]), &ops[3].dl, alpha, beta,
                extras_of(x, ops), kernel, stream, problem);
  };
  // Host (numpy) operands make the call synchronize: other Python threads run meanwhile
  // (and a Python host callback queued on the stream can). Nothing below touches Python.
  bool host = false;
  for (const Operand& op : ops)
    host = host || (op.present && (op.dl.device.device_type == kDLCPU ||
                                   op.dl.device.device_type == kDLCUDAHost));
  if (!host) return run();
  const PyApi& P = py();
  void* thread = P.save_thread();
  st = run();
  P.restore_thread(thread);
  return st;
}

int py_plan_run(pcr_plan* plan, void* a, void* b, void* c, void* d, void* extras, int32_t flags,
                void* stream) {
  clear_error();
  if (!plan) return set_error(PCR_ERR_INVALID_ARGUMENT, "plan is NULL");
  const PyApi& P = py();
  auto none = [&](void* x) { return !x || x == static_cast<void*>(P.none); };
  if (none(a) && none(b) && none(c) && none(d) && none(extras))
    return run_bound(plan, flags, stream);
  Operand ops[kOperands];
  PyExtras x;
  int st = ingest_call(a, b, c, d, extras, ops, &x);
  if (st != PCR_OK) return st;
  if ((st = producer_stream(ops, flags, &stream))) return st;
  return plan_run(plan, &ops[0].dl, &ops[1].dl, dl_or_null(ops[2]), &ops[3].dl, extras_of(x, ops),
                  static_cast<cudaStream_t>(stream));
}

int py_plan_launch(pcr_plan* plan) {
  clear_error();
  if (!plan) return set_error(PCR_ERR_INVALID_ARGUMENT, "plan is NULL");
  return run_bound(plan, PCR_STREAM_FROM_PRODUCER, nullptr);
}

// ---- builtins (pcr_py_builtins) ------------------------------------------------------

// CPython's PyMethodDef and METH_FASTCALL (stable since 3.7)
struct MethodDef {
  const char* name;
  void* function;
  int flags;
  const char* doc;
};
constexpr int kFastCall = 0x0080;
using Args = PyObject* const*;

// Reads a builtin's positional arguments; false (with the error set) on a wrong count or type.
struct ArgReader {
  Args args;
  long count;
  const char* name;
  bool ok = true;

  bool expect(long n) {
    if (count == n) return true;
    set_error(PCR_ERR_INVALID_ARGUMENT, "%s takes %ld arguments, got %ld", name, n, count);
    return ok = false;
  }
  // a Python float, int or None (0) read as `T` through `read`
  template <class T, class Read>
  T number(int i, Read read) {
    if (args[i] == py().none) return T{};
    T v = read(args[i]);
    if (py().err_occurred()) {
      py().err_clear();
      set_error(PCR_ERR_INVALID_ARGUMENT, "%s: argument %d is not a number", name, i);
      ok = false;
    }
    return v;
  }
  double real(int i) { return number<double>(i, py().float_value); }
  int32_t integer(int i) { return int32_t(number<long>(i, py().long_value)); }
  void* pointer(int i) { return number<void*>(i, py().long_pointer); }
};

// A builtin's result: its status as an int. An error status may come with a Python
// exception set (PCR_ERR_PYTHON: the producer's own); the builtin then returns NULL, so
// that CPython raises that exception as it stands (as ctypes.PyDLL does for the pcr_py_*
// functions) instead of a SystemError for a value returned with an exception set. The
// success path asks CPython nothing more.
PyObject* reply(int st) {
  if (st != PCR_OK && py().err_occurred()) return nullptr;
  return py().long_from(st);
}

// Each builtin runs behind the exported functions' guard (guard.h).
PyObject* builtin_gemm(PyObject*, Args args, long n) {
  return reply(guarded([&]() -> int {
    clear_error();
    ArgReader r{args, n, "gemm"};
    if (!r.expect(10)) return PCR_ERR_INVALID_ARGUMENT;
    double alpha = r.real(4), beta = r.real(5);
    int32_t kernel = r.integer(7), flags = r.integer(8);
    void* stream = r.pointer(9);
    if (!r.ok) return PCR_ERR_INVALID_ARGUMENT;
    return py_gemm(args[0], args[1], args[2], args[3], alpha, beta, args[6], kernel, flags, stream,
                   nullptr);
  }));
}

PyObject* builtin_plan_run(PyObject*, Args args, long n) {
  return reply(guarded([&]() -> int {
    clear_error();
    ArgReader r{args, n, "plan_run"};
    if (!r.expect(8)) return PCR_ERR_INVALID_ARGUMENT;
    auto* plan = static_cast<pcr_plan*>(r.pointer(0));
    int32_t flags = r.integer(6);
    void* stream = r.pointer(7);
    if (!r.ok) return PCR_ERR_INVALID_ARGUMENT;
    return py_plan_run(plan, args[1], args[2], args[3], args[4], args[5], flags, stream);
  }));
}

PyObject* builtin_plan_launch(PyObject*, Args args, long n) {
  return reply(guarded([&]() -> int {
    clear_error();
    ArgReader r{args, n, "plan_launch"};
    if (!r.expect(1)) return PCR_ERR_INVALID_ARGUMENT;
    auto* plan = static_cast<pcr_plan*>(r.pointer(0));
    if (!r.ok) return PCR_ERR_INVALID_ARGUMENT;
    return py_plan_launch(plan);
  }));
}

const MethodDef kBuiltins[] = {
    {"gemm", reinterpret_cast<void*>(builtin_gemm), kFastCall, nullptr},
    {"plan_run", reinterpret_cast<void*>(builtin_plan_run), kFastCall, nullptr},
    {"plan_launch", reinterpret_cast<void*>(builtin_plan_launch), kFastCall, nullptr},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

int py_plan_create(void* a, void* b, void* c, void* d, double alpha, double beta, void* extras,
                   int32_t kernel, pcr_problem* problem, pcr_plan** plan) {
  clear_error();
  Operand ops[kOperands];
  PyExtras x;
  int st = ingest_call(a, b, c, d, extras, ops, &x);
  if (st != PCR_OK) return st;
  if (!plan) return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_py_plan_create: plan is NULL");
  st = plan_create(&ops[0].dl, &ops[1].dl, dl_or_null(ops[2]), &ops[3].dl, alpha, beta,
                   extras_of(x, ops), kernel, problem, plan);
  if (st == PCR_OK) {
    const Operand* src = stream_source(ops);
    (*plan)->stream_api = src ? src->api : nullptr;
  }
  return st;
}

int py_grouped_gemm(void** a, void** b, void** c, void** d, void** extras, int32_t count,
                    double alpha, double beta, int32_t kernel, int32_t flags, void* stream,
                    pcr_problem* problem) {
  clear_error();
  if (count < 0 || (count > 0 && (!a || !b || !d)))
    return set_error(PCR_ERR_INVALID_ARGUMENT, "grouped GEMM: need count >= 0 and a, b, d");
  std::vector<Operand> ops(size_t(count) * kOperands);
  std::vector<PyExtras> xs(static_cast<size_t>(count));
  std::vector<const pcr_extras*> group_extras(size_t(count), nullptr);
  std::vector<const DLTensor*> views(size_t(count) * 4, nullptr);
  for (int g = 0; g < count; ++g) {
    Operand* op = &ops[size_t(g) * kOperands];
    int st = read_extras(extras ? extras[g] : nullptr, &xs[g]);
    if (st == PCR_OK) st = ingest_all(a[g], b[g], c ? c[g] : nullptr, d[g], xs[g], op);
    if (st != PCR_OK) return set_error(st, "group %d: %s", g, std::string(last_error()).c_str());
    for (int i = 0; i < 4; ++i) views[size_t(i) * count + g] = dl_or_null(op[i]);
    group_extras[g] = extras_of(xs[g], op);
  }
  // the producer's stream of the first group (all groups run in one launch)
  if (count > 0)
    if (int st = producer_stream(ops.data(), flags, &stream)) return st;
  return grouped_gemm(views.data(), views.data() + count, views.data() + 2 * size_t(count),
                      views.data() + 3 * size_t(count), count, alpha, beta,
                      extras ? group_extras.data() : nullptr, kernel, stream, problem);
}

int py_moe_gemm(void* x, void* w, void* offsets, void* out, double alpha, void* extras,
                int32_t kernel, int32_t flags, void* stream, pcr_problem* problem) {
  clear_error();
  Operand ops[kOperands];
  PyExtras xs;
  // x, w, out as a, b, d (required, d writable); offsets in c's slot
  int st = ingest_call(x, w, offsets, out, extras, ops, &xs);
  if (st != PCR_OK) return st;
  if ((st = producer_stream(ops, flags, &stream))) return st;
  if (!ops[2].present) return set_error(PCR_ERR_INVALID_ARGUMENT, "offsets is required");
  return moe_gemm(&ops[0].dl, &ops[1].dl, &ops[2].dl, &ops[3].dl, alpha, extras_of(xs, ops), kernel,
                  stream, problem);
}

const void* py_builtins() { return py().ok ? kBuiltins : nullptr; }

namespace {

// pcr_py_im2col's and pcr_py_col2im's arguments: the tensor read (a's slot), the optional
// one added (c's) and the one written (d's, whose producer's stream goes first), the
// convolution's tuple, and the stream the work goes to.
int ingest_unfolding(void* in, const char* in_name, void* add, void* out, const char* out_name,
                     void* conv, int32_t flags, const char* what, Operand ops[kOperands],
                     pcr_conv* cv, void** stream) {
  clear_error();
  if (!py().ok)
    return set_error(PCR_ERR_INTERNAL,
                     "the Python-object entry points need a CPython process; use %s", what);
  int st;
  if ((st = ingest(in, in_name, &ops[0])) || (st = ingest(add, "c", &ops[2])) ||
      (st = ingest(out, out_name, &ops[3])) || (st = read_conv(static_cast<PyObject*>(conv), cv)))
    return st;
  if (!ops[0].present || !ops[3].present)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "%s: %s and %s are required", what, in_name,
                     out_name);
  if (int st = check_output(ops[3], out_name)) return st;
  return producer_stream(ops, flags, stream);
}

}  // namespace

int py_im2col(void* x, void* cols, void* conv, int32_t r, int32_t s, int32_t flags, void* stream) {
  Operand ops[kOperands];
  pcr_conv cv{};
  if (int st = ingest_unfolding(x, "x", nullptr, cols, "cols", conv, flags, "pcr_im2col", ops, &cv,
                                &stream))
    return st;
  return im2col(&ops[0].dl, &ops[3].dl, &cv, r, s, static_cast<cudaStream_t>(stream));
}

int py_quantize(void* x, void* q, void* scale, int32_t granularity, int32_t dynamic, int32_t flags,
                void* stream) {
  clear_error();
  if (!py().ok)
    return set_error(PCR_ERR_INTERNAL,
                     "the Python-object entry points need a CPython process; use pcr_quantize");
  Operand ops[kOperands];
  // x read (a's slot), the scales (c's: read when static, written when dynamic), q written
  int st;
  if ((st = ingest(x, "x", &ops[0])) || (st = ingest(scale, "scale", &ops[2])) ||
      (st = ingest(q, "q", &ops[3])))
    return st;
  if (!ops[0].present || !ops[2].present || !ops[3].present)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "quantize: x, q and scale are required");
  if ((st = check_output(ops[3], "q")) || (dynamic && (st = check_output(ops[2], "scale"))))
    return st;
  if ((st = producer_stream(ops, flags, &stream))) return st;
  return quantize(&ops[0].dl, &ops[3].dl, &ops[2].dl, granularity, dynamic,
                  static_cast<cudaStream_t>(stream));
}

int py_col2im(void* cols, void* dx, void* c, void* conv, int32_t r, int32_t s, double alpha,
              double beta, int32_t flags, void* stream) {
  Operand ops[kOperands];
  pcr_conv cv{};
  if (int st =
          ingest_unfolding(cols, "cols", c, dx, "dx", conv, flags, "pcr_col2im", ops, &cv, &stream))
    return st;
  return col2im(&ops[0].dl, &ops[3].dl, dl_or_null(ops[2]), &cv, r, s, alpha, beta,
                static_cast<cudaStream_t>(stream));
}

int py_describe(void* a, void* b, void* c, void* d, double alpha, double beta, void* extras,
                pcr_problem* out, pcr_verdict* verdicts, int32_t count) {
  clear_error();
  Operand ops[kOperands];
  PyExtras x;
  int st = ingest_call(a, b, c, d, extras, ops, &x);
  if (st != PCR_OK) return st;
  return describe_judged(&ops[0].dl, &ops[1].dl, dl_or_null(ops[2]), &ops[3].dl, alpha, beta,
                         extras_of(x, ops), out, verdicts, count);
}

}  // namespace pcr
