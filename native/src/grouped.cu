// Grouped GEMMs: many problems, each of its own size, in one kernel launch.
//
// Each group is validated and oriented like a single GEMM (describe); the groups must then
// agree on dtypes, layouts and device. Grouped kernels read every group's size, pointers
// and leading dimensions from GPU arrays, which the fill kernels below write from their
// launch parameters (the list form) or from the offsets tensor (the MoE form): nothing is
// copied from host memory and nothing synchronizes, so a captured graph replays exactly.
#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <string>
#include <vector>

#include "runtime.h"
#include "problem.h"

namespace pcr {
namespace {

// One group's epilogue factors and block-scale grids (GroupEpilogue's entries): null where
// the call has none.
struct Factors {
  const float *scale_a, *scale_b, *row_scales, *col_scales;
  const void* bias_n;
  const float *grid_a, *grid_b;
};

// One group's entry of the GPU arrays, as the list form's fill kernel receives it.
struct Entry {
  int shape[3];
  const void *a, *b, *c;
  void* d;
  int64_t lda, ldb, ldc, ldd;
  Factors f;
};
// Launch parameters stay under the classic 4 KB limit: groups are written in chunks.
constexpr int kChunk = 28;
struct Chunk {
  int first, count;
  Entry e[kChunk];
};
static_assert(sizeof(Chunk) <= 4000, "fill_groups parameters must fit 4 KB");

// The arrays a grouped kernel reads: the problems, and the epilogue's factors (an array
// exists only for a factor the call has).
struct Arrays {
  GroupArrays group;
  GroupEpilogue epilogue;
  void* extra;  // scratch past the arrays (run_grouped's extra_bytes), 16-byte aligned
};

// Group g's entry into the arrays the grouped kernels read.
__device__ void put(const Arrays& out, int g, const Entry& e) {
  const GroupArrays& o = out.group;
  for (int j = 0; j < 3; ++j) o.shape[g][j] = e.shape[j];
  o.a[g] = e.a;
  o.b[g] = e.b;
  o.c[g] = e.c;
  o.d[g] = e.d;
  o.lda[g] = e.lda;
  o.ldb[g] = e.ldb;
  o.ldc[g] = e.ldc;
  o.ldd[g] = e.ldd;
  const GroupEpilogue& x = out.epilogue;
  if (x.scale_a) x.scale_a[g] = e.f.scale_a;
  if (x.scale_b) x.scale_b[g] = e.f.scale_b;
  if (x.row_scales) x.row_scales[g] = e.f.row_scales;
  if (x.col_scales) x.col_scales[g] = e.f.col_scales;
  if (x.bias_n) x.bias_n[g] = e.f.bias_n;
  if (x.scale_grid_a) x.scale_grid_a[g] = e.f.grid_a;
  if (x.scale_grid_b) x.scale_grid_b[g] = e.f.grid_b;
}

__global__ void fill_groups(Chunk chunk, Arrays out) {
  const int i = threadIdx.x;
  if (i < chunk.count) put(out, chunk.first + i, chunk.e[i]);
}

// The MoE form: expert e multiplies rows [start, end) of x into the same rows of out.
struct Moe {
  const void* offsets;
  int offset_bits;  // 32 or 64
  int boundaries;   // 1: E + 1 boundaries (0 first); 0: E ends (torch._grouped_mm)
  int experts;
  int64_t tokens;
  const char* x;
  int64_t x_row;  // bytes from one row of x to the next
  const char* w;
  int64_t w_expert;  // bytes from one expert's matrix to the next
  char* out;
  int64_t out_row;
  int n, k;
  int64_t lda, ldb, ldd;
  // the epilogue's factors: x's per-tensor scale or per-token scales (row e of out reads
  // row_scales + its first row), w's scale(s) and the bias, expert e's `*_expert` elements
  // (bytes for the bias) past expert 0's
  const float *scale_a, *row_scales, *scale_b, *col_scales;
  int64_t scale_b_expert;  // w's scales, whichever their kind (grid_b too)
  const char* bias_n;
  int64_t bias_expert;
  // block-scale grids: x's packed (expert e's at grid_a + its first row * grid_a_row) and
  // w's
  const float *grid_a, *grid_b;
  int64_t grid_a_row;
};

// Expert e's rows [*start, *end) of x and out, as the offsets say, read as their running
// maximum: a decreasing offset (a router's bug) empties an expert's rows rather than let
// two experts write the same rows at once.
__device__ void expert_rows(const Moe& p, int e, int64_t* start, int64_t* end) {
  auto at = [&](int i) -> int64_t {
    return p.offset_bits == 32 ? int64_t(static_cast<const int32_t*>(p.offsets)[i])
                               : static_cast<const int64_t*>(p.offsets)[i];
  };
  const int last_start = p.boundaries ? e : e - 1;  // index of e's start; -1: row 0
  int64_t s = 0;
  for (int i = 0; i <= last_start; ++i) s = max(s, at(i));
  const int64_t t = max(s, at(p.boundaries ? e + 1 : e));
  // rows outside [0, tokens) do not exist: clamp rather than trust the router
  *start = s > p.tokens ? p.tokens : s;
  *end = t > p.tokens ? p.tokens : t;
}

__global__ void fill_moe(Moe p, Arrays out) {
  for (int e = blockIdx.x * blockDim.x + threadIdx.x; e < p.experts; e += gridDim.x * blockDim.x) {
    int64_t start, end;
    expert_rows(p, e, &start, &end);
    char* rows = p.out + start * p.out_row;  // C (never read: beta = 0) and D
    const Factors f{p.scale_a,
                    p.scale_b ? p.scale_b + e * p.scale_b_expert : nullptr,
                    p.row_scales ? p.row_scales + start : nullptr,
                    p.col_scales ? p.col_scales + e * p.scale_b_expert : nullptr,
                    p.bias_n ? p.bias_n + e * p.bias_expert : nullptr,
                    p.grid_a ? p.grid_a + start * p.grid_a_row : nullptr,
                    p.grid_b ? p.grid_b + e * p.scale_b_expert : nullptr};
    put(out, e,
        {{int(end - start), p.n, p.k},
         p.x + start * p.x_row,
         p.w + e * p.w_expert,
         rows,
         rows,
         p.lda,
         p.ldb,
         p.ldd,
         p.ldd,
         f});
  }
}

// K = 0: each expert's rows of out are alpha * (an empty sum) = 0; rows no expert covers
// stay as they are, as with K > 0. One block row per expert, threads across the bytes.
__global__ void zero_moe_rows(Moe p, int64_t row_bytes) {
  for (int e = blockIdx.y; e < p.experts; e += gridDim.y) {
    int64_t start, end;
    expert_rows(p, e, &start, &end);
    for (int64_t r = start + blockIdx.x; r < end; r += gridDim.x)
      for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) p.out[r * p.out_row + i] = 0;
  }
}

// x's block-scale grid (T rows, `kblocks` columns: one scale per token and 128 of K, any
// strides) and where it is.
struct PackedGrid {
  const float* grid;
  int64_t row_stride, kblock_stride;
  int kblocks;
};

// Expert e's rows of x's grid, packed as CUTLASS's grouped block-scaled mainloop reads a
// group's: M-major, K blocks the expert's row count apart, from element kblocks * (its
// first row) of `packed` (T * kblocks floats) on.
__global__ void pack_moe_grid(Moe p, PackedGrid g, float* packed) {
  for (int e = blockIdx.y; e < p.experts; e += gridDim.y) {
    int64_t start, end;
    expert_rows(p, e, &start, &end);
    const int64_t rows = end - start;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * g.kblocks;
         i += gridDim.x * int64_t(blockDim.x)) {
      const int64_t kb = i / rows, r = i % rows;
      packed[start * g.kblocks + i] = g.grid[(start + r) * g.row_stride + kb * g.kblock_stride];
    }
  }
}

