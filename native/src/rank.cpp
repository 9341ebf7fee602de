// Kernel choice's arithmetic: the analytic time model, the table's calibration of it, and
// the ranking of candidates (pycutlass_rt.h, "kernel choice"). Python's _model.py and
// _select.py explain the model and the order; the numbers are computed here only, for the
// package, the table's fitter and the library's own selection alike.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "runtime.h"

namespace pcr {
// ---- the table, held ---------------------------------------------------------------
// pcr_table copied into owned storage (the caller's arrays may go), with each
// calibration's neighbours bucketed: swept shapes by cell of the log space, a cell as wide
// as a neighbour's reach, so that a query reads its cell and the 26 around it.
struct Rule {
  int32_t family, patterns;
  int64_t max_m, max_n, max_k;
  std::vector<int32_t> position;
};
struct Calibration {
  int32_t family, configs;
  std::vector<int32_t> config;
  std::vector<double> weights;
  double prior, scale, reach2, width;
  std::vector<double> logs;  // shapes x 3
  std::vector<int32_t> row_start, row_config;
  std::vector<double> row_weight, row_leftover;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::vector<int32_t>> cells;
  // the second look's trees (pcr_calibration's pair_*)
  std::vector<int32_t> tree_start, node_feature, node_left, node_right;
  std::vector<double> node_threshold, node_value;
  double pair_base = 0.0;

  std::tuple<int64_t, int64_t, int64_t> cell(const double* l) const {
    return {int64_t(std::floor(l[0] / width)), int64_t(std::floor(l[1] / width)),
            int64_t(std::floor(l[2] / width))};
  }
};
struct Table {
  int32_t kernels = 0;
  std::vector<Rule> rules;
  std::vector<Calibration> calibrations;
};

}  // namespace pcr

// A table ready for ranking (pycutlass_rt.h): shared with the library's own selection.
struct pcr_ranker {
  std::shared_ptr<const pcr::Table> table;
};

