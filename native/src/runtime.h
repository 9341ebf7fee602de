// Internal declarations shared by the runtime's translation units: each section names
// the file (room) that defines it; abi.cpp exports their work through the C ABI.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kernel.h"
#include "pycutlass_rt_tables.h"

namespace pcr {

// The calling thread's error message (pcr_last_error): emptied, and read. Neither throws.
void clear_error() noexcept;
const char* last_error() noexcept;

// Bytes per element of a pcr_dtype (fp8 and int8: 1).
inline int esize_of(int dtype) {
  switch (dtype) {
    case PCR_F16:
    case PCR_BF16:
      return 2;
    case PCR_F32:
    case PCR_S32:
    case PCR_TF32:
      return 4;
    case PCR_F64:
      return 8;
    default:
      return 1;
  }
}

// ---- registry (generated registry.cpp) ----
extern const KernelEntry* const kKernels[];
extern const int kKernelCount;
extern const char kBuildJson[];

// ---- the catalogue as the ABI reports it (catalogue.cpp) ----
// pcr_build_info's JSON (built on first use), pcr_kernel_info and pcr_kernel_find.
const char* build_info();
int kernel_info(int32_t kernel, pcr_kernel_desc* out);
int kernel_find(const char* name, int32_t* kernel);

// ---- devices (device.cpp) ----
struct DeviceInfo {
  int cc;  // e.g. 90
  int sm_count;
};
// PCR_OK and the device's properties (cached), or PCR_ERR_NO_DEVICE / PCR_ERR_CUDA.
int device_info(int device, DeviceInfo* out);
// Makes `device` current for the scope, restoring the caller's device afterwards.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  int set(int device);
  ~DeviceGuard();

 private:
  int previous_ = -1;
};
int cuda_status(cudaError_t e, const char* what);

// Whether launches may be programmatic dependents at all (kernels/kernel.h,
// programmatic_dependent); PYCUTLASS_RT_PDL=0 turns them off for the process.
bool pdl_enabled();
// Whether the build holds an image of kernel `k` that loads on `device` (cached).
int kernel_runs_on(int k, int device, bool* runs);
// The device queries of the ABI (pcr_driver_version, ... of the same names).
int driver_version(int32_t* version);
int runtime_version(int32_t* version);
int device_count(int32_t* count);
int device_name(int32_t device, char* buf, size_t size);
int device_cc(int32_t device, int32_t* cc, int32_t* sm_count);
int pointer_device(const void* ptr, int32_t* device);
int stream_wait(cudaStream_t consumer, cudaStream_t producer);

// ---- operands and problems (problem.cpp) ----
// A validated matrix operand: rows x cols with element strides s0 (rows), s1 (cols), in a
// batch of `batch` matrices sb elements apart (sb == 0: one matrix shared by the batch).
struct Matrix {
  char* ptr = nullptr;  // data + byte_offset
  int64_t rows = 0, cols = 0, s0 = 0, s1 = 0;
  int64_t batch = 1, sb = 0;
  int dtype = PCR_DTYPE_INVALID;
  int esize = 0;
  int device_type = 0, device_id = 0;
  void transpose();
  // Byte range [lo, hi) touched by the elements; empty when the matrix is empty.
  void extent(uintptr_t* lo, uintptr_t* hi) const;
};
// Whether two matrices' byte ranges share memory (empty ones share none).
bool overlaps(const Matrix& x, const Matrix& y);
// Whether they share an element: overlaps(), except that two row-major views of one row
// pitch share one only if their rows and their columns within the pitch both meet.
bool share_elements(const Matrix& x, const Matrix& y);

// What a launch needs beyond the pcr_problem: the operands in canonical orientation.
struct Bound {
  Matrix a, b, c, d;  // c.ptr == nullptr without C
  Matrix bias;        // broadcast view over d's extent: strides (0, 1) or (1, 0); or empty
  // float32 scales of canonical d's rows and columns (pcr_problem scale_m, scale_n): one
  // contiguous vector of that extent, one value (rows = cols = 1), or empty
  Matrix scale_m, scale_n;
  double alpha = 1.0, beta = 0.0;
  ActivationArgs activation;  // the extras' activation (activation_of)
  Matrix aux;                 // the pre-activation's destination (PCR_EPI_AUX), or empty
  Matrix amax;                // max |d|'s destination (PCR_EPI_AUX; one float32), or empty
  Matrix scale_d;             // the output scale (pcr_problem out_scale; one float32), or empty
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0, ldaux = 0;
  ConvArgs conv{};  // a convolution's geometry (kind PCR_OP_GEMM for a GEMM)
};