size_t round16(size_t bytes) { return (bytes + 15) / 16 * 16; }

// A group's factors: its scales of canonical d's rows (sm) and columns (sn) and its bias,
// each in the GroupEpilogue slot its kind (p's) reads, the others null.
Factors factors_of(const pcr_problem& p, const float* sm, const float* sn, const void* bias) {
  return {p.scale_m == PCR_SCALE_TENSOR ? sm : nullptr,
          p.scale_n == PCR_SCALE_TENSOR ? sn : nullptr,
          p.scale_m == PCR_SCALE_VECTOR ? sm : nullptr,
          p.scale_n == PCR_SCALE_VECTOR ? sn : nullptr,
          p.bias == PCR_BIAS_PER_COLUMN ? bias : nullptr,
          is_grid(p.scale_m) ? sm : nullptr,
          is_grid(p.scale_n) ? sn : nullptr};
}

// From a group's bound operands (canonical: d row-major).
Factors factors_of(const pcr_problem& p, const Bound& bd) {
  return factors_of(p, reinterpret_cast<const float*>(bd.scale_m.ptr),
                    reinterpret_cast<const float*>(bd.scale_n.ptr), bd.bias.ptr);
}

// Which of GroupEpilogue's arrays a problem's epilogue reads: the slots taken (non-null).
Factors factors_of(const pcr_problem& p) {
  static const float kTaken = 0;
  return factors_of(p, &kTaken, &kTaken, &kTaken);
}

