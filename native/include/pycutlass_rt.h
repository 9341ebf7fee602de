/* pycutlass_rt — the whole C ABI of libpycutlass_rt.so.
 *
 * Conventions
 *  - Every function returns an int status (pcr_status). On failure it also sets a
 *    thread-local message, read with pcr_last_error(). Nothing here throws, exits,
 *    aborts or prints: a C++ exception inside the library (out of host memory, say) is
 *    caught at the entry point and returned as PCR_ERR_INTERNAL.
 *  - Tensors are DLPack DLTensor views (declared below unless dlpack.h came first).
 *  - GEMM: d = act(alpha * (scale_a * a) @ (b * scale_b) + beta * c + bias), with a
 *    (M x K), b (K x N), c and d (M x N), any strides with one unit-stride dimension each;
 *    the optional extras (pcr_extras) broadcast against d like numpy: a bias of shape (N,)
 *    or (1, N) adds one value per column, (M, 1) one per row; scale_a scales a's rows (one
 *    value, or M), scale_b b's columns (one value, or N). Block-scaled fp8 (scale grids,
 *    see pcr_scale_kind): each 128 of K's partial product is scaled by that K-block's
 *    scale_a (per row or per 128 rows) and scale_b (per column or per 128 columns) before
 *    it is accumulated. Batched: a, b, c, d may be 3-D
 *    (L, rows, cols), broadcasting a batch of 1 (or batch stride 0) over L; d must hold all
 *    L. Launches are asynchronous on `stream` and capture-safe (no allocation, no
 *    synchronization).
 *  - Convolution: the same entry points with pcr_extras.conv set run a 2-D convolution
 *    (fprop, dgrad or wgrad) as an implicit GEMM on NHWC / KRSC tensors (see pcr_conv).
 *  - The library's kernel catalogue is read from the binary (pcr_kernel_count/info);
 *    a kernel is named by its index within this build, or looked up by name.
 */
#ifndef PYCUTLASS_RT_H_
#define PYCUTLASS_RT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PCR_ABI_VERSION 22

#if defined(_WIN32)
#define PCR_API __declspec(dllexport)
#else
#define PCR_API __attribute__((visibility("default")))
#endif

/* ---- DLPack 1.x data structures (ABI-compatible with dlpack.h) ------------------- */
#ifndef DLPACK_MAJOR_VERSION
typedef struct {
  uint32_t major, minor;
} DLPackVersion;
typedef enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 } DLDeviceType;
typedef struct {
  int32_t device_type;
  int32_t device_id;
} DLDevice;
/* the fp8 codes are DLPack 1.1's */
typedef enum {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLBfloat = 4,
  kDLFloat8_e4m3fn = 10,
  kDLFloat8_e5m2 = 12
} DLDataTypeCode;
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides; /* in elements; NULL means compact row-major */
  uint64_t byte_offset;
} DLTensor;
#endif

/* ---- status codes -------------------------------------------------------------- */
typedef enum {
  PCR_OK = 0,
  PCR_ERR_INVALID_ARGUMENT = 1,   /* bad shape, stride, scalar, or option */
  PCR_ERR_INVALID_DTYPE = 2,      /* a dtype the library has no notion of */
  PCR_ERR_UNSUPPORTED = 3,        /* valid request, but no kernel for this combination */
  PCR_ERR_MISALIGNED = 4,         /* a forced kernel needs more alignment than given */
  PCR_ERR_NO_KERNEL_FOR_ARCH = 5, /* the build holds no kernel that runs on this GPU */
  PCR_ERR_NO_DEVICE = 6,          /* no driver, no GPU, or CUDA_VISIBLE_DEVICES hides it */
  PCR_ERR_DEVICE_MISMATCH = 7,    /* operands on different devices, or host mixed with GPU */
  PCR_ERR_READ_ONLY = 8,          /* the output was exported read-only */
  PCR_ERR_OVERLAP = 9,            /* the output overlaps an input it may not alias */
  PCR_ERR_KERNEL_NOT_FOUND = 10,  /* unknown kernel index or name */
  PCR_ERR_CUDA = 11,              /* a CUDA call failed; the message names the error */
  PCR_ERR_INTERNAL = 12,          /* out of host memory, or a library bug; the message says */
  PCR_ERR_PYTHON = 13             /* a producer failed (Python-object entry points): see there */
} pcr_status;

/* Element types, the library's own codes (stable across ABI versions). */
typedef enum {
  PCR_DTYPE_INVALID = 0,
  PCR_F16 = 1,
  PCR_BF16 = 2,
  PCR_F32 = 3,
  PCR_F64 = 4,
  PCR_TF32 = 5,
  PCR_E4M3 = 6,
  PCR_E5M2 = 7,
  PCR_S8 = 8,
  PCR_S32 = 9
} pcr_dtype;

typedef enum {
  PCR_ROW_MAJOR = 0,
  PCR_COL_MAJOR = 1,
  PCR_NHWC = 2 /* a convolution's operands: packed NHWC activations, KRSC filters */
} pcr_layout;

/* Mainloop schedules. Each constant's name past PCR_SCHED_, lowercased, is the word kernel
 * names use (native/catalog.py): ..._c2x1_coop_a8 is PCR_SCHED_COOP; likewise for pcr_split
 * (PCR_SPLIT_) and pcr_epilogue (PCR_EPI_). */
