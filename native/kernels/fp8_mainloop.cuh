// The sm90a fp8 mainloop without fast accumulation, with two partial-sum fragments.
//
// Hopper's fp8 wgmma accumulates with reduced precision, so CUTLASS's fp8 mainloop (like
// cuBLAS without fast accumulation) adds the MMA's partial sums into the fp32
// accumulators every 128 of K, one k-tile of our fp8 tiles. CUTLASS waits for every MMA
// in flight before each such promotion, so the tensor cores idle once per k-tile: fp8
// ran at 0.79-0.89x cuBLAS. Here k-tiles alternate between two partial-sum fragments:
// while the MMAs of k-tile i run into one, the sums of k-tile i-1 are added from the
// other. The adds and their order are CUTLASS's ((0 + p0) + p1) + ...; only the waiting
// goes. Register cost: three accumulator fragments (64x128 per warpgroup: 192 registers).
#pragma once

#include "cutlass/gemm/collective/collective_builder.hpp"

namespace pcr::tma {

template <class Policy>
constexpr bool kPromotesFp8 = false;
template <int Stages, class Cluster, class Schedule>
constexpr bool
    kPromotesFp8<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedFP8<Stages, Cluster, Schedule>> =
        true;

// Base: CUTLASS's fp8 collective (CollectiveMma<MainloopSm90TmaGmmaWarpSpecializedFP8...>);
// its loads, pipeline, storage and parameters stay; only the consumer's mma() changes.
template <class Base>
struct OverlappedPromotion : Base {
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;
  static_assert(cute::size<2>(typename Base::TileShape{}) ==
                    4 * TiledMma{}.template tile_size_mnk<2>(),
                "a k-tile is the promotion interval: 4 MMAs, 128 of fp8's K");

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read,
                          FrgTensorC& accum, int k_tile_count, int thread_idx,
                          TensorStorage& shared_tensors, Params const&) {
    using namespace cute;
    using cutlass::NumThreadsPerWarpGroup;
    Tensor sA =
        make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), typename Base::SmemLayoutA{});
    Tensor sB =
        make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), typename Base::SmemLayoutB{});
    constexpr int kWarpGroups = size(TiledMma{}) / NumThreadsPerWarpGroup;
    int warp_group = __shfl_sync(0xFFFFFFFF, thread_idx / NumThreadsPerWarpGroup, 0);
    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(
        make_layout(Int<kWarpGroups>{}, Int<NumThreadsPerWarpGroup>{})(warp_group));
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA,M,K,PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));  // (MMA,N,K,PIPE)

    // The MMAs of one k-tile into `part`, which they overwrite (scale-out zero first)
    auto issue = [&](auto& part) {
      auto token = pipeline.consumer_try_wait(smem_pipe_read);
      pipeline.consumer_wait(smem_pipe_read, token);
      int stage = smem_pipe_read.index();
      ++smem_pipe_read;
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
      warpgroup_fence_operand(part);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int k_block = 0; k_block < size<2>(tCrA); ++k_block) {
        gemm(tiled_mma, tCrA(_, _, k_block, stage), tCrB(_, _, k_block, stage), part);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
    };
    // After a wait: the sums in `part` are final; add them, free their smem stage. The
    // fences pin the adds between the wait and the next issue: adds sunk below the MMAs
    // that overwrite `part` would keep two copies of it alive, and the copies ptxas then
    // makes of in-flight MMA registers serialize every MMA (its warning C7514).
    PipelineState smem_pipe_release = smem_pipe_read;
    auto promote = [&](auto& part, bool release) {
      warpgroup_fence_operand(part);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) accum(i) += part(i);
      warpgroup_fence_operand(accum);
      if (release) {  // the last k-tile's stage is left to mma_tail, as in CUTLASS
        pipeline.consumer_release(smem_pipe_release);
        ++smem_pipe_release;
      }
    };

    Tensor part0 = make_fragment_like(accum);
    Tensor part1 = make_fragment_like(accum);
    clear(accum);
    warpgroup_fence_operand(accum);
    if (k_tile_count <= 0) return;  // (dispatch answers K = 0 without a kernel)
    issue(part0);
    --k_tile_count;
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count >= 2; k_tile_count -= 2) {
      issue(part1);
      warpgroup_wait<1>();
      promote(part0, true);
      issue(part0);
      warpgroup_wait<1>();
      promote(part1, true);
    }
    if (k_tile_count == 1) {
      issue(part1);
      warpgroup_wait<1>();
      promote(part0, true);
      warpgroup_wait<0>();
      promote(part1, false);
    } else {
      warpgroup_wait<0>();
      promote(part0, false);
    }
    warpgroup_fence_operand(accum);
  }
};

// The collective a CUTLASS builder made, with the overlapped promotion where it is the fp8 one
template <class Collective>
using WithOverlappedPromotion =
    cute::conditional_t<kPromotesFp8<typename Collective::DispatchPolicy>,
                        OverlappedPromotion<Collective>, Collective>;

}  // namespace pcr::tma