namespace pcr {
namespace {

// ---- the analytic model ------------------------------------------------------------
// Datasheet figures per compute capability: dense fp16/bf16 tensor TFLOP/s per SM with
// fp32 accumulation, DRAM GB/s per SM (V100, T4, A100, A10/A6000, L40S, H100/H200 SXM, B200).
struct DeviceRates {
  int cc;
  double tflops_sm, gbps_sm;
};
constexpr DeviceRates kDevices[] = {{70, 1.5, 11.0},  {75, 1.6, 8.0}, {80, 2.9, 18.5},
                                    {86, 1.8, 8.5},   {89, 2.5, 6.0}, {90, 7.5, 30.0},
                                    {100, 15.0, 54.0}};
constexpr double kBwSaturation = 0.6;  // share of the SMs that must stream to saturate DRAM
constexpr double kOverlap = 0.1;       // share of the shorter of compute and memory left over
constexpr double kFixupGbps = 150.0;   // per-SM L2 bandwidth for split partials
constexpr double kFixupSyncUs = 2.0;   // per stream-K peer: the wait on the previous one's flag
// parallel split-K (kernels/split_k.cuh): >= 4 K tiles per slice, <= 128 slices, and the
// reduction kernel's launch and tail
constexpr int64_t kSplitMinIters = 4, kSplitMax = 128;
constexpr double kSplitReduceUs = 2.0;
constexpr int64_t kStreamKMinIters = 8;  // CUTLASS's min_iters_per_sk_unit_
// A block-scaled mainloop's K iteration (128 of K) takes at least this long on an SM,
// however narrow its tile: each one waits for its stage's scales and its MMAs before the
// partial sums are promoted, so narrow tiles cannot run at the tensor cores' pace. Fitted
// on the corpus's fit part for the dense kernels (benchmarks/RESULTS.md, "Block-scaled fp8
// selection"); no grouped one was timed.
constexpr double kBlockIterUs = 0.15;

const DeviceRates& rates(int cc) {  // the nearest known compute capability below
  const DeviceRates* best = &kDevices[0];
  for (const auto& d : kDevices)
    if (d.cc <= cc) best = &d;
  return *best;
}

// Mainloop efficiency at the family's own arch, by schedule.
double schedule_efficiency(int schedule) {
  switch (schedule) {
    case PCR_SCHED_COOP:
    case PCR_SCHED_COOPFA:  // no sweep has timed fast accumulation: as its promoted twin
    case PCR_SCHED_1SM:
    case PCR_SCHED_MULTISTAGE:
      return 0.80;
    case PCR_SCHED_PINGPONG:
    case PCR_SCHED_PINGPONGFA:
      return 0.78;
    case PCR_SCHED_2SM:
      return 0.85;
    case PCR_SCHED_WS:  // sm90a convolutions: one consumer warp group, a CTA per tile
      return 0.70;
    case PCR_SCHED_PIPELINED:
      return 0.35;
    case PCR_SCHED_DEPTHWISE:  // the generic kernel's share (depthwise_terms)
    case PCR_SCHED_DIRECT:
      return 0.45;
    default:
      return 0.5;
  }
}

// Fraction of the SM's tensor peak that the kernel's K loop reaches.
double efficiency(const pcr_kernel_desc& kd, int cc) {
  double eff = schedule_efficiency(kd.schedule);
  if (kd.family < 90 && 90 <= cc)
    eff *= 0.6;  // mma.sync on Hopper/Blackwell: ~60% of the wgmma/tcgen05 peak
  else if (kd.family == 75 && cc >= 80)
    eff *= 0.5;  // m16n8k8 issues at half the m16n8k16 rate
  // smaller tiles reuse each loaded byte for fewer MMAs (128x256 is CUTLASS's best)
  eff *= std::pow(std::min(1.0, double(kd.tile_m) * kd.tile_n / (128 * 256)), 0.15);
  if (kd.family >= 90 && kd.cluster_m * kd.cluster_n == 1) eff *= 0.97;  // no TMA multicast
  if (kd.split != PCR_SPLIT_NONE) eff *= 0.93;  // the split scheduler's bookkeeping
  return eff;
}

// Tensor-core rate of an input dtype relative to fp16 (fp32 inputs: 3xTF32; fp64: DMMA).
double dtype_rate(int dtype) {
  switch (dtype) {
    case PCR_E4M3:
    case PCR_E5M2:
    case PCR_S8:
      return 2.0;
    case PCR_TF32:
      return 0.5;
    case PCR_F32:
      return 0.5 / 3;
    case PCR_F64:
      return 1.0 / 16;
    default:
      return 1.0;
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Slices of a parallel split-K kernel, as kernels/split_k.cuh chooses them: the most that
// keep one wave and >= 4 K tiles per slice, among counts that cut K into equal slices of
// whole K tiles (of the kernel's alignment when K is not whole tiles); 1 for a batch.
int64_t split_slices(const pcr_kernel_desc& kd, int64_t m, int64_t n, int64_t k, int64_t sms,
                     int64_t batch) {
  const int64_t tk = kd.tile_k;
  const int64_t tiles = ceil_div(m, kd.tile_m) * ceil_div(n, kd.tile_n);
  const int64_t unit = k % tk == 0 ? tk : std::max(kd.align_a, 1);
  if (batch > 1 || tiles <= 0 || k % unit) return 1;
  const int64_t cap = std::min({sms / tiles, k / (kSplitMinIters * tk), kSplitMax});
  for (int64_t s = cap; s > 1; --s)
    if ((k / unit) % s == 0) return s;
  return 1;
}

struct Work {
  int64_t sm_iters, busy, peers;  // the busiest SM's K iterations, SMs busy, peers per tile
};
// splitk: `slices` units per tile at once. streamk: data-parallel unless the last wave is
// less than half full; then the last 1-2 waves' K loops spread over at most one wave of
// units of >= 8 iterations (the sm80 family's CUTLASS 2.x stream-K modelled the same way).
Work decompose(const pcr_kernel_desc& kd, int64_t tiles, int64_t iters, int64_t sms,
               int64_t slices) {
  const int64_t waves = ceil_div(tiles, sms);
  if (kd.split == PCR_SPLIT_SPLITK) {
    const int64_t s = std::max<int64_t>(slices, 1);
    return {ceil_div(tiles * s, sms) * ceil_div(iters, s), std::min(tiles * s, sms), s};
  }
  const int64_t full = tiles / sms, rem = tiles % sms;
  if (kd.split != PCR_SPLIT_STREAMK || rem == 0 || 2 * rem >= sms || iters <= kStreamKMinIters)
    return {waves * iters, std::min(tiles, sms), 1};
  const int64_t dp_waves = std::max<int64_t>(full - 1, 0);
  const int64_t sk_tiles = tiles - dp_waves * sms;
  const int64_t units = std::max<int64_t>(1, std::min(sms, sk_tiles * iters / kStreamKMinIters));
  // unit boundaries fall inside tiles unless units divide evenly among them
  const int64_t peers = ceil_div(units, sk_tiles) + (units % sk_tiles != 0);
  return {dp_waves * iters + ceil_div(sk_tiles * iters, units), dp_waves ? sms : units,
          std::max<int64_t>(peers, 1)};
}

// The calibration's features of the model's terms (see _model.FEATURES for their meaning).
void fill_features(pcr_model* t) {
  const int64_t waves = ceil_div(t->tiles, t->sms), rem = t->tiles % t->sms;
  const double ratio = std::log(std::max(t->memory_us, 1e-9) / std::max(t->compute_us, 1e-9));
  const double us = std::max(t->us, 1e-6);
  double* f = t->features;
  f[0] = 1.0 / waves;
  f[1] = waves > 1 && rem ? 1.0 - double(rem) / t->sms : 0.0;
  f[2] = std::log(double(std::max<int64_t>(t->busy, 1)) / t->sms);
  f[3] = 1.0 / t->iters;
  f[4] = std::max(ratio, 0.0);
  f[5] = std::min(ratio, 0.0);
  f[6] = t->fixup_us / us;
  f[7] = 1.0 / us;
  f[8] = std::log(us);
  f[9] = std::log(t->fill_m);
  f[10] = std::log(t->fill_n);
}

// fp32 FMA rate of the CUDA cores per SM relative to the dense fp16 tensor rate
// (128 FMA lanes against 512, 1024 and 2048 dense fp16 MMA FLOP per cycle on sm80, sm90)
constexpr double kCudaCoreRate = 0.125;
// a depthwise kernel built for the problem's filter and stride reuses each loaded input
// across the outputs along W that read it; the generic one loads it once per tap
constexpr double kDepthwiseFixed = 0.85;

// A direct kernel (PCR_SCHED_DEPTHWISE; PCR_SCHED_DIRECT, grouped, its k R*S*C/groups), each
// multiply-add on the CUDA cores. Its implicit GEMM: fprop m = N*P*Q, n = C, k = R*S; dgrad
// m = N*H*W, n = C, k = R*S (each output's m x n, one "tile" per 256 runs of 4 outputs of 8
// channels, each input and output element moved once, the inputs' bytes taken as the
// outputs'); wgrad m = C, n = R*S, k = N*P*Q (dy and x read once each, CTAs enough to fill
// the SMs).
void depthwise_terms(const pcr_kernel_desc& kd, int64_t m, int64_t n, int64_t k, int64_t sms,
                     int cc, pcr_model* t) {
  const DeviceRates& dev = rates(cc);
  const double eff = kd.tile_m > 0 ? kDepthwiseFixed : schedule_efficiency(kd.schedule);
  const bool wgrad = kd.op == PCR_OP_WGRAD;
  const int64_t tiles = wgrad ? std::max<int64_t>(std::min(2 * sms, ceil_div(k, 256 * 8)), 1)
                              : std::max<int64_t>(ceil_div(m * ceil_div(n, 8), 256 * 4), 1);
  const int64_t busy = std::min(tiles, sms);
  t->compute_us =
      double(m) * n * k * 2.0 / (dev.tflops_sm * kCudaCoreRate * 1e6 * double(busy) * eff);
  const int64_t bytes =
      wgrad ? 2 * k * m * esize_of(kd.dtype_a) + m * n * esize_of(kd.dtype_d)
            : m * n * (esize_of(kd.dtype_a) + esize_of(kd.dtype_d)) + n * k * esize_of(kd.dtype_b);
  t->memory_us =
      double(bytes) / (dev.gbps_sm * 1e3 * std::min(double(sms), busy / kBwSaturation) * eff);
  const double c = t->compute_us, mem = t->memory_us;
  t->us = std::max(c, mem) + kOverlap * std::min(c, mem);
  t->tiles = tiles;
  t->iters = std::max<int64_t>(k, 1);
  t->busy = busy;
  t->peers = 1;
  t->sm_iters = ceil_div(tiles, sms) * t->iters;
  t->slices = 1;
  t->sms = int32_t(sms);
  t->tflops_sm = dev.tflops_sm;
  t->gbps_sm = dev.gbps_sm;
  t->fill_m = t->fill_n = 1.0;
  fill_features(t);
}

}  // namespace

int model_terms(const pcr_kernel_desc& kd, int64_t m, int64_t n, int64_t k, int64_t batch,
                int sm_count, int cc, pcr_model* out) {
  const bool direct = kd.schedule == PCR_SCHED_DEPTHWISE || kd.schedule == PCR_SCHED_DIRECT;
  if (direct && m >= 0 && n >= 0 && k >= 0) {
    pcr_model t{};
    depthwise_terms(kd, m * std::max<int64_t>(batch, 1), n, k, std::max(sm_count, 1),
                    cc ? cc : kd.family, &t);
    *out = t;
    return PCR_OK;
  }
  if (kd.tile_m <= 0 || kd.tile_n <= 0 || kd.tile_k <= 0 || m < 0 || n < 0 || k < 0)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "pcr_model_terms: needs positive tile extents "
                     "and extents >= 0");
  cc = cc ? cc : kd.family;
  const int64_t sms = std::max(sm_count, 1);
  batch = std::max<int64_t>(batch, 1);
  const DeviceRates& dev = rates(cc);
  const int64_t tm = kd.tile_m, tn = kd.tile_n, tk = kd.tile_k;
  const int64_t cm = std::max(kd.cluster_m, 1), cn = std::max(kd.cluster_n, 1);
  // clusters launch whole: a 2x1 cluster over one tile row idles half
  const int64_t rows = ceil_div(m, tm * cm) * cm * tm, cols = ceil_div(n, tn * cn) * cn * tn;
  const int64_t tiles = std::max<int64_t>(rows / tm * (cols / tn) * batch, 1);
  const int64_t iters = std::max<int64_t>(ceil_div(k, tk), 1);
  const int64_t slices = kd.split == PCR_SPLIT_SPLITK ? split_slices(kd, m, n, k, sms, batch) : 1;
  const Work w = decompose(kd, tiles, iters, sms, slices);
  const double rate = dev.tflops_sm * dtype_rate(kd.dtype_a);
  pcr_model t{};
  t.compute_us = double(w.sm_iters) * 2.0 * tm * tn * tk / (rate * 1e6 * efficiency(kd, cc));
  if ((is_grid(kd.scale_m) || is_grid(kd.scale_n)) && !kd.grouped)
    t.compute_us = std::max(t.compute_us, double(w.sm_iters) * kBlockIterUs);
  const int64_t bytes = batch * (m * k * esize_of(kd.dtype_a) + k * n * esize_of(kd.dtype_b) +
                                 m * n * esize_of(kd.dtype_d));
  t.memory_us = double(bytes) / (dev.gbps_sm * 1e3 * std::min(double(sms), w.busy / kBwSaturation));
  if (kd.split == PCR_SPLIT_SPLITK)  // partials out and back in (the output's bytes counted)
    t.fixup_us = kSplitReduceUs + double(slices * m * n * 4 * 2) / (dev.gbps_sm * 1e3 * sms);
  else if (w.peers > 1)
    t.fixup_us = w.peers * (double(tm * tn * 4 * 2) / (kFixupGbps * 1e3) + kFixupSyncUs);
  const double c = t.compute_us, mem = t.memory_us;
  t.us = std::max(c, mem) + kOverlap * std::min(c, mem) + t.fixup_us;
  t.tiles = tiles;
  t.iters = iters;
  t.busy = w.busy;
  t.peers = w.peers;
  t.sm_iters = w.sm_iters;
  t.slices = slices;
  t.sms = int32_t(sms);
  t.tflops_sm = dev.tflops_sm;
  t.gbps_sm = dev.gbps_sm;
  t.fill_m = double(std::max<int64_t>(m, 1)) / std::max<int64_t>(rows, 1);
  t.fill_n = double(std::max<int64_t>(n, 1)) / std::max<int64_t>(cols, 1);
  fill_features(&t);
  *out = t;
  return PCR_OK;
}

int kernel_families(int cc, int32_t* out, int capacity) {
  int fams[3] = {}, n = 0;
  if (cc == 90 || cc == 100) {  // the arch-specific family first, then the portable ones
    fams[0] = cc, fams[1] = 80, fams[2] = 75, n = 3;
  } else if (cc == 89) {  // Ada: its fp8 kernels, then the sm80 family
    fams[0] = 89, fams[1] = 80, fams[2] = 75, n = 3;
  } else if (cc >= 80) {  // sm80-family SASS on 8.x, its PTX on later GPUs
    fams[0] = 80, fams[1] = 75, n = 2;
  } else if (cc >= 75) {
    fams[0] = 75, n = 1;
  } else if (cc >= 70) {  // sm_70 SASS (no PTX): Volta only
    fams[0] = 70, n = 1;
  }
  for (int i = 0; i < n && i < capacity; ++i) out[i] = fams[i];
  return n;
}

namespace {

template <class T>
std::vector<T> copy_of(const T* p, int64_t n, const char* what) {
  if (n > 0 && !p) throw std::invalid_argument(what);
  return n > 0 ? std::vector<T>(p, p + n) : std::vector<T>();
}

std::shared_ptr<const Table> hold(const pcr_table& in) {
  if (in.kernels < 0 || in.rule_count < 0 || in.calibration_count < 0 ||
      (in.rule_count > 0 && !in.rules) || (in.calibration_count > 0 && !in.calibrations))
    throw std::invalid_argument("a table with negative counts or missing arrays");
  auto t = std::make_shared<Table>();
  t->kernels = in.kernels;
  for (int i = 0; i < in.rule_count; ++i) {
    const pcr_rule& r = in.rules[i];
    t->rules.push_back({r.family, r.patterns, r.max_m, r.max_n, r.max_k,
                        copy_of(r.position, in.kernels, "a rule without positions")});
  }
  for (int i = 0; i < in.calibration_count; ++i) {
    const pcr_calibration& c = in.calibrations[i];
    Calibration h;
    h.family = c.family;
    h.configs = c.configs;
    h.config = copy_of(c.config, in.kernels, "a calibration without configurations");
    h.weights = copy_of(c.weights, int64_t(c.configs) * PCR_MODEL_WEIGHTS, "no weights");
    h.prior = c.prior;
    h.scale = -0.5 / (c.bandwidth * c.bandwidth);
    h.reach2 = std::log(1e3) / -h.scale;  // Gaussian weights below 1e-3 add nothing
    h.width = std::sqrt(h.reach2);
    const int32_t shapes = std::max(c.shapes, 0);
    if (shapes > 0 && !c.shape) throw std::invalid_argument("swept shapes without their extents");
    h.row_start = copy_of(c.row_start, shapes + 1, "no rows");
    for (int32_t s = 0; s < shapes; ++s)
      if (h.row_start[s] < 0 || h.row_start[s] > h.row_start[s + 1])
        throw std::invalid_argument("row starts that are not ascending");
    const int32_t rows = shapes ? h.row_start[shapes] : 0;
    h.row_config = copy_of(c.row_config, rows, "no row configurations");
    h.row_weight = copy_of(c.row_weight, rows, "no row weights");
    h.row_leftover = copy_of(c.row_leftover, rows, "no row leftovers");
    for (int32_t s = 0; s < shapes; ++s) {
      for (int j = 0; j < 3; ++j) h.logs.push_back(std::log(std::max(c.shape[3 * s + j], 1.0)));
      h.cells[h.cell(&h.logs[3 * s])].push_back(s);
    }
    const int32_t trees = std::max(c.pair_trees, 0), nodes = std::max(c.pair_nodes, 0);
    h.tree_start = copy_of(c.pair_tree_start, trees, "second-look trees without roots");
    h.node_feature = copy_of(c.pair_feature, nodes, "second-look nodes without features");
    h.node_threshold = copy_of(c.pair_threshold, nodes, "second-look nodes without thresholds");
    h.node_left = copy_of(c.pair_left, nodes, "second-look nodes without children");
    h.node_right = copy_of(c.pair_right, nodes, "second-look nodes without children");
    h.node_value = copy_of(c.pair_value, nodes, "second-look nodes without values");
    h.pair_base = c.pair_base;
    for (int32_t r : h.tree_start)
      if (r < 0 || r >= nodes) throw std::invalid_argument("a second-look root out of range");
    for (int32_t i = 0; i < nodes; ++i) {
      const int32_t f = h.node_feature[i];
      // children come after their parent: every walk ends
      if (f >= PCR_PAIR_FEATURES || (f >= 0 && (h.node_left[i] <= i || h.node_left[i] >= nodes ||
                                                h.node_right[i] <= i || h.node_right[i] >= nodes)))
        throw std::invalid_argument("a second-look node out of range");
    }
    t->calibrations.push_back(std::move(h));
  }
  for (const auto& c : t->calibrations) {
    for (int32_t cfg : c.config)
      if (cfg >= c.configs) throw std::invalid_argument("a configuration index out of range");
    for (int32_t cfg : c.row_config)
      if (cfg < 0 || cfg >= c.configs)
        throw std::invalid_argument("a neighbour row's configuration out of range");
  }
  return t;
}

std::mutex g_table_mutex;
std::shared_ptr<const Table> g_table;  // the build's (pcr_selector_set)

std::shared_ptr<const Table> build_table() {
  std::lock_guard<std::mutex> lock(g_table_mutex);
  return g_table;
}

// log(time / model time) the calibration's weights predict for configuration `config`:
// w . (1, f, f_i f_j for i <= j).
double correction(const Calibration& cal, int32_t config, const double* f) {
  const double* w = &cal.weights[size_t(config) * PCR_MODEL_WEIGHTS];
  constexpr int n = PCR_MODEL_FEATURES;
  double lin = 0.0;
  for (int i = 0; i < n; ++i) lin += w[1 + i] * f[i];
  double acc = w[0] + lin;
  int at = n + 1;
  for (int i = 0; i < n; ++i) {
    if (f[i] != 0.0) {  // several features are 0 on most problems
      double s = 0.0;
      for (int j = i; j < n; ++j) s += w[at + j - i] * f[j];
      acc += f[i] * s;
    }
    at += n - i;
  }
  return acc;
}

// {config: further log correction} at (m, n, k) from the swept neighbours, as a dense
// vector over the calibration's configurations (0 where none is near).
void neighbours(const Calibration& cal, int64_t m, int64_t n, int64_t k, std::vector<double>* out) {
  out->assign(cal.configs, 0.0);
  if (cal.logs.empty()) return;
  const double q[3] = {std::log(double(std::max<int64_t>(m, 1))),
                       std::log(double(std::max<int64_t>(n, 1))),
                       std::log(double(std::max<int64_t>(k, 1)))};
  std::vector<double> num(cal.configs, 0.0), den(cal.configs, 0.0);
  std::vector<char> seen(cal.configs, 0);
  const auto [cm, cn, ck] = cal.cell(q);
  for (int64_t a = cm - 1; a <= cm + 1; ++a)
    for (int64_t b = cn - 1; b <= cn + 1; ++b)
      for (int64_t c = ck - 1; c <= ck + 1; ++c) {
        auto it = cal.cells.find({a, b, c});
        if (it == cal.cells.end()) continue;
        for (int32_t s : it->second) {
          const double* l = &cal.logs[3 * size_t(s)];
          const double d2 = (l[0] - q[0]) * (l[0] - q[0]) + (l[1] - q[1]) * (l[1] - q[1]) +
                            (l[2] - q[2]) * (l[2] - q[2]);
          if (d2 > cal.reach2) continue;
          const double g = std::exp(cal.scale * d2);
          for (int32_t r = cal.row_start[s]; r < cal.row_start[s + 1]; ++r) {
            const int32_t cfg = cal.row_config[r];
            num[cfg] += g * cal.row_leftover[r];
            den[cfg] += g * cal.row_weight[r];
            seen[cfg] = 1;
          }
        }
      }
  for (int32_t c = 0; c < cal.configs; ++c)
    if (seen[c]) (*out)[c] = num[c] / (den[c] + cal.prior);
}

// The second look's features of the pair (a first, b second): see pcr_calibration.
std::array<double, PCR_PAIR_FEATURES> pair_features(int64_t m, int64_t n, int64_t k,
                                                    const pcr_kernel_desc& a,
                                                    const pcr_kernel_desc& b, const pcr_model& ta,
                                                    const pcr_model& tb, double us_a, double us_b) {
  auto lg = [](double v) { return std::log(std::max(v, 1.0)); };
  std::array<double, PCR_PAIR_FEATURES> x{};
  x[0] = std::log(us_b / us_a);
  x[1] = lg(double(m)), x[2] = lg(double(n)), x[3] = lg(double(k));
  x[4] = std::log(double(b.tile_m) / a.tile_m);
  x[5] = std::log(double(b.tile_n) / a.tile_n);
  x[6] = double(b.swap_ab - a.swap_ab);
  x[7] = b.split != a.split ? 1.0 : 0.0;
  for (int i = 0; i < PCR_MODEL_FEATURES; ++i) {
    x[8 + i] = tb.features[i] - ta.features[i];
    x[8 + PCR_MODEL_FEATURES + i] = ta.features[i];
  }
  return x;
}

// The second look's logistic score that b (second) is faster than a (first).
double pair_score(const Calibration& cal, const std::array<double, PCR_PAIR_FEATURES>& x) {
  double score = cal.pair_base;
  for (int32_t node : cal.tree_start) {
    while (cal.node_feature[node] >= 0)
      node = x[cal.node_feature[node]] <= cal.node_threshold[node] ? cal.node_left[node]
                                                                   : cal.node_right[node];
    score += cal.node_value[node];
  }
  return score;
}

const Rule* matching_rule(const Table& t, int family, int64_t m, int64_t n, int64_t k) {
  for (const Rule& r : t.rules)
    if (r.family == family && (r.max_m < 0 || m <= r.max_m) && (r.max_n < 0 || n <= r.max_n) &&
        (r.max_k < 0 || k <= r.max_k))
      return &r;
  return nullptr;
}

const Calibration* calibration_of(const Table& t, int family) {
  for (const Calibration& c : t.calibrations)
    if (c.family == family) return &c;
  return nullptr;
}

// ---- ranking ---------------------------------------------------------------------------
struct Candidate {
  const pcr_kernel_desc* kd;
  int32_t id;     // the table's numbering
  int32_t index;  // in the caller's list
  double model_us = -1.0;
  pcr_model terms{};
};

// how much faster, modelled, another family's convolution kernel must be to run ahead of
// the device's own family's (the H200's ResNet-50 / UNet / ViT layers: the model's
// cross-family comparisons held from 7x on and failed up to 3x)
constexpr double kConvFar = 4.0;

// One ranking: the candidates, the problem and the table; each candidate's model terms
// computed once, on first need.
class Ranker {
 public:
  Ranker(const pcr_problem& p, const int32_t* order, int nfam, const Table* t,
         std::vector<Candidate>& cands)
      : p_(p), order_(order), nfam_(nfam), t_(t), cands_(cands), named_(cands.size(), 0) {}

