// What a described GEMM's operand addresses allow: alignments, how C is read, which operands
// are staged through aligned scratch and how (stage_layout), and where its columns split.
#include "runtime.h"
#include "problem.h"

namespace pcr {

namespace {

// A problem this large (multiply-adds), or with a K loop this long, runs its misaligned
// operands through aligned scratch: a pass over each costs far less than the any-alignment
// kernels' slowness. Their 2-byte loads cost ~0.7 us per 32-deep K step of a tile on the
// H200: the held-out corpus sweep (heuristics/eval) timed them 4-20x slower than the
// aligned kernels at every size, 19 us against 3 us at 1 x 3072 x 768 and 69 us against
// 5 us at 1 x 64 x 3072, where a staged copy costs a launch of a few microseconds.
constexpr double kStageMinMacs = double(1 << 27);
constexpr int64_t kStageMinK = 512;

// Whether the build holds a kernel that reads p's operands at any alignment (p's dtypes,
// layouts and epilogue): a small misaligned problem runs there; where none does (the fp8
// kernels, a filtered build), staging is the only way it runs at all.
bool any_alignment_kernel(const pcr_problem& p) {
  for (int i = 0; i < kKernelCount; ++i) {
    const pcr_kernel_desc& kd = kKernels[i]->info;
    if (kd.align_a == 1 && !kd.grouped && kd.dtype_a == p.dtype_a && kd.dtype_b == p.dtype_b &&
        kd.dtype_d == p.dtype_d && kd.layout_a == p.layout_a && kd.layout_b == p.layout_b &&
        epilogue_serves(kd.epilogue, p.epilogue))
      return true;
  }
  return false;
}

// Marks the operands a device problem copies into 16-byte-aligned scratch (odd leading
// dimensions, offset views), so that the TMA / cp.async kernels can run it: a large one, or
// one with a long K loop, always; a small one where no any-alignment kernel can take it. A C
// that D's kernel cannot read in place is copied into D (or D's scratch) first.
//
// Batched problems are not staged; the any-alignment kernels run them. Staging pads each
// copy's contiguous extent, so a fused epilogue's problem is staged only where that
// extent is K (zeros add nothing) or D's N with no vector along N (bias, column scales),
// which would otherwise be read past its end.
//
// A split problem's part (column_part) runs the whole's kernel, which reads aligned
// operands: its misaligned ones are staged whatever its size (`small_may_stay` false).
void stage_misaligned(pcr_problem* p, bool small_may_stay) {
  if (p->host || p->k == 0 || p->batch > 1) return;
  const bool aligned = p->align_a >= 16 && p->align_b >= 16 && p->align_d >= 16 &&
                       (p->c_mode != PCR_C_READ || p->align_c >= 16);
  if (aligned) return;  // (before the registry walk below: the common case pays nothing)
  if (small_may_stay && double(p->m) * double(p->n) * double(p->k) < kStageMinMacs &&
      p->k < kStageMinK && any_alignment_kernel(*p))
    return;
  // a padded N would read b's per-column block scales past their end
  if (p->align_d < 16 && p->scale_n == PCR_SCALE_GROUPS) return;
  if (p->epilogue != PCR_EPI_LINEAR &&
      ((p->align_a < 16 && p->layout_a != PCR_ROW_MAJOR) ||
       (p->align_b < 16 && p->layout_b != PCR_COL_MAJOR) ||
       (p->align_d < 16 && (p->bias == PCR_BIAS_PER_COLUMN || p->scale_n == PCR_SCALE_VECTOR))))
    return;
  if (p->align_a < 16) p->staged |= PCR_STAGED_A, p->align_a = 16;
  if (p->align_b < 16) p->staged |= PCR_STAGED_B, p->align_b = 16;
  if (p->align_d < 16) p->staged |= PCR_STAGED_D, p->align_d = 16;
  if (p->c_mode == PCR_C_READ && (p->align_c < 16 || (p->staged & PCR_STAGED_D)))
    p->c_mode = PCR_C_COPIED;
  if (p->c_mode == PCR_C_COPIED) p->align_c = p->align_d;
}

// Below this many bytes of B, a padded copy of B costs less than the split's two more
// launches (graph replays on the H200: at 8 x 2049 x 2048, 8.4 MB of B, 18.5 us split
// against 14.6 unsplit; even at 16.8 MB; the split 7 us faster at 33.5 MB).
constexpr double kSplitMinBytes = double(16 << 20);

// Where a staged problem's columns split (pcr_problem.split_n), or 0: where D's padded N is
// all that stages B, B's columns contiguous along K. The copy is a pass over all of B (the
// weights of an odd vocabulary's projection: 133 MB at 51866 x 1280, twice cuBLAS's whole
// call at M = 4); columns up to a multiple of 16 bytes of D read B in place instead, and
// the last few stage only their own columns, as a second launch of the same kernel.
int64_t split_column(const pcr_problem& p, const Bound& bd) {
  // (a block-scale grid along N splits only at whole blocks: never, here)
  if (p.op != PCR_OP_GEMM || !(p.staged & PCR_STAGED_D) || (p.staged & PCR_STAGED_B) ||
      is_grid(p.scale_n) || p.layout_b != PCR_COL_MAJOR ||
      double(p.k) * double(p.n) * bd.b.esize < kSplitMinBytes)
    return 0;
  // an N that is not a multiple of 16 bytes of D is padded, and with it B's columns: the
  // whole problem's staging copies B
  const int64_t n0 = p.n / (16 / bd.d.esize) * (16 / bd.d.esize);
  if (n0 == 0 || n0 == p.n) return 0;
  pcr_problem head;
  Bound head_bd;
  column_part(p, bd, 0, n0, &head, &head_bd);
  return (stage_layout(head, head_bd, nullptr).staged & PCR_STAGED_B) ? 0 : n0;
}

}  // namespace

// What the operands in bd allow: p's alignments, how the kernel reads C (use_c: beta != 0),
// what staging copies and where it splits. describe's last step on a GEMM, and
// column_part's on each part (`part`: every misaligned operand staged, no further split).
void place(pcr_problem* p, Bound* bd, bool use_c, bool part) {
  const Matrix &A = bd->a, &B = bd->b, &C = bd->c, &D = bd->d;
  p->align_a = alignment_bytes(A, p->layout_a, bd->lda);
  p->align_b = alignment_bytes(B, p->layout_b, bd->ldb);
  p->align_d = alignment_bytes(D, PCR_ROW_MAJOR, bd->ldd);
  if (p->bias) {  // the address only: the vector's length is D's extent, aligned as D is
    uintptr_t v = reinterpret_cast<uintptr_t>(bd->bias.ptr);
    for (p->align_bias = 16; p->align_bias > bd->bias.esize && v % p->align_bias;)
      p->align_bias /= 2;
  }
  p->staged = 0;
  p->c_mode = PCR_C_NONE;
  p->align_c = 0;
  if (use_c) {
    const bool c_is_d =
        C.ptr == D.ptr && C.s0 == D.s0 && C.s1 == D.s1 && C.sb == D.sb && C.dtype == D.dtype;
    int lc;
    int64_t ldc;
    // C feeds the kernel's epilogue directly when it looks like D (row-major, D's dtype,
    // 16-byte friendly); anything else (other layout or dtype, broadcast strides) is
    // first copied into D, and the kernel then reads D as C.
    if (c_is_d ||
        (C.dtype == D.dtype && layout_of(C, &lc, &ldc) && lc == PCR_ROW_MAJOR && C.s0 > 0)) {
      p->c_mode = PCR_C_READ;
      bd->ldc = c_is_d ? bd->ldd : ldc;
      p->align_c = alignment_bytes(C, PCR_ROW_MAJOR, bd->ldc);
    } else {
      p->c_mode = PCR_C_COPIED;
      p->align_c = p->align_d;
    }
  } else {
    bd->c = Matrix{};
  }
  stage_misaligned(p, !part);
  p->split_n = part ? 0 : split_column(*p, *bd);
}

void column_part(const pcr_problem& p, const Bound& bd, int64_t n0, int64_t n, pcr_problem* part,
                 Bound* pb) {
  *part = p;
  *pb = bd;
  part->n = n;
  // b, c, d and the vectors along N (bias, column scales) lose the other columns; a
  // per-row bias (stride 0 along N) and one-value scales stay as they are
  for (Matrix* m : {&pb->b, &pb->c, &pb->d, &pb->bias, &pb->scale_n, &pb->aux}) {
    if (!m->ptr || m->cols != p.n) continue;
    m->ptr += n0 * m->s1 * m->esize;
    m->cols = n;
  }
  place(part, pb, p.c_mode != PCR_C_NONE, true);
}

Staging stage_layout(const pcr_problem& p, const Bound& bd, char* base) {
  Staging st{p, bd, 0};
  st.problem.staged = 0;
  if (!p.staged) return st;
  Matrix* mats[] = {&st.bound.a, &st.bound.b, &st.bound.d};
  const int bits[] = {PCR_STAGED_A, PCR_STAGED_B, PCR_STAGED_D};
  int64_t* lds[] = {&st.bound.lda, &st.bound.ldb, &st.bound.ldd};
  bool row[] = {p.layout_a == PCR_ROW_MAJOR, p.layout_b == PCR_ROW_MAJOR, true};
  // Each operand's (rows, cols) as dimensions of the problem: 0 = M, 1 = N, 2 = K.
  const int dims[3][2] = {{0, 2}, {2, 1}, {0, 1}};
  int64_t ext[3] = {p.m, p.n, p.k};
  int staged = p.staged;
  // Pad the contiguous extent of every staged operand; an operand whose extent grew is
  // staged too (zero-filled). Two rounds reach the fixed point: padding only grows.
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < 3; ++i) {
      int64_t per16 = 16 / mats[i]->esize;
      int inner = dims[i][row[i] ? 1 : 0];
      if (staged & bits[i]) ext[inner] = (ext[inner] + per16 - 1) / per16 * per16;
      for (int j = 0; j < 3; ++j)
        if (ext[dims[j][0]] != mats[j]->rows || ext[dims[j][1]] != mats[j]->cols) staged |= bits[j];
    }
  st.problem.m = ext[0];
  st.problem.n = ext[1];
  st.problem.k = ext[2];
  for (int i = 0; i < 3; ++i) {
    if (!(staged & bits[i])) continue;
    Matrix& m = *mats[i];
    m.rows = ext[dims[i][0]];
    m.cols = ext[dims[i][1]];
    // rows start on 128-byte lines: TMA boxes of rows that straddle lines load slower
    int64_t per128 = 128 / m.esize;
    int64_t ld = ((row[i] ? m.cols : m.rows) + per128 - 1) / per128 * per128;
    m.ptr = base ? base + st.bytes : nullptr;
    m.s0 = row[i] ? ld : 1;
    m.s1 = row[i] ? 1 : ld;
    *lds[i] = ld;
    st.bytes += (size_t((row[i] ? m.rows : m.cols) * ld * m.esize) + 255) / 256 * 256;
  }
  st.staged = staged;
  int* aligns[] = {&st.problem.align_a, &st.problem.align_b, &st.problem.align_d};
  for (int i = 0; i < 3; ++i)
    if (staged & bits[i]) *aligns[i] = 16;
  if ((staged & PCR_STAGED_D) && st.problem.c_mode != PCR_C_NONE) {  // C into D's scratch
    st.problem.c_mode = PCR_C_COPIED;
    st.problem.align_c = 16;
  }
  return st;
}

}  // namespace pcr
