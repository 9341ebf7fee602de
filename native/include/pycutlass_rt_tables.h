/* The selector's tables: the time model, the table format and the ranking the package's
 * table fitter uses (heuristics/fit.py). Private to pycutlass_rt: what the table holds and
 * how the model reads it change with the library, under the same PCR_ABI_VERSION as
 * pycutlass_rt.h, whose callers never need this header (the library ranks by itself).
 * native/gen_abi.py mirrors both headers into pycutlass_rt/_abi.py. */
#ifndef PYCUTLASS_RT_TABLES_H_
#define PYCUTLASS_RT_TABLES_H_

#include "pycutlass_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- kernel choice: the time model and the ranking --------------------------------
 * Selection's arithmetic lives here, once: pcr_model_terms estimates one kernel on one
 * problem (any kernel description, in this build or not: the table's fitter uses it),
 * pcr_rank orders candidates by a table and the model, and pcr_selector_set hands the
 * library's selector (pycutlass_rt.h) the table it ranks with.
 *
 * The model: max(compute, memory) + 0.1 min(compute, memory) + split fix-up, in
 * microseconds, from the kernel's tile, cluster, schedule and split mode and the device's
 * datasheet rates (the Python package's _model.py says more). `features` are what the
 * table's calibration corrects it by: log(time / model) = w . (1, f, f_i f_j for i <= j). */
#define PCR_MODEL_FEATURES 11
#define PCR_MODEL_WEIGHTS 78 /* 1 + PCR_MODEL_FEATURES + their pairwise products */
typedef struct {
  double compute_us; /* the busiest SM's K-loop iterations at the kernel's efficiency */
  double memory_us;  /* A, B and D over the DRAM bandwidth the busy SMs draw */
  double fixup_us;   /* split partials: stream-K's peer chain, or split-K's reduction */
  double us;         /* the model's time */
  int64_t tiles;     /* output tiles (clusters launch whole) times the batch */
  int64_t iters;     /* K-loop iterations of one whole tile */
  int64_t busy;      /* SMs with work */
  int64_t peers;     /* units sharing one output tile (1: no split) */
  int64_t sm_iters;  /* K-loop iterations the busiest SM runs */
  int64_t slices;    /* a parallel split-K kernel's slices of K (1: none) */
  int32_t sms;
  double tflops_sm, gbps_sm; /* the datasheet rates used: tensor TFLOP/s and DRAM GB/s per SM */
  double fill_m, fill_n;     /* share of the launched tiles' rows (columns) the problem fills */
  double features[PCR_MODEL_FEATURES];
} pcr_model;

/* The shipped table, resolved against a list of kernels (`kernels` long: this build's for
 * pcr_selector_set, the candidates' for pcr_rank). A rule of a family holds for a problem
 * when each bound (-1: none) holds for its M (times the batch), N and K; its patterns
 * name kernels best first: position[i] is the first pattern naming kernel i's plain-
 * epilogue twin, -1 for none. A calibration corrects the model for the kernel
 * configurations a sweep timed (config[i]: kernel i's configuration, -1 for none; its
 * PCR_MODEL_WEIGHTS weights), then by what that left at swept shapes near the problem:
 * each shape's rows (row_start[s] to row_start[s + 1]) hold a configuration, a weight and
 * that weight times the leftover, averaged under a Gaussian of width `bandwidth` in
 * log(M), log(N), log(K) against a prior weight `prior` of no further correction.
 * A second look (pair_trees > 0) settles the order of the two fastest calibrated
 * candidates when they lead the ranking: gradient-boosted trees over PCR_PAIR_FEATURES
 * features of the pair (the first a, the second b; m is M times the batch):
 *   0 log(calibrated b / calibrated a), 1-3 log M, log N, log K,
 *   4-5 log(b's tile M / a's), log(b's tile N / a's), 6 b's swap_ab - a's,
 *   7 1 where their splits differ, then b's model features minus a's, then a's.
 * Tree t starts at node pair_tree_start[t]; a node with pair_feature >= 0 goes to
 * pair_left when the feature is <= pair_threshold, else to pair_right (node indices);
 * a leaf (pair_feature -1) adds pair_value. b runs first when pair_base plus the leaves
 * is above 0 (a logistic score: b is the faster). */
#define PCR_PAIR_FEATURES 30 /* 8 + 2 * PCR_MODEL_FEATURES */
typedef struct {
  int32_t family;
  int32_t patterns;
  int64_t max_m, max_n, max_k;
  const int32_t* position;
} pcr_rule;
typedef struct {
  int32_t family;
  int32_t configs;
  const int32_t* config;
  const double* weights; /* configs x PCR_MODEL_WEIGHTS */
  double prior, bandwidth;
  int32_t shapes;
  const double* shape; /* shapes x 3: M, N, K */
  const int32_t* row_start;
  const int32_t* row_config;
  const double* row_weight;
  const double* row_leftover;     /* the row's weight times its leftover log(time / fitted) */
  int32_t pair_trees, pair_nodes; /* the second look (0 trees: none) */
  const int32_t* pair_tree_start;
  const int32_t* pair_feature;
  const double* pair_threshold;
  const int32_t* pair_left;
  const int32_t* pair_right;
  const double* pair_value;
  double pair_base;
} pcr_calibration;
typedef struct {
  int32_t kernels;
  int32_t rule_count, calibration_count;
  const pcr_rule* rules; /* each family's in order: the first that holds applies */
  const pcr_calibration* calibrations;
} pcr_table;

PCR_API int pcr_model_terms(const pcr_kernel_desc* kernel, int64_t m, int64_t n, int64_t k,
                            int64_t batch, int32_t sm_count, int32_t cc, pcr_model* out);
/* A table made ready for ranking (its arrays copied, its swept shapes indexed): made once
 * per table, used by any number of pcr_rank calls and threads; destroyed by its maker. */
typedef struct pcr_ranker pcr_ranker;
PCR_API int pcr_ranker_create(const pcr_table* table, pcr_ranker** ranker);
PCR_API void pcr_ranker_destroy(pcr_ranker* ranker);
/* Orders `count` candidates (already accepted for the problem: pcr_describe's verdicts)
 * for the problem's m, n, k, batch, op, cc (0: each kernel at its own family's arch) and
 * sm_count, on a device whose kernel families are `families` (pcr_kernel_families; its
 * first is the device's own): the first family's matching rule, then its calibrated
 * model, then family by family by rule and model (a convolution: its own family first
 * unless another's is modelled 4x faster). `ranker`'s table is resolved against `ids`'
 * numbering: candidate i is the table's kernel ids[i]; NULL: the table pcr_selector_set
 * holds (ids: this build's kernel indices), or none. Writes to out (count long) the
 * candidates of those families, best first, and their number to *ranked. */
PCR_API int pcr_rank(const pcr_problem* problem, const int32_t* families, int32_t family_count,
                     const pcr_kernel_desc* candidates, const int32_t* ids, int32_t count,
                     const pcr_ranker* ranker, pcr_ranked* out, int32_t* ranked);
/* The library's own selection ranks with `ranker`'s table (resolved against this build's
 * kernels; the library keeps what it needs, the caller may destroy it); NULL: none.
 * Clears every remembered selection. */
PCR_API int pcr_selector_set(const pcr_ranker* ranker);

#ifdef __cplusplus
}
#endif

#endif /* PYCUTLASS_RT_TABLES_H_ */