  // Writes the candidates of the families in order to out, best first (see pcr_rank);
  // returns how many.
  int run(pcr_ranked* out) {
    out_ = out;
    const int64_t mb = p_.m * std::max<int64_t>(p_.batch, 1);
    const Rule* lead = t_ && nfam_ ? matching_rule(*t_, order_[0], mb, p_.n, p_.k) : nullptr;
    // 1. the lead rule's named kernels, in its order, whatever their family
    if (lead)
      emit_by_rule(select([&](size_t i) { return runs_here(i) && position(*lead, i) >= 0; }), lead);
    // 2. every other candidate a sweep calibrated, by calibrated time
    if (const Calibration* cal = t_ && nfam_ ? calibration_of(*t_, order_[0]) : nullptr) {
      std::vector<double> near, calibrated(cands_.size());
      neighbours(*cal, mb, p_.n, p_.k, &near);
      auto config = [&](size_t i) {
        return cands_[i].id < t_->kernels ? cal->config[cands_[i].id] : -1;
      };
      std::vector<size_t> measured =
          select([&](size_t i) { return runs_here(i) && config(i) >= 0; });
      for (size_t i : measured) {
        const pcr_model& tm = terms(i);
        calibrated[i] =
            tm.us * std::exp(correction(*cal, config(i), tm.features) + near[config(i)]);
      }
      order_by(measured, [&](size_t i) { return std::make_pair(int64_t(0), calibrated[i]); });
      // the second look: when the two fastest calibrated candidates lead the ranking
      bool second_first = false;
      if (n_out_ == 0 && measured.size() >= 2 && !cal->tree_start.empty()) {
        const size_t a = measured[0], b = measured[1];
        second_first =
            pair_score(*cal, pair_features(mb, p_.n, p_.k, *cands_[a].kd, *cands_[b].kd, terms(a),
                                           terms(b), calibrated[a], calibrated[b])) > 0.0;
        if (second_first) std::swap(measured[0], measured[1]);
      }
      for (size_t i : measured)
        emit(i, second_first && n_out_ == 0 ? PCR_RANK_SECOND_LOOK : PCR_RANK_CALIBRATED, -1, -1,
             calibrated[i]);
    }
    // 3. convolutions: no table knows them; the device's own family first, by the model,
    // unless another family's kernel is modelled kConvFar times faster
    if (p_.op != PCR_OP_GEMM && nfam_) {
      auto own = select([&](size_t i) { return runs_here(i) && family(i) == order_[0]; });
      auto rest = select([&](size_t i) { return runs_here(i) && family(i) != order_[0]; });
      auto by_model = [&](size_t i) { return std::make_pair(int64_t(0), model_us(i)); };
      order_by(own, by_model);
      order_by(rest, by_model);
      const bool far =
          !own.empty() && !rest.empty() && model_us(rest[0]) * kConvFar < model_us(own[0]);
      for (size_t i : far ? rest : own) emit(i, PCR_RANK_MODEL, -1, -1, model_us(i));
      for (size_t i : far ? own : rest) emit(i, PCR_RANK_MODEL, -1, -1, model_us(i));
      return n_out_;
    }
    // 4. family by family: the family's rule, then the model
    for (int f = 0; f < nfam_; ++f) {
      const Rule* rule =
          f == 0 ? lead : (t_ ? matching_rule(*t_, order_[f], mb, p_.n, p_.k) : nullptr);
      emit_by_rule(select([&](size_t i) { return family(i) == order_[f]; }), rule);
    }
    return n_out_;
  }