// What every producer's tensor must be before anything reads its dimensions: a rank the
// library can hold (0..32) and, with dimensions, a shape to read them from (NULL
// tensors pass: the caller says which are required).
int check_tensors(std::initializer_list<std::pair<const DLTensor*, const char*>> tensors);
// `grouped`: the pcr_grouped entry point the GEMM is a group of (PCR_GROUPED_NONE: a GEMM
// of its own), which decides whether grouped or other kernels make its dtypes known.
int describe(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
             double alpha, double beta, const pcr_extras* extras, pcr_problem* problem,
             Bound* bound, int grouped = PCR_GROUPED_NONE);
// describe's work for a convolution (extras.conv set; conv.cpp): the tensors as flat
// matrices (rows: every dimension but the last) in `bound`, the geometry in bound->conv.
int describe_conv(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
                  double alpha, double beta, const pcr_extras& extras, pcr_problem* problem,
                  Bound* bound);
// pcr_im2col: x and cols checked (x packed NHWC on a GPU, cols its N*P*Q unfolded rows
// in x's dtype), then unfolded on `stream`.
int im2col(const DLTensor* x, const DLTensor* cols, const pcr_conv* conv, int32_t r, int32_t s,
           cudaStream_t stream);
// pcr_col2im: cols (N*P*Q x width), dx and c (dx's shape, or null) checked, then folded.
int col2im(const DLTensor* cols, const DLTensor* dx, const DLTensor* c, const pcr_conv* conv,
           int32_t r, int32_t s, double alpha, double beta, cudaStream_t stream);
// The end of describe for every problem: the build knows its op, dtypes and epilogue at
// all, and its device (d's, or the current one for host operands) is queried.
int finish_problem(pcr_problem* problem, const Matrix& d, bool host, bool grouped = false);
// Operand pieces describe and describe_conv share (problem.cpp).
// The largest M, N or K: kernels count tiles (extent + tile - 1) and staging pads extents
// (to 16 bytes, leading dimensions to 128) in int32, so an extent within a tile or a pad of
// 2^31 would wrap around.
constexpr int64_t kMaxExtent = (int64_t(1) << 31) - 1024;
// A tensor's dtype (and element size) into m: PCR_ERR_INVALID_DTYPE for one the library
// has no notion of. Then (load_place) its address and device: CUDA or host memory, and no
// null pointer holding `elements`. Dims and strides are each loader's own.
int load_dtype(const DLTensor* t, const char* name, Matrix* m);
int load_place(const DLTensor* t, const char* name, int64_t elements, Matrix* m);
// A shape as Python prints it: "(3,)", "(2, 2)".
std::string shape_text(const int64_t* dims, int n);
int dtype_from_dl(DLDataType t);  // PCR_DTYPE_INVALID where the library has no such dtype
bool is_host(int device_type);    // host memory (numpy; pinned included)
// Largest power of two <= 16 dividing m's address, leading dimension, batch stride and
// contiguous extent, in bytes.
int alignment_bytes(const Matrix& m, int layout, int64_t ld);
const char* op_name(int op);  // "GEMM", "convolution fprop", ...
// Where a problem's operands live: ops are a, b, d, c, bias, scale_a, scale_b, aux, amax,
// scale_d (null where absent), named as the call names them. All on one GPU or all on the
// host (*host), d overlaps none of a, b and the extras (d may be c exactly: the caller
// checks c), and aux and amax overlap nothing.
constexpr int kPlaces = 10;
int check_places(const Matrix* const ops[kPlaces], const char* const names[kPlaces], bool* host);
// Whether kernel `k` accepts `problem` (dtypes, layouts, alignment, an image for its GPU;
// with `bound`, CUTLASS's can_implement on those operands too).
int check_kernel(int k, const pcr_problem& problem, const Bound* bound);
// check_kernel's verdict for each kernel i < min(count, kKernelCount) (verdicts may be
// nullptr: none), the calling thread's error message left empty.
int judge(const pcr_problem& problem, const Bound* bound, pcr_verdict* verdicts, int32_t count);
// describe, then judge with the operands it bound (pcr_describe, pcr_py_describe).
int describe_judged(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
                    double alpha, double beta, const pcr_extras* extras, pcr_problem* problem,
                    pcr_verdict* verdicts, int32_t count);