typedef enum {
  PCR_SCHED_MULTISTAGE = 0, /* sm80 family: cp.async multistage */
  PCR_SCHED_PIPELINED = 1,  /* sm75/sm80 families: 2-stage register-staged (any alignment) */
  PCR_SCHED_COOP = 2,       /* sm90a: TMA warp-specialized cooperative */
  PCR_SCHED_PINGPONG = 3,   /* sm90a: TMA warp-specialized ping-pong */
  PCR_SCHED_1SM = 4,        /* sm100a: tcgen05 MMA on one SM */
  PCR_SCHED_2SM = 5,        /* sm100a: tcgen05 MMA shared by a CTA pair */
  PCR_SCHED_WS = 6,         /* sm90a convolutions: TMA warp-specialized, a CTA per tile */
  PCR_SCHED_COOPFA = 7,     /* sm90a fp8: COOP with fast accumulation (PCR_MATH_FAST_ACCUM) */
  PCR_SCHED_PINGPONGFA = 8, /* sm90a fp8: PINGPONG with fast accumulation */
  PCR_SCHED_DEPTHWISE = 9,  /* sm80 family: a direct depthwise fprop on CUDA cores (groups =
                               C = K), no implicit GEMM; see pcr_kernel_desc's tile */
  PCR_SCHED_DIRECT = 10     /* sm80 family: a direct grouped fprop on CUDA cores (C = K, a few
                               channels per group: pcr_kernel_desc's group_width) */
} pcr_schedule;

/* Epilogues: LINEAR computes alpha * acc + beta * c; BIASACT adds an optional bias
 * (per row or per column) and applies a pcr_activation chosen per call; SCALED (quantized
 * inputs) also multiplies acc by scale_a (per tensor or per row) and scale_b (per tensor
 * or per column); AUX is BIASACT that also writes the activation's input (the
 * pre-activation alpha * acc + beta * c + bias) to pcr_extras.aux and the maximum of |d|
 * to pcr_extras.amax, each when given. A kernel
 * serves problems of its own epilogue and of those it extends: every one extends LINEAR,
 * SCALED and AUX extend BIASACT. */
typedef enum {
  PCR_EPI_LINEAR = 0,
  PCR_EPI_BIASACT = 1,
  PCR_EPI_SCALED = 2,
  PCR_EPI_AUX = 3
} pcr_epilogue;
typedef enum {
  PCR_ACT_NONE = 0,
  PCR_ACT_RELU = 1,
  PCR_ACT_GELU = 2,      /* x * Phi(x), with erf */
  PCR_ACT_GELU_TANH = 3, /* the tanh approximation (torch's approximate="tanh") */
  PCR_ACT_SILU = 4,      /* x * sigmoid(x) */
  PCR_ACT_SIGMOID = 5,   /* 1 / (1 + e^-x) */
  PCR_ACT_TANH = 6,
  PCR_ACT_HARDSWISH = 7,  /* x * min(max(x + 3, 0), 6) / 6 */
  PCR_ACT_LEAKY_RELU = 8, /* x where x >= 0, else activation_alpha * x (the slope) */
  PCR_ACT_CLAMP = 9       /* min(max(x, activation_alpha), activation_beta) */
} pcr_activation;
/* Work decompositions: SPLITK cuts K into slices whose partials a second kernel sums;
 * STREAMK is CUTLASS's stream-K (the K loops of too few tiles spread over every SM). */
typedef enum { PCR_SPLIT_NONE = 0, PCR_SPLIT_SPLITK = 1, PCR_SPLIT_STREAMK = 2 } pcr_split;
/* How inputs are multiplied. float32: at fp32 accuracy (IEEE: 3xTF32 tensor-op or SIMT
 * kernels), or on TF32 tensor cores (TF32: 10-bit mantissas; kernels whose dtype_a is
 * PCR_TF32). fp8: Hopper's MMAs accumulate fp8 products in reduced precision, so kernels
 * add their partial sums into fp32 every 128 of K (IEEE, the default, as cuBLAS and
 * torch._scaled_mm do by default); FAST_ACCUM lets kernels of the FA schedules skip that
 * (torch._scaled_mm's use_fast_accum=True: faster, less exact over a long K), where the
 * build holds one for the problem (else the default's run it). Each is ignored for the
 * other dtypes. */
typedef enum { PCR_MATH_IEEE = 0, PCR_MATH_TF32 = 1, PCR_MATH_FAST_ACCUM = 2 } pcr_math;

/* The coded fields of pcr_problem (the struct keeps them as int32_t: its layout is fixed). */
/* c_mode: how C reaches the kernel. */
typedef enum {
  PCR_C_NONE = 0,  /* no C (beta = 0, or c not given) */
  PCR_C_READ = 1,  /* the kernel reads C where it is */
  PCR_C_COPIED = 2 /* C is first copied into D (other layout or dtype, broadcast strides,
                      misaligned), and the kernel reads D as C */
} pcr_c_mode;
/* staged: bits of the operands copied through 16-byte-aligned scratch around the kernel. */
typedef enum { PCR_STAGED_A = 1, PCR_STAGED_B = 2, PCR_STAGED_D = 4 } pcr_staged;
/* bias: the axis the bias vector runs along, in canonical (row-major) d. */
typedef enum {
  PCR_BIAS_NONE = 0,
  PCR_BIAS_PER_COLUMN = 1, /* one value per column: shape (N,) or (1, N) */
  PCR_BIAS_PER_ROW = 2     /* one value per row: shape (M, 1) */
} pcr_bias_axis;
/* scale_m, scale_n: the dequantizing scale of canonical d's rows and columns. GROUPS and
 * BLOCKS are block scales of fp8 inputs, applied per 128 of K in the mainloop (DeepSeek-V3's
 * recipe; torch._scaled_mm's BlockWise1x128 and BlockWise128x128). Their grids are shaped
 * as the operand divided into blocks, rounded up (a partial last block has a scale of its
 * own), any strides: a (M x K) takes (M, ceil(K/128)) for GROUPS (per token and group of
 * 128) or (ceil(M/128), ceil(K/128)) for BLOCKS; b (K x N) takes (ceil(K/128), N) or
 * (ceil(K/128), ceil(N/128)) (a checkpoint's (N, K) weight_scale_inv, transposed). */