constexpr int kArraysPerGroup = 8 + 7;  // GroupArrays' pointers and strides, GroupEpilogue's

size_t arrays_bytes(int count) {
  return round16(round16(sizeof(int[3]) * count) + kArraysPerGroup * 8 * size_t(count));
}

// The arrays of `count` groups laid out in one buffer; an epilogue array only where
// `present` has that factor.
Arrays arrays_at(char* base, int count, const Factors& present) {
  Arrays out{};
  GroupArrays& g = out.group;
  g.shape = reinterpret_cast<int (*)[3]>(base);
  char* p = base + round16(sizeof(int[3]) * count);
  auto next = [&](auto** slot, bool want = true) {
    *slot = want ? reinterpret_cast<std::remove_pointer_t<decltype(slot)>>(p) : nullptr;
    p += 8 * size_t(count);
  };
  next(&g.a);
  next(&g.b);
  next(&g.c);
  next(&g.d);
  next(&g.lda);
  next(&g.ldb);
  next(&g.ldc);
  next(&g.ldd);
  GroupEpilogue& e = out.epilogue;
  next(&e.scale_a, present.scale_a);
  next(&e.scale_b, present.scale_b);
  next(&e.row_scales, present.row_scales);
  next(&e.col_scales, present.col_scales);
  next(&e.bias_n, present.bias_n);
  next(&e.scale_grid_a, present.grid_a);
  next(&e.scale_grid_b, present.grid_b);
  return out;
}

int group_error(int status, int group) {
  std::string why = last_error();
  return set_error(status, "group %d: %s", group, why.c_str());
}

// Kernel k over `groups` GPU-side problems whose arrays `fill` writes into scratch, after
// `before` (the groups' own writes to their outputs) ran: every allocation first, so
// that one that fails leaves the outputs as they were. `extra_bytes` more scratch follow
// the arrays, for `fill` (Arrays::extra).
template <class Before, class Fill>
int run_grouped(const pcr_problem& p, int k, int groups, double alpha, double beta,
                const ActivationArgs& activation, size_t extra_bytes, cudaStream_t stream,
                Before before, Fill fill) {
  Scratch arrays, ws;  // arrays: written on the GPU by `fill`, read by the kernel
  GemmArgs g;
  std::memset(&g, 0, sizeof g);  // prepared launches compare args bytewise
  size_t ws_bytes = 0;
  int st;
  if (groups > 0) {
    if ((st = arrays.allocate(p.device, stream, arrays_bytes(groups) + extra_bytes,
                              ScratchKind::kGroupArrays)))
      return st;
    g.m = int(p.m);
    g.n = int(p.n);
    g.k = int(p.k);
    g.alpha = alpha;
    g.beta = beta;
    g.batch = 1;
    g.groups = groups;
    g.activation = activation;
    const Arrays at = arrays_at(static_cast<char*>(arrays.get()), groups, factors_of(p));
    g.group = at.group;
    g.group_epilogue = at.epilogue;
    g.device = p.device;
    g.sm_count = p.sm_count;
    ws_bytes = workspace_size(k, g, nullptr);
    if ((st = ws.allocate(p.device, stream, ws_bytes, ScratchKind::kWorkspace, true))) return st;
  }
  st = before();
  if (st != PCR_OK || groups == 0) return st;
  if ((st = fill(Arrays{g.group, g.group_epilogue,
                        static_cast<char*>(arrays.get()) + arrays_bytes(groups)})))
    return st;
  return run_prepared(k, g, stream, nullptr, ws.get(), ws_bytes);
}

// What a grouped kernel's epilogue cannot do, named for group g (or the MoE layer, g < 0).
int grouped_epilogue_error(const pcr_problem& q, int g) {
  const std::string who = g < 0 ? std::string("moe_gemm") : "group " + std::to_string(g);
  if (is_grid(q.scale_m) && g >= 0)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "%s: block-scale grids (fp8 1x128 / 128x128 scales) in grouped_gemm's list "
                     "form are not supported; moe_gemm takes them (one grid for x, one per "
                     "expert for w), or run the groups one by one with pcr.gemm",
                     who.c_str());
  if (q.bias == PCR_BIAS_PER_ROW)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "%s: a grouped GEMM's bias runs along d's columns ((N,) or (1, N)), not "
                     "its rows",
                     who.c_str());
  if (q.epilogue == PCR_EPI_AUX || q.out_scale)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "%s: grouped GEMMs write no aux, amax or scale_d (no grouped kernel has "
                     "that epilogue)",
                     who.c_str());
  return PCR_OK;
}

bool same_activation(const ActivationArgs& x, const ActivationArgs& y) {
  return x.kind == y.kind && x.alpha == y.alpha && x.beta == y.beta;
}

}  // namespace