// The extras' activation with the parameters it takes, the others 0: calls that differ
// only in a parameter their activation ignores share a prepared launch, and a plan
// compares these.
ActivationArgs activation_of(const pcr_extras& extras);
GemmArgs gemm_args(const pcr_problem& problem, const Bound& bound);
// A problem with `staged` operands as its kernel sees it: those operands copied into
// scratch at `base` in their own layout, zero-padded so that every contiguous extent is a
// multiple of 16 bytes (which may pad M, N or K, and stage more operands) and every
// leading dimension one of 128; base == nullptr computes the layout and size only.
struct Staging {
  pcr_problem problem;  // the kernel's problem: padded extents, staged == 0
  Bound bound;          // the kernel's operands
  size_t bytes = 0;     // scratch needed
  int staged = 0;       // operands in scratch (bits 1 a, 2 b, 4 d): p.staged and more
};
Staging stage_layout(const pcr_problem& problem, const Bound& bound, char* base);
// Columns [n0, n0 + n) of a described GEMM as describe() would give them for those columns
// of b, c and d (and of a bias or scales along N): alignments and staging their own, every
// misaligned operand staged (the part runs the whole problem's kernel).
void column_part(const pcr_problem& problem, const Bound& bound, int64_t n0, int64_t n,
                 pcr_problem* part, Bound* part_bound);
const char* dtype_name(int dtype);
bool is_grid(int kind);  // a block-scale grid's pcr_scale_kind (GROUPS, BLOCKS)

// ---- grouped GEMMs (grouped.cu): the C entry points' work ----
int grouped_gemm(const DLTensor* const* a, const DLTensor* const* b, const DLTensor* const* c,
                 const DLTensor* const* d, int32_t count, double alpha, double beta,
                 const pcr_extras* const* extras, int32_t kernel, void* stream,
                 pcr_problem* problem);
int moe_gemm(const DLTensor* x, const DLTensor* w, const DLTensor* offsets, const DLTensor* out,
             double alpha, const pcr_extras* extras, int32_t kernel, void* stream,
             pcr_problem* problem);

// ---- prepared launches (prepared.cpp) ----
// A kernel's launch parameters built for one GemmArgs and workspace (see KernelOps).
struct PreparedLaunch {
  int kernel = -1;  // -1: empty
  GemmArgs args{};
  size_t workspace_bytes = 0;
  void* workspace = nullptr;
  bool programmatic = false;  // launch as a programmatic dependent (prepared.cpp)
  alignas(kPreparedAlign) unsigned char blob[kMaxPrepared];

  bool matches(int k, const GemmArgs& g) const {
    return kernel == k && std::memcmp(&args, &g, sizeof g) == 0;
  }
  // Builds kernel k's parameters for g and `workspace` (of `bytes`) and records them.
  int prepare(int k, const GemmArgs& g, size_t bytes, void* workspace);
  // Launches kernel k for g on `stream`, preparing first unless the parameters were
  // built for the same kernel, args and workspace.
  int launch(int k, const GemmArgs& g, size_t bytes, void* workspace, cudaStream_t stream);
};

// Kernel k on `g` with its workspace (Scratch), through `own` (a plan's) or the calling
// thread's prepared launches (see PreparedLaunch).
int run_prepared(int k, const GemmArgs& g, cudaStream_t stream, PreparedLaunch* own = nullptr);
// The same with the workspace given (`bytes` at `ws`, at least workspace_size's).
int run_prepared(int k, const GemmArgs& g, cudaStream_t stream, PreparedLaunch* own, void* ws,
                 size_t bytes);
// Kernel k's workspace for `g`, as prepared (own or the thread's) or computed.
size_t workspace_size(int k, const GemmArgs& g, const PreparedLaunch* own);