typedef enum {
  PCR_SCALE_NONE = 0,
  PCR_SCALE_TENSOR = 1, /* one value for the whole tensor */
  PCR_SCALE_VECTOR = 2, /* one value per row (scale_m) or per column (scale_n) */
  PCR_SCALE_GROUPS = 3, /* one value per row (column) and per 128 of K */
  PCR_SCALE_BLOCKS = 4  /* one value per 128 rows (columns) and per 128 of K */
} pcr_scale_kind;
/* grouped: which entry point's problem this is. */
typedef enum {
  PCR_GROUPED_NONE = 0, /* one GEMM, or a batch (pcr_gemm, pcr_describe, plans) */
  PCR_GROUPED_LIST = 1, /* pcr_grouped_gemm: `batch` groups given as lists */
  PCR_GROUPED_MOE = 2   /* pcr_moe_gemm: `batch` experts, groups from row offsets */
} pcr_grouped;

/* What an entry point computes: a GEMM, or a 2-D convolution as an implicit GEMM. */
typedef enum {
  PCR_OP_GEMM = 0,
  PCR_OP_FPROP = 1, /* y = conv2d(x, w): a = x (N,H,W,C), b = w (K,R,S,C/groups), d = y (N,P,Q,K) */
  PCR_OP_DGRAD = 2, /* dx from dy: a = dy (N,P,Q,K), b = w (K,R,S,C/groups), d = dx (N,H,W,C) */
  PCR_OP_WGRAD = 3  /* dw from dy: a = dy (N,P,Q,K), b = x (N,H,W,C), d = dw (K,R,S,C/groups) */
} pcr_op;

/* A convolution's parameters (pcr_extras.conv); torch.nn.functional.conv2d's meanings.
 * Its tensors are 4-D DLTensors in the dimension order named by pcr_op (N,H,W,C for
 * activations, K,R,S,C for filters), each packed: the last dimension contiguous and the
 * others without gaps (a channels_last torch tensor permuted to NHWC is one). c, when
 * given, has d's shape. An fprop's bias holds K values (one per output channel). */
typedef struct {
  int32_t op; /* pcr_op: FPROP, DGRAD or WGRAD */
  int32_t pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, groups;
} pcr_conv;

/* What a GEMM computes beyond alpha * a @ b + beta * c; a NULL pcr_extras* means none. */
typedef struct {
  const DLTensor* bias;    /* NULL, or d's dtype: (N,) / (1, N) per column, (M, 1) per row */
  const DLTensor* scale_a; /* NULL, or float32 on d's GPU: 1 element (per tensor) or M
                              (per row of a: (M,) or (M, 1)); quantized inputs only; or,
                              for fp8, a block-scale grid (see pcr_scale_kind) */
  const DLTensor* scale_b; /* NULL, or float32: 1 element or N (per column of b: (N,) or
                              (1, N)); quantized inputs only; or a block-scale grid */
  int32_t activation;      /* pcr_activation */
  int32_t math;            /* pcr_math */
  double activation_alpha; /* the activation's parameters (see pcr_activation; finite, and */
  double activation_beta;  /* alpha <= beta for CLAMP); 0 where it takes none. Double: a
                              float64 epilogue applies them unrounded */
  const pcr_conv* conv;    /* NULL: a GEMM; else the convolution a, b, c, d describe */
  const DLTensor* aux;     /* NULL, or d's shape, dtype and layout (GEMMs, 16-byte aligned
                              like d): receives the pre-activation (PCR_EPI_AUX) */
  const DLTensor* amax;    /* NULL, or one float32 element where d's are (GEMMs): receives
                              max |d| over every element of d, batches included (0 when d
                              is empty, NaN when d holds one; PCR_EPI_AUX, or with quantized
                              inputs a kernel with out_scale, where it is taken before
                              scale_d) */
  const DLTensor* scale_d; /* NULL, or one float32 element on d's GPU (quantized inputs, a
                              kernel with out_scale): d = saturate(scale_d * result), the
                              output scale of an fp8 d (1 / its dequantizing scale) */
} pcr_extras;

/* Everything a kernel's name encodes. Names are stable identities across builds. */
typedef struct {
  const char* name;
  int32_t family; /* 70, 75, 80, 89, 90, 100: arch family (sm80 SASS also serves 86/89/90) */
  int32_t dtype_a, dtype_b, dtype_acc, dtype_d; /* pcr_dtype; C has D's dtype */
  int32_t layout_a, layout_b;                   /* pcr_layout; C and D are row-major */
  int32_t tile_m, tile_n, tile_k; /* PCR_SCHED_DEPTHWISE and PCR_SCHED_DIRECT: the filter (R x
                                     S) and the stride the kernel is built for; 0 x 0 x 0 for
                                     any */
  int32_t cluster_m, cluster_n, cluster_k;
  int32_t warps_m, warps_n, warps_k; /* sm80 family; 0 where not applicable */
  int32_t stages;                    /* 0 = chosen by CUTLASS */
  int32_t schedule;                  /* pcr_schedule */
  int32_t epilogue;                  /* pcr_epilogue */
  int32_t split;                     /* pcr_split */
  int32_t align_a, align_b, align_c; /* required alignment, in elements */
  int32_t swap_ab;          /* 1: runs as D^T = B^T A^T (small M on the MMA's N side); the fields
                               above describe the problem the caller sees, not the swapped one */
  int32_t grouped;          /* 1: a grouped kernel (pcr_grouped_gemm, pcr_moe_gemm) */
  int32_t tensor_scales;    /* 1: a LINEAR epilogue that also multiplies by per-tensor
                               scale_a/scale_b tensors (quantized inputs, non-int32 D, sm90a
                               and sm100a); other LINEAR kernels take scales only as numbers */
  int32_t op;               /* pcr_op: a GEMM kernel, or a convolution's (layouts PCR_NHWC) */
  int32_t scale_m, scale_n; /* a block-scaled mainloop's pcr_scale_kind of the rows (a's
                               scales) and columns (b's), PCR_SCALE_GROUPS or
                               PCR_SCALE_BLOCKS, in the caller's problem terms (swap-AB
                               kernels too); PCR_SCALE_NONE for every other kernel */
  int32_t out_scale;        /* 1: a quantized inputs' epilogue that also reduces max |d|
                               into pcr_extras.amax and multiplies d by pcr_extras.scale_d,
                               each when given */
  int32_t group_width;      /* PCR_SCHED_DIRECT: the channels per group (C / groups = K /
                               groups) the kernel is built for; 0 for every other kernel */
} pcr_kernel_desc;

