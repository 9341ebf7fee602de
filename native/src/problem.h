// Declarations private to the files that turn a call's tensors into a pcr_problem and judge
// kernels against it; runtime.h holds what the rest of the runtime uses of their work.
#pragma once

#include <cstdint>
#include <string>

#include "runtime.h"

namespace pcr {

// ---- names.cpp ----
const char* activation_name(int activation);      // pcr_activation as Python spells it
std::string dl_dtype_text(DLDataType t);          // a DLPack dtype as numpy spells it
std::string block_words(int kind_m, int kind_n);  // a pair of block-scale kinds, in words

// ---- operands.cpp ----
// A 2-D matrix or a 3-D batch of them; zero strides (broadcast views) only where allowed.
int load_matrix(const DLTensor* t, const char* name, bool allow_zero_stride, Matrix* m);
// m's layout and leading dimension, or false (then layout_error says why, naming `name`).
bool layout_of(const Matrix& m, int* layout, int64_t* ld);
int layout_error(const Matrix& m, const char* name);
// The bias as a broadcast view over d, and the axis it runs along (pcr_bias).
int load_bias(const DLTensor* t, const Matrix& D, Matrix* v, int* axis);
// scale_a and scale_b (either may be null): numbers, vectors or block-scale grids.
int load_scales(const DLTensor* sa, const DLTensor* sb, int64_t m, int64_t n, int64_t k, Matrix* va,
                Matrix* vb, int* kind_a, int* kind_b);
// amax and scale_d: one float32 value.
int load_one_float(const DLTensor* t, const char* name, Matrix* m);

// ---- places.cpp ----
// An output batch's matrices share no element.
int check_own_matrices(const Matrix& out, const char* name);

// ---- staging.cpp ----
// p's alignments, C's mode, staging and split as the operands in bd allow.
void place(pcr_problem* p, Bound* bd, bool use_c, bool part);

// ---- check.cpp ----
// Whether kernel kd's mainloop takes p's scales (block scales exactly, or none).
bool same_block_scales(const pcr_kernel_desc& kd, const pcr_problem& p);

}  // namespace pcr