// ---- scratch memory (scratch.cpp) ----
// What a call's scratch is for: one kept buffer per kind and stream (a call may hold a
// workspace and staging or group arrays at once); host copies are never kept.
enum class ScratchKind { kWorkspace, kStaging, kGroupArrays, kHostCopy };
// `bytes` of device memory for the work a call enqueues on `stream` while this object
// lives (declare it before those launches, in the scope that enqueues them): under
// capture, the graph's own; otherwise the caller's allocator's (pcr_set_allocator) or the
// stream's kept buffer of `kind`, locked until the object goes (see scratch.cpp). Zeroed
// on request where newly allocated.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { release(); }
  int allocate(int device, cudaStream_t stream, size_t bytes, ScratchKind kind,
               bool zeroed = false);
  void* get() const { return ptr_; }

 private:
  void release() noexcept;
  void* ptr_ = nullptr;
  bool owned_ = false;  // ptr_ is this call's own, freed on stream_ (which may be the
                        // legacy default stream, handle 0: ownership is not the handle)
  pcr_release_fn give_back_ = nullptr;  // ptr_ was lent (pcr_set_allocator): returned here
  void* lender_ = nullptr;              // the allocator's context
  size_t bytes_ = 0;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  std::unique_lock<std::mutex> lock_;
};

// The ABI's scratch-memory entry points (pcr_empty_cache, ... of the same names).
int empty_cache(int device);
int memory_stats(int device, pcr_memory_usage* out);
int set_scratch_limit(int64_t bytes);
int set_allocator(pcr_alloc_fn alloc, pcr_release_fn release, void* context);

// ---- kernel choice (select.cpp) ----
// Whether a described problem runs a GEMM kernel at all (no empty extent, K > 0).
inline bool has_gemm_work(const pcr_problem& p) { return p.m && p.n && p.k && p.batch; }
// Whether a kernel of epilogue `kernel` computes a problem that needs `problem`
// (pcr_epilogue's rule: its own, and those it extends).
inline bool epilogue_serves(int kernel, int problem) {
  return kernel == problem || problem == PCR_EPI_LINEAR ||
         (problem == PCR_EPI_BIASACT && kernel != PCR_EPI_LINEAR);
}
// Whether a kernel accumulates fp8 products fast (the FA schedules: PCR_MATH_FAST_ACCUM).
inline bool is_fast_accum(const pcr_kernel_desc& kd) {
  return kd.schedule == PCR_SCHED_COOPFA || kd.schedule == PCR_SCHED_PINGPONGFA;
}
// How messages name a pcr_epilogue ("plain", "fused bias/activation", ...).
const char* epilogue_words(int epilogue);
// A pcr_epilogue's enum token ("linear", "biasact", ...), as kernel names spell it.
const char* epilogue_name(int epilogue);
// A forced kernel (checked against the problem), the selected one, or -1 for a problem
// without GEMM work (unless forced).
int kernel_for(const pcr_problem& problem, const Bound& bound, int32_t forced, int* kernel);
// The kernel for a described problem: the first of its ranked candidates (remembered per
// thread) that accepts the operands, or the error that no kernel runs it.
int select(const pcr_problem& problem, const Bound& bound, int* kernel);
// pcr_select_clear: every thread's remembered choices and every device's say.
void select_clear();
// Every thread's remembered choices only (a new table or tuned entries).
void forget_choices();
// pcr_problem_identity and pcr_problem_identity_names: the memo key's fields, for Python.
int identity(const pcr_problem* problem, int64_t* values, int32_t capacity);
const char* identity_names();
// A problem's identity as bytes (a map key): of a problem, or of pcr_problem_identity's values.
std::string identity_key(const pcr_problem& problem);
std::string identity_key(const int64_t* values);

// ---- the selector (choose.cpp) ----
// The ranked candidates for a described problem (pcr_select_rank's, kernel indices): the
// device's tuned entry, then the table and model; `bound` (the operands) or `verdicts`
// (NULL: judged here) decide which kernels take it. *unused_tuned: a tuned kernel that
// does not (-1: none). Else the error that no kernel runs it, ranked empty.
int choose(const pcr_problem& p, const Bound* bound, const pcr_verdict* verdicts, int flags,
           std::vector<pcr_ranked>* ranked, int32_t* unused_tuned);
// Tells the observer (pcr_select_observe) of a problem ranked for a launch.
void observe(const pcr_problem& p, const std::vector<pcr_ranked>& ranked, int32_t unused_tuned);
// Every device's say is asked of the provider again.
void forget_says();
// pcr_select_rank, pcr_select_passed_over, pcr_select_tuned, pcr_select_provider and
// pcr_select_observe.
int select_rank(const pcr_problem* p, const pcr_verdict* verdicts, int32_t flags, pcr_ranked* out,
                int32_t capacity, int32_t* count);