int grouped_gemm(const DLTensor* const* a, const DLTensor* const* b, const DLTensor* const* c,
                 const DLTensor* const* d, int32_t count, double alpha, double beta,
                 const pcr_extras* const* extras, int32_t kernel, void* stream_ptr,
                 pcr_problem* out) {
  clear_error();
  pcr_problem local;
  pcr_problem& p = out ? *out : local;
  std::memset(&p, 0, sizeof p);
  p.grouped = PCR_GROUPED_LIST;
  if (count < 0 || (count > 0 && (!a || !b || !d)))
    return set_error(PCR_ERR_INVALID_ARGUMENT, "grouped GEMM: need count >= 0 and a, b, d");
  if (count == 0) return PCR_OK;
  std::vector<pcr_problem> probs(count);
  std::vector<Bound> bounds(count);
  for (int g = 0; g < count; ++g) {
    const DLTensor* cg = c ? c[g] : nullptr;
    if (!a[g] || !b[g] || !d[g])
      return set_error(PCR_ERR_INVALID_ARGUMENT, "group %d: a, b and d are required", g);
    // a group without c reads no C, whatever beta is (its d is zeroed for the kernel)
    const pcr_extras* xg = extras ? extras[g] : nullptr;
    int st = describe(a[g], b[g], cg, d[g], alpha, cg ? beta : 0.0, xg, &probs[g], &bounds[g],
                      PCR_GROUPED_LIST);
    if (st != PCR_OK) return group_error(st, g);
    const pcr_problem& q = probs[g];
    if ((st = grouped_epilogue_error(q, g))) return st;
    if (q.batch != 1 || q.host)
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "group %d: grouped GEMMs take 2-D GPU matrices (a batch or a host "
                       "array was given)",
                       g);
  }
  // No group's output may share an element with another group's output or input: the
  // groups run at once, so they would race. Spans sorted by start: only operands whose
  // byte ranges meet are compared element-wise. (Within a group, describe checked.)
  {
    struct Span {
      uintptr_t lo, hi;
      int group;
      const Matrix* m;
      const char* name;
    };
    std::vector<Span> spans;
    for (int g = 0; g < count; ++g) {
      const Bound& bd = bounds[g];
      const Matrix* ops[] = {&bd.d, &bd.a, &bd.b, bd.c.ptr ? &bd.c : nullptr};
      const char* names[] = {"d", "a", "b", "c"};
      for (int i = 0; i < 4; ++i) {
        if (!ops[i]) continue;
        Span s{0, 0, g, ops[i], names[i]};
        ops[i]->extent(&s.lo, &s.hi);
        if (s.lo < s.hi) spans.push_back(s);
      }
    }
    std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.lo < y.lo; });
    for (size_t i = 0; i < spans.size(); ++i)
      for (size_t j = i + 1; j < spans.size() && spans[j].lo < spans[i].hi; ++j) {
        const Span &x = spans[i], &y = spans[j];
        const bool x_out = x.m == &bounds[x.group].d, y_out = y.m == &bounds[y.group].d;
        if (x.group == y.group || !(x_out || y_out) || !share_elements(*x.m, *y.m)) continue;
        // the later group names itself where both are outputs
        const bool x_names = x_out && !(y_out && y.group > x.group);
        const Span& out = x_names ? x : y;
        const Span& other = x_names ? y : x;
        return set_error(PCR_ERR_OVERLAP,
                         "group %d's d shares memory with group %d's %s; the groups run at "
                         "once, so every group needs an output of its own",
                         out.group, other.group, other.name);
      }
  }
  // Groups without work (M, N or K = 0) never reach the kernel: their layouts and
  // alignments (any, for an empty matrix) do not count. The first one with work leads.
  auto works = [&](int g) { return probs[g].m && probs[g].n && probs[g].k; };
  int lead = 0;
  while (lead < count - 1 && !works(lead)) ++lead;
  for (int g = 0; g < count; ++g) {
    const pcr_problem &q = probs[g], &q0 = probs[lead];
    if (q.dtype_a != q0.dtype_a || q.dtype_d != q0.dtype_d || q.device != q0.device ||
        (works(g) && (q.layout_a != q0.layout_a || q.layout_b != q0.layout_b)))
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "group %d differs from group %d in dtypes, layouts (after orienting d "
                       "row-major) or device; one grouped launch needs them alike",
                       g, lead);
  }
  // The launch's scales: a vector where a group with work has one, where a group's single
  // value serves as its vector of one row (column); the richest epilogue of the groups.
  int scale_m = PCR_SCALE_NONE, scale_n = PCR_SCALE_NONE, epilogue = PCR_EPI_LINEAR;
  for (int g = 0; g < count; ++g)
    if (works(g)) {
      scale_m = std::max(scale_m, int(probs[g].scale_m));
      scale_n = std::max(scale_n, int(probs[g].scale_n));
      epilogue = std::max(epilogue, int(probs[g].epilogue));
    }
  auto fits = [](int kind, int launch, int64_t extent) {
    return kind == launch ||
           (kind == PCR_SCALE_TENSOR && launch == PCR_SCALE_VECTOR && extent == 1);
  };
  for (int g = 0; g < count; ++g) {
    const pcr_problem &q = probs[g], &q0 = probs[lead];
    if (works(g) && (!fits(q.scale_m, scale_m, q.m) || !fits(q.scale_n, scale_n, q.n) ||
                     q.bias != q0.bias || q.fast_accum != q0.fast_accum ||
                     !same_activation(bounds[g].activation, bounds[lead].activation)))
      return set_error(PCR_ERR_INVALID_ARGUMENT,
                       "group %d differs from group %d in its extras (which scales, bias, "
                       "activation and math it has); one grouped launch applies them alike",
                       g, lead);
  }
  p = probs[lead];
  p.scale_m = scale_m;
  p.scale_n = scale_n;
  p.epilogue = epilogue;
  p.grouped = PCR_GROUPED_LIST;
  p.batch = count;
  p.staged = 0;
  p.transposed = 0;
  p.c_mode = beta != 0.0 ? PCR_C_READ : PCR_C_NONE;
  p.dtype_c = p.c_mode != PCR_C_NONE ? p.dtype_d : PCR_DTYPE_INVALID;
  p.align_c = 16;
  for (int g = 0; g < count; ++g) {
    const pcr_problem& q = probs[g];
    if (!works(g)) continue;
    p.m = std::max(p.m, q.m);
    p.n = std::max(p.n, q.n);
    p.k = std::max(p.k, q.k);
    p.align_a = std::min(p.align_a, q.align_a);
    p.align_b = std::min(p.align_b, q.align_b);
    p.align_d = std::min(p.align_d, q.align_d);
    if (q.c_mode == PCR_C_READ) p.align_c = std::min(p.align_c, q.align_c);
    if (q.bias != PCR_BIAS_NONE) p.align_bias = std::min(p.align_bias, q.align_bias);
  }

  // The kernel first: a call that needs a selection returns before any GPU work.
  int k = -1;
  int st = kernel_for(p, Bound{}, kernel, &k);
  if (st != PCR_OK) return st;
  DeviceGuard guard;
  if ((st = guard.set(p.device))) return st;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  // Per-group work before the kernel (d = beta * c where K == 0, C brought into d where
  // the kernel cannot read it, zeros where beta applies but no c), after the allocations.
  std::vector<Entry> entries;
  for (int g = 0; g < count; ++g) {
    pcr_problem q = probs[g];
    if (q.m == 0 || q.n == 0 || q.k == 0) continue;
    q.scale_m = p.scale_m, q.scale_n = p.scale_n;  // a single value as its vector of one
    GemmArgs ga = gemm_args(q, bounds[g]);
    entries.push_back({{ga.m, ga.n, ga.k},
                       ga.a,
                       ga.b,
                       ga.c,
                       ga.d,
                       ga.lda,
                       ga.ldb,
                       ga.ldc,
                       ga.ldd,
                       factors_of(q, bounds[g])});
  }
  auto before = [&] {
    for (int g = 0; g < count; ++g) {
      const pcr_problem& q = probs[g];
      const Bound& bd = bounds[g];
      if (q.m == 0 || q.n == 0) continue;
      const bool has_c = q.c_mode != PCR_C_NONE;
      int st = PCR_OK;
      if (q.k == 0)  // d = act(beta * c + bias): the scaled product is 0
        st = launch_scale_copy(has_c ? &bd.c : nullptr, bd.d, has_c ? beta : 0.0, stream,
                               q.bias != PCR_BIAS_NONE ? &bd.bias : nullptr, bd.activation);
      else if (beta != 0.0 && q.c_mode != PCR_C_READ)
        st = launch_scale_copy(has_c ? &bd.c : nullptr, bd.d, 1.0, stream);
      if (st != PCR_OK) return st;
    }
    return int(PCR_OK);
  };
  return run_grouped(p, k, int(entries.size()), alpha, beta, bounds[lead].activation, 0, stream,
                     before, [&](const Arrays& arrays) {
                       for (size_t first = 0; first < entries.size(); first += kChunk) {
                         Chunk chunk;
                         chunk.first = int(first);
                         chunk.count = int(std::min<size_t>(kChunk, entries.size() - first));
                         std::copy_n(&entries[first], chunk.count, chunk.e);
                         fill_groups<<<1, kChunk, 0, stream>>>(chunk, arrays);
                       }
                       return cuda_status(cudaGetLastError(), "grouped GEMM arrays");
                     });
}

