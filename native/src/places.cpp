// Where a problem's operands live: all on one GPU or all on the host, and no output sharing
// memory with another operand (or, within a batch, with itself).
#include <algorithm>
#include <cinttypes>
#include <utility>

#include "runtime.h"
#include "problem.h"

namespace pcr {

bool overlaps(const Matrix& x, const Matrix& y) {
  uintptr_t xl, xh, yl, yh;
  x.extent(&xl, &xh);
  y.extent(&yl, &yh);
  return xl < xh && yl < yh && xl < yh && yl < xh;
}

// Whether two matrices share an element. Byte ranges that meet decide, except for two
// row-major views with one row pitch (column blocks of one output, e.g. fused Q, K and V
// projections), which share an element only if their rows and their columns, as offsets
// within the pitch, both meet.
bool share_elements(const Matrix& x, const Matrix& y) {
  if (!overlaps(x, y)) return false;
  const int64_t pitch = x.s0;
  if (x.esize != y.esize || x.s1 != 1 || y.s1 != 1 || y.s0 != pitch || pitch <= 0 ||
      x.cols > pitch || y.cols > pitch || x.batch != 1 || y.batch != 1)
    return true;
  const int64_t bytes =
      int64_t(reinterpret_cast<intptr_t>(y.ptr) - reinterpret_cast<intptr_t>(x.ptr));
  if (bytes % x.esize) return true;
  const int64_t off = bytes / x.esize;  // y(i, j) is x's element off + i * pitch + j
  const int64_t row0 = off >= 0 ? off / pitch : -((-off + pitch - 1) / pitch);
  const int64_t col0 = off - row0 * pitch;  // 0 <= col0 < pitch
  auto meet = [](int64_t a0, int64_t a1, int64_t b0, int64_t b1) { return a0 < b1 && b0 < a1; };
  // y's columns in x's rows: [col0, pitch) of rows row0..., then [0, rest) of the next ones
  const int64_t end = col0 + y.cols;
  if (meet(row0, row0 + y.rows, 0, x.rows) && meet(col0, std::min(end, pitch), 0, x.cols))
    return true;
  return end > pitch && meet(row0 + 1, row0 + 1 + y.rows, 0, x.rows) &&
         meet(0, end - pitch, 0, x.cols);
}

void Matrix::transpose() {
  std::swap(rows, cols);
  std::swap(s0, s1);
}

void Matrix::extent(uintptr_t* lo, uintptr_t* hi) const {
  uintptr_t base = reinterpret_cast<uintptr_t>(ptr);
  if (rows == 0 || cols == 0 || batch == 0) {
    *lo = *hi = base;
    return;
  }
  *lo = base;
  *hi = base + uintptr_t(((batch - 1) * sb + (rows - 1) * s0 + (cols - 1) * s1 + 1) * esize);
}

// An output batch's matrices each own their memory. One batch stride: matrices i and i + j
// sit as 0 and j do, so matrix 0 against each j whose bytes it meets decides; interleaved
// ones (d.transpose(1, 0, 2) of a (rows, L, N) buffer, heads side by side) share no
// element and pass.
int check_own_matrices(const Matrix& out, const char* name) {
  Matrix one = out;
  one.batch = 1;
  if (one.s1 != 1 && one.s0 == 1) one.transpose();  // sharing is the same either way
  constexpr int64_t kMaxMet = int64_t(1) << 16;     // beyond: refused unexamined
  for (int64_t j = 1; j < out.batch; ++j) {
    Matrix other = one;
    other.ptr = one.ptr + j * out.sb * out.esize;
    if (!overlaps(one, other)) break;  // later matrices start later still
    if (j > kMaxMet || share_elements(one, other))
      return set_error(PCR_ERR_OVERLAP,
                       "%s's matrices overlap (batch stride %" PRId64
                       " elements); every output matrix needs its own memory",
                       name, out.sb);
  }
  return PCR_OK;
}

int check_places(const Matrix* const ops[kPlaces], const char* const names[kPlaces], bool* host) {
  // Devices: all CUDA on one ordinal, or all on the host.
  const Matrix& D = *ops[2];
  *host = is_host(D.device_type);
  for (int i = 0; i < kPlaces; ++i) {
    if (!ops[i]) continue;
    if (is_host(ops[i]->device_type) != *host)
      return set_error(PCR_ERR_DEVICE_MISMATCH,
                       "%s is a %s array but %s is a %s array; pass all operands on the GPU, "
                       "or all on the host",
                       names[i], is_host(ops[i]->device_type) ? "host" : "GPU", names[2],
                       *host ? "host" : "GPU");
    if (!*host && ops[i]->device_id != D.device_id)
      return set_error(PCR_ERR_DEVICE_MISMATCH,
                       "%s is on cuda:%d but %s is on cuda:%d; move them to one device", names[i],
                       ops[i]->device_id, names[2], D.device_id);
  }
  // Aliasing: d must not overlap a, b or the extras, which the kernel reads while d is
  // written (c is the caller's to check: d may be c exactly).
  for (int i : {0, 1, 4, 5, 6, 9})
    if (ops[i] && overlaps(D, *ops[i]))
      return set_error(PCR_ERR_OVERLAP,
                       "%s overlaps %s in memory; the output must not alias an input of the "
                       "product (pass a separate output)",
                       names[2], names[i]);
  // the second outputs (aux, amax) alias nothing: every other operand is read or written
  for (int out : {7, 8})
    for (int i = 0; ops[out] && i < out; ++i)
      if (ops[i] && overlaps(*ops[out], *ops[i]))
        return set_error(PCR_ERR_OVERLAP, "%s overlaps %s in memory; pass a separate buffer",
                         names[out], names[i]);
  return PCR_OK;
}

}  // namespace pcr