/* A convolution problem's geometry (pcr_problem.conv; zeros for a GEMM). */
typedef struct {
  int32_t n, h, w, c; /* activations: N x H x W x C */
  int32_t k, r, s;    /* filters: K x R x S x (C / groups) */
  int32_t p, q;       /* output: N x P x Q x K */
  int32_t pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, groups;
} pcr_conv_shape;

/* A validated problem in canonical form (D row-major; see `transposed`). Filled by
 * pcr_describe and by the launching entry points (when they get that far). */
typedef struct {
  int64_t m, n, k;
  int32_t dtype_a, dtype_b, dtype_c, dtype_d; /* dtype_c = PCR_DTYPE_INVALID without C */
  int32_t layout_a, layout_b;
  int32_t align_a, align_b, align_c, align_d; /* bytes: largest of 16/8/4/2/1 that holds */
  int32_t c_mode;     /* pcr_c_mode: no C (beta = 0), C read by the kernel, or copied first */
  int32_t transposed; /* 1: computed as D^T = B^T A^T */
  int32_t host;       /* 1: host (numpy) operands, staged through device memory */
  int32_t staged;     /* pcr_staged bits: a, b, d copied through 16-byte-aligned scratch */
  int32_t device;     /* CUDA ordinal */
  int32_t cc;         /* compute capability of that device, e.g. 90 */
  int32_t sm_count;
  int64_t batch;      /* L: GEMMs in the batch (1 for 2-D operands) */
  int32_t bias;       /* pcr_bias_axis: none, one value per column of canonical d, per row */
  int32_t activation; /* pcr_activation */
  int32_t align_bias; /* bytes, as align_a */
  int32_t epilogue;   /* pcr_epilogue the problem needs */
  int32_t grouped;    /* pcr_grouped: one GEMM (or a batch), a grouped GEMM of `batch`
                         groups, or the same from row offsets (MoE); m, n, k are then the
                         largest extents */
  int32_t scale_m;    /* pcr_scale_kind of canonical d's rows: none, one value, one per row,
                         or an fp8 block-scale grid (GROUPS, BLOCKS) */
  int32_t scale_n;    /* pcr_scale_kind of its columns: likewise */
  int32_t op;         /* pcr_op; a convolution's m, n, k are its implicit GEMM's: fprop
                         N*P*Q x K x R*S*C/groups, dgrad N*H*W x C x R*S*K, wgrad
                         K x R*S*C/groups x N*P*Q */
  pcr_conv_shape conv;
  int64_t split_n;   /* 0, or staged D with B read in place: columns [0, split_n) and the rest
                        run as two launches of the kernel, so that only the last columns of
                        B are copied (an odd N pads D, and a padded N would copy all of B) */
  int32_t out_scale; /* 1: quantized inputs with amax or scale_d, taken by a kernel whose
                        descriptor sets out_scale */
  int32_t
      fast_accum; /* 1: fp8 inputs whose products may be accumulated fast (PCR_MATH_FAST_ACCUM) */
} pcr_problem;

/* A kernel's verdict on one problem: whether it runs it and, if not, why. */
#define PCR_REASON_SIZE 252
typedef struct {
  int32_t status;               /* PCR_OK: the kernel runs the problem; else an error code */
  char reason[PCR_REASON_SIZE]; /* why not (NUL-terminated, cut short if longer); "" if OK */
} pcr_verdict;

/* ---- library ------------------------------------------------------------------- */
PCR_API int pcr_abi_version(void);
PCR_API const char* pcr_last_error(void); /* "" when none; thread-local */
PCR_API const char* pcr_build_info(void); /* JSON: versions, archs, flags */

/* ---- catalogue ----------------------------------------------------------------- */
PCR_API int pcr_kernel_count(void);
PCR_API int pcr_kernel_info(int32_t kernel, pcr_kernel_desc* out);
PCR_API int pcr_kernel_find(const char* name, int32_t* kernel);
/* *runs = 1 if the build holds an image of `kernel` that loads on `device`. */
PCR_API int pcr_kernel_runs_on(int32_t kernel, int32_t device, int32_t* runs);
/* Each kernel's verdict on a problem: verdicts[i] for kernel i < min(count,
 * pcr_kernel_count()). This judges the problem alone (dtypes, layouts, epilogue,
 * alignment, an image for its GPU): what grouped problems get, whose sizes live on the
 * GPU. pcr_describe gives the full verdicts of a problem with its operands. */
PCR_API int pcr_kernel_verdicts(const pcr_problem* problem, pcr_verdict* verdicts, int32_t count);

/* ---- devices ------------------------------------------------------------------- */
PCR_API int pcr_driver_version(int32_t* version); /* 0 when no driver is installed */
PCR_API int pcr_runtime_version(int32_t* version);
PCR_API int pcr_device_count(int32_t* count);
PCR_API int pcr_device_name(int32_t device, char* buf, size_t size);
PCR_API int pcr_device_cc(int32_t device, int32_t* cc, int32_t* sm_count);
/* The CUDA ordinal owning a device pointer (for producers that do not say). */
PCR_API int pcr_pointer_device(const void* ptr, int32_t* device);
/* Makes later work on `consumer` wait for the work enqueued on `producer` so far (an event
 * recorded there), without blocking the host: for operands whose producer names the
 * stream they are written on (__cuda_array_interface__'s "stream"). Both are cudaStream_t
 * handles (NULL: the legacy default stream). */
PCR_API int pcr_stream_wait(void* consumer, void* producer);

