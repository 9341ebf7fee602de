// A described problem and its operands as a kernel's arguments (GemmArgs), and the
// extras' activation as the epilogue takes it.
#include <cstring>

#include "runtime.h"
#include "problem.h"

namespace pcr {

GemmArgs gemm_args(const pcr_problem& p, const Bound& bd) {
  GemmArgs g;
  // padding too: prepared launches compare args bytewise
  std::memset(static_cast<void*>(&g), 0, sizeof g);
  g.m = int(p.m);
  g.n = int(p.n);
  g.k = int(p.k);
  g.a = bd.a.ptr;
  g.lda = bd.lda;
  g.b = bd.b.ptr;
  g.ldb = bd.ldb;
  g.d = bd.d.ptr;
  g.ldd = bd.ldd;
  if (p.c_mode == PCR_C_READ) {
    g.c = bd.c.ptr;
    g.ldc = bd.ldc;
  } else {  // no C, or C already copied into D
    g.c = bd.d.ptr;
    g.ldc = bd.ldd;
  }
  g.alpha = bd.alpha;
  g.beta = p.c_mode == PCR_C_NONE ? 0.0 : bd.beta;
  g.batch = int(p.batch);
  g.batch_a = bd.a.sb;
  g.batch_b = bd.b.sb;
  g.batch_c = p.c_mode == PCR_C_READ ? bd.c.sb : bd.d.sb;
  g.batch_d = bd.d.sb;
  if (p.bias == PCR_BIAS_PER_COLUMN) g.bias_n = bd.bias.ptr;
  if (p.bias == PCR_BIAS_PER_ROW) g.bias_m = bd.bias.ptr;
  g.activation = bd.activation;
  g.aux = bd.aux.ptr;
  g.ldaux = bd.ldaux;
  g.batch_aux = bd.aux.sb;
  g.amax = reinterpret_cast<float*>(bd.amax.ptr);
  g.scale_d = reinterpret_cast<const float*>(bd.scale_d.ptr);
  g.scale_a = bd.scale_m.ptr;
  g.scale_b = bd.scale_n.ptr;
  g.scale_a_per_row = p.scale_m == PCR_SCALE_VECTOR;
  g.scale_b_per_col = p.scale_n == PCR_SCALE_VECTOR;
  if (is_grid(p.scale_m)) {  // scale_m's rows are row groups, scale_n's columns column groups
    g.scale_a_group_stride = bd.scale_m.s0;
    g.scale_a_kblock_stride = bd.scale_m.s1;
    g.scale_b_group_stride = bd.scale_n.s1;
    g.scale_b_kblock_stride = bd.scale_n.s0;
  }
  g.conv = bd.conv;
  g.device = p.device;
  g.sm_count = p.sm_count;
  return g;
}

ActivationArgs activation_of(const pcr_extras& x) {
  const bool slope = x.activation == PCR_ACT_LEAKY_RELU || x.activation == PCR_ACT_CLAMP;
  return {x.activation, slope ? x.activation_alpha : 0.0,
          x.activation == PCR_ACT_CLAMP ? x.activation_beta : 0.0};
}

}  // namespace pcr