int select_passed_over(const pcr_problem* p, const pcr_verdict* verdicts, int32_t flags,
                       pcr_verdict* passed, int32_t count);
int select_tuned(int32_t device, const pcr_tuned* entries, int32_t count, const char* source,
                 const char* refusal);
int select_provider(pcr_select_provider_fn provider, void* context);
int select_observe(pcr_select_observer_fn observer, void* context);

// ---- the time model and ranking (rank.cpp) ----
// pcr_model_terms, pcr_kernel_families (the count, its first `capacity` written),
// pcr_ranker_create, pcr_rank and pcr_selector_set.
int model_terms(const pcr_kernel_desc& kernel, int64_t m, int64_t n, int64_t k, int64_t batch,
                int sm_count, int cc, pcr_model* out);
int kernel_families(int cc, int32_t* families, int capacity);
int ranker_create(const pcr_table* table, pcr_ranker** ranker);
void ranker_destroy(pcr_ranker* ranker) noexcept;
int rank(const pcr_problem* problem, const int32_t* families, int32_t family_count,
         const pcr_kernel_desc* candidates, const int32_t* ids, int32_t count,
         const pcr_ranker* ranker, pcr_ranked* out, int32_t* ranked);
int selector_set(const pcr_ranker* ranker);
// This build's kernels (indices, each accepted for p) ranked with the selector's table
// (none: the model) for a device of kernel families order[0..nfam): pcr_ranked records,
// candidate = the kernel index, best first. Returns their number.
int rank_kernels(const pcr_problem& p, const int32_t* order, int nfam,
                 const std::vector<int32_t>& kernels, pcr_ranked* out);
// Whether two described problems are one to the memo, with the same orientation, memory
// (host or GPU) and device: what a plan checks of the tensors it is run on.
bool same_problem(const pcr_problem& x, const pcr_problem& y);

// ---- launches (launch.cpp; the elementwise kernels in prefill.cu) ----
int launch(const pcr_problem& problem, const Bound& bound, int kernel, cudaStream_t stream);
// GPU operands, their device current: the copies and the kernel a described problem
// needs, through `plan`'s prepared launch, or (nullptr) the thread's.
int launch_device(const pcr_problem& problem, const Bound& bound, int kernel, cudaStream_t stream,
                  pcr_plan* plan = nullptr);
// describe + kernel choice (forced, or from the selection memo) + launch.
int gemm(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d, double alpha,
         double beta, const pcr_extras* extras, int32_t kernel, void* stream, pcr_problem* problem);
// d = act(scale * src + bias) elementwise over d's extent and batch (src == nullptr:
// d = act(bias), or 0; elements past a smaller src's extent read as 0), any strides,
// converting dtypes. `bias` (d's dtype, or nullptr) is a broadcast view as in Bound.
int launch_scale_copy(const Matrix* src, const Matrix& dst, double scale, cudaStream_t stream,
                      const Matrix* bias = nullptr, ActivationArgs activation = {});
// max(*amax, max |d|) into amax (float32, one element; nothing when amax is empty): where
// no kernel's epilogue saw d's final values (K = 0, a staged d).
int launch_amax(const Matrix& d, const Matrix& amax, cudaStream_t stream);
// A convolution's input and its unfolding for a GEMM (pcr_im2col, pcr_col2im): the image
// (n, h, w, c) packed NHWC; cols (n * p * q) x width, row-major and contiguous, in `groups`
// blocks of width / groups columns, block g holding channels [g c', (g + 1) c') (c' = c /
// groups) of an r x s filter's taps at (i * s + j) * c' + channel, then zeros.
struct Im2col {
  int64_t n, h, w, c, p, q, r, s, width, groups;
  int64_t pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w;
};
int launch_unfold(const void* x, void* cols, int esize, const Im2col& g, cudaStream_t stream);
// The adjoint: dx = alpha * (the sum of cols' entries that unfold would have copied from
// each element) + beta * c (c may be null); dtype f16, bf16 or f32.
int launch_fold(const void* cols, void* dx, const void* c, int dtype, const Im2col& g, float alpha,
                float beta, cudaStream_t stream);