/* ---- scratch memory --------------------------------------------------------------
 * Calls that need device scratch (a kernel's workspace, staged operands, grouped-GEMM
 * arrays) take it from a pool of the library's own per device. Outside graph capture a
 * stream keeps its last buffer of each kind for its next call (at most 64 MiB each, 64
 * streams per device, and the scratch limit per device in all; past those a call's
 * scratch is its own). A graph captures either a stream's kept buffer, which is then
 * retired from eager use and held for as long as the process (the graph may replay), or
 * memory of its own (freed with the graph). */
typedef struct {
  uint64_t kept_bytes;    /* kept for eager calls, all streams */
  uint64_t graph_bytes;   /* retired into captured graphs: never freed */
  uint64_t pool_reserved; /* the pool's memory held from the device */
  uint64_t pool_used;     /* of which in use (kept, retired, or calls' own in flight) */
  uint64_t limit;         /* the cap on kept_bytes */
  int32_t kept_streams;   /* streams keeping buffers */
  int32_t lent;           /* 1: eager calls' scratch comes from pcr_set_allocator's */
} pcr_memory_usage;
PCR_API int pcr_memory_stats(int32_t device, pcr_memory_usage* out);
/* Frees every kept buffer (not those retired into graphs) of `device` (-1: every device)
 * and hands the pool's free memory back to the device. It synchronizes the device: call
 * it outside any stream capture. */
PCR_API int pcr_empty_cache(int32_t device);
/* The cap on kept scratch per device (default 1 GiB, or PYCUTLASS_RT_SCRATCH_LIMIT: bytes
 * with an optional K, M or G suffix); 0 keeps nothing. Buffers kept already stay until
 * pcr_empty_cache. */
PCR_API int pcr_set_scratch_limit(int64_t bytes);
/* Scratch from the caller's allocator (a framework's caching allocator, so that its memory
 * statistics see the library's workspaces): alloc returns `bytes` of `device`'s memory for
 * use in stream order on `stream` (a cudaStream_t), or NULL when it has none; release
 * takes it back once the work the call enqueued on `stream` is ordered before any later
 * use (the caller's allocator keeps stream order, as a caching allocator does). With one
 * set, each eager call's scratch comes from it and is given back when the call returns,
 * nothing is kept per stream, and a call whose alloc fails returns PCR_ERR_CUDA having
 * written nothing. Calls inside a CUDA-graph capture still take the graph's own memory
 * (the library's pool): a capture's scratch must outlive the call. Both NULL: the
 * library's own pool again. Kept buffers from before stay until pcr_empty_cache. The
 * callbacks run on the calling thread with no lock of the library held. */
typedef void* (*pcr_alloc_fn)(size_t bytes, int32_t device, void* stream, void* context);
typedef void (*pcr_release_fn)(void* ptr, size_t bytes, int32_t device, void* stream,
                               void* context);
PCR_API int pcr_set_allocator(pcr_alloc_fn alloc, pcr_release_fn release, void* context);

/* ---- GEMM ---------------------------------------------------------------------- */
/* Validates and canonicalizes a problem without touching the GPU's queues. `c` may be
 * NULL when beta == 0; `extras` may be NULL. With `verdicts` (NULL: none), each kernel's
 * verdict on the problem and these operands, as pcr_gemm would judge it (CUTLASS's
 * can_implement included): verdicts[i] for kernel i < min(count, pcr_kernel_count()).
 * A kernel choice made from them is the one pcr_gemm accepts. */
PCR_API int pcr_describe(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
                         double alpha, double beta, const pcr_extras* extras, pcr_problem* out,
                         pcr_verdict* verdicts, int32_t count);

/* The `kernel` argument of the launching entry points: an index (pcr_kernel_info) forces
 * that kernel; PCR_KERNEL_SELECT lets the library choose ("kernel choice" below). A plan
 * of a problem that launches no kernel reports PCR_KERNEL_NONE (pcr_plan_kernel). */
#define PCR_KERNEL_SELECT (-1)
#define PCR_KERNEL_NONE (-1)

/* d = act(alpha * (scale_a * a) @ (b * scale_b) + beta * c + bias) on `stream` (a
 * cudaStream_t; NULL = legacy default); `extras` may be NULL.
 * kernel >= 0 forces that kernel; PCR_KERNEL_SELECT takes the library's choice
 * (pcr_select_rank's first candidate that accepts these operands). A problem without
 * GEMM work (M, N, K or the batch 0) needs no kernel (K = 0 computes
 * d = act(beta * c + bias) elementwise). *problem is filled once the call has described
 * the problem (also when it then fails).
 * Host (kDLCPU) operands are staged through device memory and the call synchronizes. */
PCR_API int pcr_gemm(const DLTensor* a, const DLTensor* b, const DLTensor* c, const DLTensor* d,
                     double alpha, double beta, const pcr_extras* extras, int32_t kernel,
                     void* stream, pcr_problem* problem);

/* A convolution's input unfolded for one GEMM (im2col): x (N x H x W x C, packed NHWC, on
 * a GPU) for an r x s filter under conv's padding, stride, dilation and groups (its op is
 * ignored) into cols, a contiguous row-major (N*P*Q x width) matrix of x's dtype, in one
 * block of width / groups >= r*s*C' columns per group (C' = C / groups): row (n, p, q)
 * holds, in group g's block at column (i*s + j)*C' + c, x[n, p*stride_h - pad_h +
 * i*dilation_h, q*stride_w - pad_w + j*dilation_w, g*C' + c] (0 outside x), then zeros.
 * Then fprop is y = cols @ w^T and wgrad dw = dy^T @ cols (per group, batched), with w
 * flattened (K x r*s*C') the same way (w unfolded as an r x s image: K rows). Asynchronous
 * on `stream`, capture-safe. */
PCR_API int pcr_im2col(const DLTensor* x, const DLTensor* cols, const pcr_conv* conv, int32_t r,
                       int32_t s, void* stream);