 private:
  int family(size_t i) const { return cands_[i].kd->family; }
  bool runs_here(size_t i) const {
    return std::find(order_, order_ + nfam_, family(i)) != order_ + nfam_;
  }
  // The candidates not yet ranked that `keep` accepts, in the caller's order.
  template <class Keep>
  std::vector<size_t> select(Keep keep) const {
    std::vector<size_t> v;
    for (size_t i = 0; i < cands_.size(); ++i)
      if (!named_[i] && keep(i)) v.push_back(i);
    return v;
  }
  int32_t position(const Rule& r, size_t i) const {
    const int32_t id = cands_[i].id;
    return id < int32_t(r.position.size()) ? r.position[id] : -1;
  }
  const pcr_model& terms(size_t i) {
    Candidate& c = cands_[i];
    if (c.model_us < 0) {
      model_terms(*c.kd, p_.m, p_.n, p_.k, p_.batch, p_.sm_count, p_.cc, &c.terms);
      c.model_us = c.terms.us;
    }
    return c.terms;
  }
  double model_us(size_t i) { return terms(i).us; }
  // Sorts by key(i) = (rank, time), then by name: ties fall the same way every time.
  template <class Key>
  void order_by(std::vector<size_t>& v, Key key) {
    std::vector<std::tuple<int64_t, double, size_t>> keyed;
    for (size_t i : v) {
      const auto [rank, time] = key(i);
      keyed.emplace_back(rank, time, i);
    }
    std::sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      if (std::get<0>(x) != std::get<0>(y)) return std::get<0>(x) < std::get<0>(y);
      if (std::get<1>(x) != std::get<1>(y)) return std::get<1>(x) < std::get<1>(y);
      return std::strcmp(cands_[std::get<2>(x)].kd->name, cands_[std::get<2>(y)].kd->name) < 0;
    });
    for (size_t j = 0; j < v.size(); ++j) v[j] = std::get<2>(keyed[j]);
  }
  // `group` in the rule's order (a pattern's position; unnamed ones after), then the model.
  void emit_by_rule(std::vector<size_t> group, const Rule* rule) {
    auto at = [&](size_t i) { return rule ? position(*rule, i) : -1; };
    const int32_t unnamed = rule ? rule->patterns : 0;
    order_by(group, [&](size_t i) {
      return std::make_pair(int64_t(at(i) >= 0 ? at(i) : unnamed), model_us(i));
    });
    const int32_t index = rule ? int32_t(rule - t_->rules.data()) : -1;
    for (size_t i : group)
      emit(i, at(i) >= 0 ? PCR_RANK_RULE : PCR_RANK_MODEL, at(i), at(i) >= 0 ? index : -1,
           model_us(i));
  }
  void emit(size_t i, int reason, int pattern, int rule, double us) {
    out_[n_out_++] = {cands_[i].index, reason, pattern, rule, us};
    named_[i] = 1;
  }