// dst[i] = src[i] (zero-padded past src's extent) for operands staged into aligned
// scratch: same-dtype copies with contiguous rows (or columns) in one launch, the rest
// through launch_scale_copy.
int launch_stage_copies(const Matrix* const src[], const Matrix* const dst[], int count,
                        cudaStream_t stream);
// pcr_quantize's work (quantize.cu), on checked operands: x and q row-major (rows x K, s0
// their row strides), scale a pcr_quant grid with strides between row groups (s0) and
// K groups (s1).
int launch_quantize(const Matrix& x, const Matrix& q, const Matrix& scale, int granularity,
                    bool dynamic, cudaStream_t stream);
// pcr_quantize (quantize.cpp): the operands checked, then launch_quantize.
int quantize(const DLTensor* x, const DLTensor* q, const DLTensor* scale, int32_t granularity,
             int32_t dynamic, cudaStream_t stream);

}  // namespace pcr

// A bound plan (pycutlass_rt.h): one problem, its kernel and prepared launch. It owns no
// device memory: each run's workspace and staging scratch are the run's own (Scratch).
struct pcr_plan {
  pcr_problem problem;
  pcr::Bound bound;  // the tensors given at creation
  int kernel = -1;
  const void* stream_api = nullptr;  // the producer's DLPack exchange API, for its stream
  pcr::PreparedLaunch prepared;
  std::atomic<bool> running{false};  // a run is under way (runs are one thread at a time)
};

namespace pcr {
// ---- bound plans (plan.cpp) ----
int plan_create(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
                double alpha, double beta, const pcr_extras* extras, int32_t kernel,
                pcr_problem* problem, pcr_plan** out);
// Runs the plan on the tensors bound at creation, or on new ones (nullptr: bound ones)
// that must describe the same problem.
int plan_run(pcr_plan* plan, const DLTensor* a, const DLTensor* b, const DLTensor* c,
             const DLTensor* d, const pcr_extras* extras, cudaStream_t stream);
// The plan's kernel index (pcr_plan_kernel).
int plan_kernel(const pcr_plan* plan, int32_t* kernel);
// Frees the plan (host memory only: its runs' scratch belongs to the runs); NULL: nothing.
void plan_destroy(pcr_plan* plan);

// ---- Python-object entry points (python.cpp) ----
// The work of the pcr_py_* functions of the same names; each object is a PyObject*. The
// builtins' work (gemm, plan_run, plan_launch) stays inside python.cpp.
int py_plan_create(void* a, void* b, void* c, void* d, double alpha, double beta, void* extras,
                   int32_t kernel, pcr_problem* problem, pcr_plan** plan);
int py_describe(void* a, void* b, void* c, void* d, double alpha, double beta, void* extras,
                pcr_problem* out, pcr_verdict* verdicts, int32_t count);
int py_im2col(void* x, void* cols, void* conv, int32_t r, int32_t s, int32_t flags, void* stream);
int py_quantize(void* x, void* q, void* scale, int32_t granularity, int32_t dynamic, int32_t flags,
                void* stream);
int py_col2im(void* cols, void* dx, void* c, void* conv, int32_t r, int32_t s, double alpha,
              double beta, int32_t flags, void* stream);
int py_grouped_gemm(void** a, void** b, void** c, void** d, void** extras, int32_t count,
                    double alpha, double beta, int32_t kernel, int32_t flags, void* stream,
                    pcr_problem* problem);
int py_moe_gemm(void* x, void* w, void* offsets, void* out, double alpha, void* extras,
                int32_t kernel, int32_t flags, void* stream, pcr_problem* problem);
// The CPython builtins' PyMethodDef table (pcr_py_builtins), or nullptr outside CPython.
const void* py_builtins();

// ---- the XLA FFI handler (xla_ffi.cpp; built with PCR_XLA_FFI only) ----
// pcr_xla_gemm's work: an XLA_FFI_Handler taking an XLA_FFI_CallFrame*, returning an
// XLA_FFI_Error* (nullptr: success). Runs behind its own guard: failures, exceptions
// included, become XLA FFI errors carrying the thread's message.
void* xla_gemm(void* call_frame) noexcept;
// build_info's "jax_handler" object: built, and the XLA FFI API version compiled against.
const char* xla_handler_info();
}  // namespace pcr