/* Its adjoint, for dgrad as a GEMM (dcols = dy @ w, unfolded like cols): dx = alpha * (the
 * sum, in fp32, of every entry of cols that pcr_im2col would have copied from each element
 * of dx) + beta * c (c: NULL, or dx's shape and dtype; it may be dx). dx packed NHWC,
 * float16, bfloat16 or float32; cols as pcr_im2col's for dx's shape. */
PCR_API int pcr_col2im(const DLTensor* cols, const DLTensor* dx, const DLTensor* c,
                       const pcr_conv* conv, int32_t r, int32_t s, double alpha, double beta,
                       void* stream);

/* ---- quantization ---------------------------------------------------------------
 * x (rows x K, K contiguous; float16, bfloat16 or float32, on a GPU) into q (x's shape,
 * K contiguous; float8_e4m3fn or int8) and float32 scales with x ~= q * scale, rounding to
 * nearest and saturating (e4m3 to +-448, int8 to [-128, 127]). `scale` is the grid a
 * block-scaled GEMM reads, any strides (pcr_scale_kind): one element (PCR_QUANT_TENSOR),
 * rows elements as (rows,) or (rows, 1) (PCR_QUANT_TOKEN), (rows, ceil(K/128))
 * (PCR_QUANT_GROUP, per row and 128 of K) or (ceil(rows/128), ceil(K/128))
 * (PCR_QUANT_BLOCK, a weight's 128 x 128 blocks). dynamic 1: each scale is computed from
 * its elements' largest |x| (max(|x|, 1e-10) / 448 for e4m3, / 127 for int8) in the same
 * pass and written; 0: read from `scale`. Asynchronous on `stream`, capture-safe. */
typedef enum {
  PCR_QUANT_TENSOR = 0,
  PCR_QUANT_TOKEN = 1,
  PCR_QUANT_GROUP = 2,
  PCR_QUANT_BLOCK = 3
} pcr_quant;
PCR_API int pcr_quantize(const DLTensor* x, const DLTensor* q, const DLTensor* scale,
                         int32_t granularity, int32_t dynamic, void* stream);

/* ---- bound plans ----------------------------------------------------------------
 * A plan is one problem with its kernel chosen and its launch parameters built: running
 * it is a launch and nothing else (with scratch where the problem needs a workspace or
 * staging, as pcr_gemm gets it), so it is cheap and safe inside CUDA-graph capture.
 * Create: like pcr_gemm (the kernel forced or chosen once, here). The tensors given at
 * creation are bound (the caller keeps them alive); pcr_plan_run_with takes others that
 * describe the same problem. A plan holds no device memory: runs may go to any stream,
 * one thread at a time per plan; destroying it leaves graphs that captured its runs valid. */
typedef struct pcr_plan pcr_plan;
PCR_API int pcr_plan_create(const DLTensor* a, const DLTensor* b, const DLTensor* c,
                            const DLTensor* d, double alpha, double beta, const pcr_extras* extras,
                            int32_t kernel, pcr_problem* problem, pcr_plan** plan);
PCR_API int pcr_plan_run(pcr_plan* plan, void* stream);
/* extras: its tensors replace the bound ones (NULL: the bound extras); its activation and
 * math must be the plan's. */
PCR_API int pcr_plan_run_with(pcr_plan* plan, const DLTensor* a, const DLTensor* b,
                              const DLTensor* c, const DLTensor* d, const pcr_extras* extras,
                              void* stream);
/* The plan's kernel index; PCR_KERNEL_NONE for a problem without GEMM work. */
PCR_API int pcr_plan_kernel(const pcr_plan* plan, int32_t* kernel);
PCR_API void pcr_plan_destroy(pcr_plan* plan);

/* ---- grouped GEMM ----------------------------------------------------------------
 * One launch for `count` independent GEMMs d[g] = act(alpha * a[g] @ b[g] + beta * c[g]
 * + bias[g]), each with its own M, N, K (c NULL, or c[g] NULL, when beta == 0). All groups
 * share dtypes and, after orienting each d row-major, layouts. extras: NULL, or `count`
 * entries (each NULL or that group's pcr_extras: a bias per column, scale_a and scale_b
 * per tensor or as vectors, an activation, math); the groups must agree on which extras
 * they have, the activation and its parameters (no block-scale grids, aux, amax, scale_d
 * or per-row bias; pcr_moe_gemm takes block scales). The kernel's per-group arrays (sizes,
 * pointers, leading dimensions, the extras' pointers) are written on the GPU by a small kernel
 * whose launch parameters carry them: no host synchronization, and capture-safe. */
PCR_API int pcr_grouped_gemm(const DLTensor* const* a, const DLTensor* const* b,
                             const DLTensor* const* c, const DLTensor* const* d, int32_t count,
                             double alpha, double beta, const pcr_extras* const* extras,
                             int32_t kernel, void* stream, pcr_problem* problem);
/* Mixture-of-experts form: x (T x K) holds the tokens sorted by expert, w (E x K x N) one
 * weight matrix per expert (any strides, e.g. a transposed (E x N x K) stack), `offsets` a
 * GPU vector of int32 or int64 row offsets: E + 1 boundaries (0 first, T last) or E ends
 * (torch._grouped_mm's convention). out (T x N) rows [start_e, end_e) =
 * act(alpha * (scale_a * x rows) @ (w[e] * scale_b[e]) + bias[e]). extras (NULL: none):
 * scale_a x's float32 scales, one value or T (per token); scale_b w's, one value, E (per
 * expert: (E,), (E, 1)), (1, N) (per channel) or E x N (per expert and channel: (E, N),
 * (E, 1, N)); bias out's dtype, (N,) / (1, N) or (E, N) / (E, 1, N); activation and math
 * as pcr_gemm's. fp8 block scales (DeepSeek-V3's MoE recipe): scale_a a (T, ceil(K/128))
 * grid (any strides), scale_b an (E, ceil(K/128), ceil(N/128)) one, each expert's packed
 * with its K blocks contiguous (weight_scale_inv, contiguous, transposed). Offsets are
 * read on the GPU only (no synchronization); rows outside [0, T) are not touched. */