  const pcr_problem& p_;
  const int32_t* order_;
  int nfam_;
  const Table* t_;
  std::vector<Candidate>& cands_;
  std::vector<char> named_;
  pcr_ranked* out_ = nullptr;
  int n_out_ = 0;
};

int rank_candidates(const pcr_problem& p, const int32_t* order, int nfam,
                    std::vector<Candidate>& cands, const Table* t, pcr_ranked* out) {
  return Ranker(p, order, nfam, t, cands).run(out);
}

}  // namespace

int ranker_create(const pcr_table* table, pcr_ranker** ranker) {
  if (!table || !ranker) return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_ranker_create: NULL");
  *ranker = nullptr;
  try {
    *ranker = new pcr_ranker{hold(*table)};
  } catch (const std::invalid_argument& e) {
    return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_ranker_create: %s", e.what());
  }
  return PCR_OK;
}

void ranker_destroy(pcr_ranker* ranker) noexcept { delete ranker; }

int rank(const pcr_problem* p, const int32_t* families, int32_t family_count,
         const pcr_kernel_desc* candidates, const int32_t* ids, int32_t count,
         const pcr_ranker* ranker, pcr_ranked* out, int32_t* ranked) {
  if (!p || count < 0 || (count > 0 && (!candidates || !ids || !out)) || !ranked ||
      family_count < 0 || (family_count > 0 && !families))
    return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_rank: bad arguments");
  std::shared_ptr<const Table> held = ranker ? ranker->table : build_table();
  std::vector<Candidate> cands;
  cands.reserve(count);
  for (int32_t i = 0; i < count; ++i) {
    if (held && (ids[i] < 0 || ids[i] >= held->kernels))
      return set_error(PCR_ERR_INVALID_ARGUMENT, "pcr_rank: id %d outside the table's %d kernels",
                       ids[i], held->kernels);
    cands.push_back({&candidates[i], ids[i], i});
  }
  *ranked = rank_candidates(*p, families, family_count, cands, held.get(), out);
  return PCR_OK;
}

int selector_set(const pcr_ranker* ranker) {
  if (ranker && ranker->table->kernels != kKernelCount)
    return set_error(PCR_ERR_INVALID_ARGUMENT,
                     "pcr_selector_set: the table is resolved against %d kernels, the build "
                     "holds %d",
                     ranker->table->kernels, kKernelCount);
  {
    std::lock_guard<std::mutex> lock(g_table_mutex);
    g_table = ranker ? ranker->table : nullptr;
  }
  forget_choices();
  return PCR_OK;
}

int rank_kernels(const pcr_problem& p, const int32_t* order, int nfam,
                 const std::vector<int32_t>& kernels, pcr_ranked* out) {
  std::shared_ptr<const Table> t = build_table();
  std::vector<Candidate> cands;
  cands.reserve(kernels.size());
  for (int32_t k : kernels) cands.push_back({&kKernels[k]->info, k, k});
  return rank_candidates(p, order, nfam, cands, t.get(), out);
}

}  // namespace pcr