namespace {

// A MoE layer's per-expert extra (w's scales, the bias) as expert 0's slice, which
// describe validates as one GEMM's, and the elements from one expert's slice to the next
// (0: shared by every expert).
struct ExpertSlice {
  DLTensor view;
  int64_t shape[2], strides[2];
  int64_t step = 0;
};

// `t` of E experts: with a leading expert dimension (E, ...) when `per_expert`, else shared.
// The slice drops that dimension: (E,) -> (1,), (E, N) -> (N,), (E, 1, N) -> (1, N).
void slice_expert(const DLTensor& t, bool per_expert, const void* no_expert, ExpertSlice* out) {
  out->view = t;
  if (!per_expert) return;
  const int nd = t.ndim - 1;
  for (int i = 0; i < nd; ++i) {
    out->shape[i] = t.shape[i + 1];
    int64_t s = 1;
    for (int j = i + 2; j < t.ndim; ++j) s *= t.shape[j];
    out->strides[i] = t.strides ? t.strides[i + 1] : s;
  }
  int64_t expert_stride = 1;
  for (int j = 1; j < t.ndim; ++j) expert_stride *= t.shape[j];
  out->step = t.strides ? t.strides[0] : expert_stride;
  if (nd == 0) out->shape[0] = 1, out->strides[0] = 1;  // (E,): one value per expert
  out->view.ndim = nd == 0 ? 1 : nd;
  out->view.shape = out->shape;
  out->view.strides = out->strides;
  if (t.shape[0] == 0) out->view.data = const_cast<void*>(no_expert), out->view.byte_offset = 0;
}

// Whether a MoE layer's w scales or bias `t` has a leading expert dimension: scale_b one
// value (shared), (E,) / (E, 1) / (E, 1, 1) per expert, (1, N) shared per channel,
// (E, N) / (E, 1, N) per expert and channel; bias (N,) / (1, N) shared, (E, N) / (E, 1, N)
// per expert. Anything else is an error naming these.
int per_expert_of(const DLTensor& t, const char* name, bool is_bias, int64_t experts, int64_t n,
                  int64_t k, bool* per_expert) {
  int64_t numel = 1;
  for (int i = 0; i < t.ndim; ++i) numel *= t.shape[i];
  const int64_t* s = t.shape;
  const bool lead = t.ndim >= 1 && s[0] == experts;
  bool ok = false, per = false;
  if (!is_bias && numel == 1) {  // with one expert, shared and per expert are the same
    ok = true;
  } else if (t.ndim == 1) {
    ok = is_bias ? s[0] == n : s[0] == experts;
    per = !is_bias;
  } else if (t.ndim == 2) {
    if (s[0] == 1 && s[1] == n)
      ok = true;  // shared per channel (E = 1: the same)
    else if (lead && (s[1] == n || (!is_bias && s[1] == 1)))
      ok = per = true;
  } else if (t.ndim == 3) {
    ok = per = lead && s[1] == 1 && (s[2] == n || (!is_bias && s[2] == 1));
    if (!is_bias && lead && s[1] == (k + 127) / 128 && s[2] == (n + 127) / 128)
      ok = per = true;  // one block-scale grid per expert
  }
  *per_expert = per;
  if (ok) return PCR_OK;
  return set_error(PCR_ERR_INVALID_ARGUMENT,
                   is_bias ? "%s for %" PRId64 " experts of %" PRId64
                             " outputs: give (N,) or (1, N) (shared), or (E, N) / (E, 1, N) "
                             "(one per expert)"
                           : "%s for %" PRId64 " experts of %" PRId64
                             " outputs: give one value (shared), (E,) (one per expert), "
                             "(1, N) (per channel, shared), (E, N) / (E, 1, N) (per expert "
                             "and channel) or (E, ceil(K/128), ceil(N/128)) (per expert and "
                             "128 x 128 block)",
                   name, experts, n);
}

}  // namespace