PCR_API int pcr_moe_gemm(const DLTensor* x, const DLTensor* w, const DLTensor* offsets,
                         const DLTensor* out, double alpha, const pcr_extras* extras,
                         int32_t kernel, void* stream, pcr_problem* problem);

/* A problem's identity: the fields its kernel choice may hinge on, as the selection memo
 * keys on them (a grouped problem's M bucketed to a power of two). pcr_problem_identity
 * writes them as int64 values (capacity: at least as many as pcr_problem_identity_names
 * lists); pcr_problem_identity_names lists their pcr_problem field names, in that order,
 * each followed by a space. Tune caches key on the same list. */
PCR_API int pcr_problem_identity(const pcr_problem* problem, int64_t* values, int32_t capacity);
PCR_API const char* pcr_problem_identity_names(void);

/* ---- kernel choice: the ranking's records -------------------------------------- */
/* Why a candidate ranks where it does. */
typedef enum {
  PCR_RANK_RULE = 0,        /* a table rule's pattern names it (`pattern`) */
  PCR_RANK_CALIBRATED = 1,  /* the calibrated model's time (`us`) */
  PCR_RANK_MODEL = 2,       /* the analytic model's time (`us`) */
  PCR_RANK_SECOND_LOOK = 3, /* calibrated (`us`), moved ahead of the first by the second look */
  PCR_RANK_TUNED = 4,       /* the device's tuned entry (pcr_select_tuned) */
  PCR_RANK_PINNED = 5       /* the device's pinned tuned entry: the only candidate */
} pcr_rank_reason;
typedef struct {
  int32_t candidate; /* index into pcr_rank's candidates (pcr_select_rank: a kernel index) */
  int32_t reason;    /* pcr_rank_reason */
  int32_t pattern;   /* PCR_RANK_RULE: the pattern's index in the rule */
  int32_t rule;      /* PCR_RANK_RULE: the rule's index in the table */
  double us;
} pcr_ranked;

/* The kernel families that run on compute capability `cc`, preferred first. */
PCR_API int pcr_kernel_families(int32_t cc, int32_t* families, int32_t capacity, int32_t* count);

/* ---- kernel choice: the selector ------------------------------------------------
 * A launching entry point given PCR_KERNEL_SELECT ranks its problem's kernels the first
 * time the calling thread meets that problem (pcr_problem_identity; remembered per
 * thread) and takes the first candidate that accepts the operands. The ranking: a tuned
 * entry of the problem's device (pcr_select_tuned) first (a pinned one alone), then the
 * package's table and the time model (pycutlass_rt_tables.h: the library's business). Where several
 * epilogues serve a problem, only kernels of its own run it while any exists. A problem
 * no kernel takes fails with PCR_ERR_NO_KERNEL_FOR_ARCH (no kernel for the GPU's arch)
 * or PCR_ERR_UNSUPPORTED, the message listing the candidates and why each refused.
 *
 * The selector asks its provider (pcr_select_provider) for a device's say the first time
 * it ranks a problem of that device, and again after pcr_select_clear: the callback may
 * call pcr_select_tuned (and hand the library its table). It runs on the selecting thread, with no
 * lock of the library held, possibly on several threads at once. */

/* Tuned entries: a problem's identity (pcr_problem_identity's values, the rest zero) and
 * the kernel measured fastest for it; pinned: that kernel alone, or an error naming it. */
#define PCR_IDENTITY_MAX 48
typedef struct {
  int64_t identity[PCR_IDENTITY_MAX];
  int32_t kernel;
  int32_t pinned;
} pcr_tuned;
/* Replaces `device`'s tuned entries (count may be 0) and clears every remembered
 * selection. `source` (NULL: none) names where they came from in messages. `refusal`
 * (NULL: none): every problem of the device then fails with PCR_ERR_UNSUPPORTED and this
 * message instead of being ranked (a strict mode without a current tuned cache). */
PCR_API int pcr_select_tuned(int32_t device, const pcr_tuned* entries, int32_t count,
                             const char* source, const char* refusal);
typedef void (*pcr_select_provider_fn)(int32_t device, void* context);
/* Sets the callback that provides a device's say (NULL: none; each device then has no
 * tuned entries) and clears every remembered selection. */
PCR_API int pcr_select_provider(pcr_select_provider_fn provider, void* context);
/* Called with each problem the selector ranks for a launch (a thread's first meeting),
 * after it ranked it: the problem, its candidates best first (pcr_select_rank's), and
 * the kernel of a tuned entry that could not run it (-1: none). On the selecting
 * thread, with no lock of the library held. */
typedef void (*pcr_select_observer_fn)(const pcr_problem* problem, const pcr_ranked* ranked,
                                       int32_t count, int32_t unused_tuned, void* context);
PCR_API int pcr_select_observe(pcr_select_observer_fn observer, void* context);
/* The selector's ranking of a described problem, as a launch would take it. `verdicts`:
 * pcr_describe's (pcr_kernel_count() of them) to judge the operands too, or NULL to judge
 * the problem alone (pcr_kernel_verdicts'). flags: PCR_SELECT_UNTUNED leaves the tuned
 * entries and any refusal out (the table and model's order: what pycutlass_rt.tune times).
 * Writes up to `capacity` candidates (candidate: the kernel index), best first, and their
 * number to *count; the reasons include PCR_RANK_TUNED and PCR_RANK_PINNED. None: the
 * error the launch would give, *count 0. */
#define PCR_SELECT_UNTUNED 1
PCR_API int pcr_select_rank(const pcr_problem* problem, const pcr_verdict* verdicts, int32_t flags,
                            pcr_ranked* out, int32_t capacity, int32_t* count);
/* Why pcr_select_rank's ranking on the same arguments leaves each kernel out: passed[i]
 * for kernel i < min(count, pcr_kernel_count()), written as verdicts are. PCR_OK and ""
 * for a kernel the ranking holds; else the kernel's verdict when it refuses the problem;
 * else why the selector passes it over: its family does not run on the problem's compute
 * capability (PCR_ERR_NO_KERNEL_FOR_ARCH), a kernel of the problem's own epilogue or one
 * accumulating fp8 fast runs it, a pinned tuned entry names another, the problem has no
 * GEMM work, or the error pcr_select_rank returns (a device's refusal, an impossible pin).
 * Returns PCR_OK whatever the ranking's fate; an error for bad arguments only. */
PCR_API int pcr_select_passed_over(const pcr_problem* problem, const pcr_verdict* verdicts,
                                   int32_t flags, pcr_verdict* passed, int32_t count);
/* Forgets every thread's remembered selections and every device's say (asked again). */
PCR_API int pcr_select_clear(void);

/* ---- Python-object entry points -------------------------------------------------
 * For callers inside a CPython process (loaded with ctypes.PyDLL: the GIL is held).
 * Each operand is a PyObject*: a DLPack capsule ("dltensor" or "dltensor_versioned",
 * left unconsumed), or an object whose type exposes __dlpack_c_exchange_api__. With
 * PCR_STREAM_FROM_PRODUCER the stream is the producer's current work stream when an
 * operand's exchange API offers one, else `stream`. `extras` is NULL, None, or the tuple
 * (bias, scale_a, scale_b, activation, math, activation_alpha, activation_beta, conv, aux,
 * amax, scale_d) of pcr_extras' fields: tensors or None, ints, floats, and conv None or
 * pcr_conv's 8 ints in their order.
 * pcr_py_object* marks those PyObject* arguments (plain void* to the compiler); other
 * pointers, the stream included, are not Python objects.
 * Errors: when a producer fails (its exchange API's dltensor_from_py_object_no_sync or
 * current_work_stream), the call returns PCR_ERR_PYTHON and leaves the producer's Python
 * exception set, so that it propagates as it stands: ctypes.PyDLL raises it, and the
 * builtins below return NULL. A producer that fails without setting one gets a message
 * (pcr_last_error) instead. Any other status comes with no Python exception set. */
typedef void pcr_py_object;
#define PCR_STREAM_FROM_PRODUCER 1
PCR_API int pcr_py_plan_create(pcr_py_object* a, pcr_py_object* b, pcr_py_object* c,
                               pcr_py_object* d, double alpha, double beta, pcr_py_object* extras,
                               int32_t kernel, pcr_problem* problem, pcr_plan** plan);
PCR_API int pcr_py_describe(pcr_py_object* a, pcr_py_object* b, pcr_py_object* c, pcr_py_object* d,
                            double alpha, double beta, pcr_py_object* extras, pcr_problem* out,
                            pcr_verdict* verdicts, int32_t count);
/* a, b, c, d, extras: arrays of `count` objects (c and extras may be NULL, or hold None;
 * an extras entry is pcr_py_gemm's extras tuple). */
PCR_API int pcr_py_grouped_gemm(pcr_py_object** a, pcr_py_object** b, pcr_py_object** c,
                                pcr_py_object** d, pcr_py_object** extras, int32_t count,
                                double alpha, double beta, int32_t kernel, int32_t flags,
                                void* stream, pcr_problem* problem);
/* extras: None or the extras tuple (its scale_a is x's scales, scale_b w's). */
PCR_API int pcr_py_moe_gemm(pcr_py_object* x, pcr_py_object* w, pcr_py_object* offsets,
                            pcr_py_object* out, double alpha, pcr_py_object* extras, int32_t kernel,
                            int32_t flags, void* stream, pcr_problem* problem);
/* pcr_quantize on Python objects (the stream as pcr_py_im2col's). */
PCR_API int pcr_py_quantize(pcr_py_object* x, pcr_py_object* q, pcr_py_object* scale,
                            int32_t granularity, int32_t dynamic, int32_t flags, void* stream);
/* pcr_im2col on Python objects; `conv` is pcr_conv's 8 ints as a tuple. */
PCR_API int pcr_py_im2col(pcr_py_object* x, pcr_py_object* cols, pcr_py_object* conv, int32_t r,
                          int32_t s, int32_t flags, void* stream);
/* pcr_col2im on Python objects (c may be None). */
PCR_API int pcr_py_col2im(pcr_py_object* cols, pcr_py_object* dx, pcr_py_object* c,
                          pcr_py_object* conv, int32_t r, int32_t s, double alpha, double beta,
                          int32_t flags, void* stream);
/* The per-call entry points, as CPython builtins (METH_FASTCALL) only: a PyMethodDef
 * array, ended by a zeroed entry, for PyCFunction_New. A builtin takes its arguments
 * without ctypes' conversions (an 11-argument ctypes call costs microseconds of host time)
 * and returns the status as an int, or raises the producer's exception (see Errors above):
 *   gemm(a, b, c, d, alpha: float, beta: float, extras, kernel: int, flags: int,
 *        stream: int): pcr_gemm on Python objects (no pcr_problem is filled)
 *   plan_run(plan: int, a, b, c, d, extras, flags: int, stream: int): pcr_plan_run_with
 *        on Python objects; with a, b, c, d and extras all None, on the bound tensors
 *   plan_launch(plan: int): the plan on its bound tensors and the producer's current
 *        stream: the fewest arguments for the hottest call (a plan over exchange-API
 *        tensors, e.g. torch) */
PCR_API const void* pcr_py_builtins(void);

/* ---- XLA FFI handler -------------------------------------------------------------
 * Every build (but one configured with PYCUTLASS_RT_XLA_FFI_INCLUDE=OFF) also exports
 * pcr_xla_gemm, an XLA FFI handler (XLA_FFI_Error* (XLA_FFI_CallFrame*), see
 * xla/ffi/api/c_api.h) that pycutlass_rt.jax registers with jax.ffi.register_ffi_target;
 * pcr_build_info's "jax_handler" says whether this build has it. It is not declared here:
 * its types are XLA's. */

#ifdef __cplusplus
}
#endif

#endif /* PYCUTLASS_RT_H_ */