int moe_gemm(const DLTensor* x, const DLTensor* w, const DLTensor* offsets, const DLTensor* out_t,
             double alpha, const pcr_extras* extras, int32_t kernel, void* stream_ptr,
             pcr_problem* out) {
  clear_error();
  pcr_problem local;
  pcr_problem& p = out ? *out : local;
  std::memset(&p, 0, sizeof p);
  p.grouped = PCR_GROUPED_MOE;
  if (!x || !w || !offsets || !out_t)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "moe_gemm: x, w, offsets and out are required");
  const pcr_extras none{};
  const pcr_extras& ex = extras ? *extras : none;
  if (int st = check_tensors({{x, "x"},
                              {w, "w"},
                              {offsets, "offsets"},
                              {out_t, "out"},
                              {ex.bias, "bias"},
                              {ex.scale_a, "scale_a"},
                              {ex.scale_b, "scale_b"}}))
    return st;
  if (ex.conv || ex.aux || ex.amax || ex.scale_d)
    return set_error(PCR_ERR_UNSUPPORTED,
                     "moe_gemm's extras are bias, scale_a (x's scales), scale_b (w's), the "
                     "activation and math; it writes no aux, amax or scale_d");
  if (w->ndim != 3)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "w must be 3-D (experts, K, N), got a %d-D tensor",
                     w->ndim);
  const int64_t experts = w->shape[0];
  const int64_t w_step = w->strides ? w->strides[0] : w->shape[1] * w->shape[2];
  if (experts < 0 || experts >= (int64_t(1) << 31) || w_step < 0)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "w has a bad expert dimension or stride");
  // x (T, K) @ w[e] (K, N) -> out (T, N), validated as one GEMM on expert 0's matrix. With
  // no expert (E = 0) w has no storage: an unread stand-in lets x and out be validated.
  alignas(16) static const char kNoExpert[16] = {};
  DLTensor w0 = *w;
  w0.ndim = 2;
  w0.shape = w->shape + 1;
  w0.strides = w->strides ? w->strides + 1 : nullptr;
  if (experts == 0) w0.data = const_cast<char*>(kNoExpert), w0.byte_offset = 0;
  // w's scales and the bias likewise: expert 0's slices, and the step to the next
  const int64_t n_out = w->shape[2];
  ExpertSlice scale_w, bias;
  int st;
  pcr_extras ex0 = ex;
  bool per_expert = false;
  if (ex.scale_b) {
    if ((st = per_expert_of(*ex.scale_b, "scale_b", false, experts, n_out, w->shape[1],
                            &per_expert)))
      return st;
    slice_expert(*ex.scale_b, per_expert, kNoExpert, &scale_w);
    ex0.scale_b = &scale_w.view;
  }
  if (ex.bias) {
    if ((st = per_expert_of(*ex.bias, "bias", true, experts, n_out, w->shape[1], &per_expert)))
      return st;
    slice_expert(*ex.bias, per_expert, kNoExpert, &bias);
    ex0.bias = &bias.view;
  }
  Bound bd;
  st = describe(x, &w0, nullptr, out_t, alpha, 0.0, &ex0, &p, &bd, PCR_GROUPED_MOE);
  if (st != PCR_OK) return st;
  if ((st = grouped_epilogue_error(p, -1))) return st;
  if (scale_w.step < 0 || bias.step < 0)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "scale_b and bias need a nonnegative expert stride");
  if (p.transposed || p.host || p.layout_a != PCR_ROW_MAJOR)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "moe_gemm takes row-major GPU x and out (one token per row)");
  Matrix every_expert = bd.b;  // describe checked out against expert 0's matrix only
  every_expert.batch = experts, every_expert.sb = w_step;
  if (overlaps(bd.d, every_expert))
    return set_error(PCR_ERR_OVERLAP, "out overlaps w in memory; pass a separate output");
  const int esize = bd.b.esize;
  if ((w_step * esize) % 16 && experts > 1) p.align_b = std::min(p.align_b, 2);
  // offsets: int32 or int64, contiguous, on x's GPU; E + 1 boundaries or E ends
  if (offsets->ndim != 1 || offsets->dtype.code != kDLInt || offsets->dtype.lanes != 1 ||
      (offsets->dtype.bits != 32 && offsets->dtype.bits != 64))
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "offsets must be a 1-D int32 or int64 vector of row offsets");
  const int64_t len = offsets->shape[0];
  if (len != experts && len != experts + 1)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "offsets has %" PRId64 " entries for %" PRId64
                     " experts: give E + 1 "
                     "boundaries (0 first) or E ends",
                     len, experts);
  if (len > 1 && offsets->strides && offsets->strides[0] != 1)
    return set_error(PCR_ERR_INVALID_ARGUMENT, "offsets must be contiguous");
  if (offsets->device.device_type != kDLCUDA && offsets->device.device_type != kDLCUDAManaged)
    return set_error(PCR_ERR_DEVICE_MISMATCH, "offsets must be on the GPU (read there only)");
  if (offsets->device.device_id != p.device)
    return set_error(PCR_ERR_DEVICE_MISMATCH, "offsets is on cuda:%d but out is on cuda:%d",
                     offsets->device.device_id, p.device);
  p.grouped = PCR_GROUPED_MOE;
  p.batch = experts;

  if (p.m == 0 || p.n == 0 || experts == 0) return PCR_OK;
  int k = -1;
  if ((st = kernel_for(p, bd, kernel, &k))) return st;
  DeviceGuard guard;
  if ((st = guard.set(p.device))) return st;
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  Moe moe;
  moe.offsets = static_cast<const char*>(offsets->data) + offsets->byte_offset;
  moe.offset_bits = offsets->dtype.bits;
  moe.boundaries = len == experts + 1;
  moe.experts = int(experts);
  moe.tokens = p.m;
  moe.x = bd.a.ptr;
  moe.x_row = bd.a.s0 * esize;
  moe.w = bd.b.ptr;
  moe.w_expert = w_step * esize;
  moe.out = bd.d.ptr;
  moe.out_row = bd.d.s0 * bd.d.esize;
  moe.n = int(p.n);
  moe.k = int(p.k);
  moe.lda = bd.lda;
  moe.ldb = bd.ldb;
  moe.ldd = bd.ldd;
  const Factors f = factors_of(p, bd);
  moe.scale_a = f.scale_a;
  moe.row_scales = f.row_scales;
  moe.scale_b = f.scale_b;
  moe.col_scales = f.col_scales;
  moe.scale_b_expert = scale_w.step;
  moe.bias_n = static_cast<const char*>(f.bias_n);
  moe.bias_expert = bias.step * bd.d.esize;
  // Block-scale grids, as CUTLASS's grouped block-scaled mainloop reads them: each
  // expert's packed. w's must be so already (a checkpoint's weight_scale_inv (E,
  // ceil(N/128), ceil(K/128)), contiguous, transposed); x's, any strides, is packed per
  // expert by pack_moe_grid into scratch past the arrays.
  const int64_t kblocks = (p.k + 127) / 128;
  size_t packed_bytes = 0;
  PackedGrid pack{};
  if (is_grid(p.scale_m)) {
    const GemmArgs ga = gemm_args(p, bd);
    // a dimension of one block has no stride to keep (load_grid gives it 0)
    const int64_t nblocks = (p.n + 127) / 128;
    if ((kblocks > 1 && ga.scale_b_kblock_stride != 1) ||
        (nblocks > 1 && ga.scale_b_group_stride != kblocks))
      return set_error(PCR_ERR_UNSUPPORTED,
                       "moe_gemm's block scales: each expert's w grid (ceil(K/128), "
                       "ceil(N/128)) must be packed with its K blocks contiguous (strides (1, "
                       "%" PRId64
                       "): a checkpoint's weight_scale_inv (E, ceil(N/128), "
                       "ceil(K/128)), contiguous, transposed); got strides (%" PRId64 ", %" PRId64
                       ")",
                       kblocks, ga.scale_b_kblock_stride, ga.scale_b_group_stride);
    pack = {f.grid_a, ga.scale_a_group_stride, ga.scale_a_kblock_stride, int(kblocks)};
    packed_bytes = size_t(p.m) * size_t(kblocks) * sizeof(float);
    moe.grid_a_row = kblocks;  // set to the packed grid in fill below
    moe.grid_b = f.grid_b;
  }
  if (p.k == 0) {
    if (p.bias != PCR_BIAS_NONE || p.activation != PCR_ACT_NONE)
      return set_error(PCR_ERR_UNSUPPORTED,
                       "moe_gemm with K = 0 and a bias or activation: each expert's rows would "
                       "be act(bias), which no kernel writes; K = 0 without them gives zeros");
    const int64_t row_bytes = p.n * bd.d.esize;
    dim3 grid(unsigned(std::min<int64_t>(p.m, 256)), unsigned(std::min<int64_t>(experts, 65535)));
    zero_moe_rows<<<grid, 256, 0, stream>>>(moe, row_bytes);
    return cuda_status(cudaGetLastError(), "MoE GEMM with K = 0");
  }
  return run_grouped(
      p, k, int(experts), alpha, 0.0, bd.activation, packed_bytes, stream,
      [] { return int(PCR_OK); },
      [&](const Arrays& arrays) {
        if (pack.grid) {
          moe.grid_a = static_cast<const float*>(arrays.extra);
          dim3 grid(unsigned(std::min<int64_t>((p.m * kblocks + 255) / 256, 64)),
                    unsigned(std::min<int64_t>(experts, 65535)));
          pack_moe_grid<<<grid, 256, 0, stream>>>(moe, pack, static_cast<float*>(arrays.extra));
        }
        int blocks = int(std::min<int64_t>((experts + 127) / 128, 1024));
        fill_moe<<<blocks, 128, 0, stream>>>(moe, arrays);
        return cuda_status(cudaGetLastError(), "MoE GEMM arrays");
      });
}

}  // namespace pcr
