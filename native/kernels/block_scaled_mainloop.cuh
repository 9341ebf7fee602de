// The sm90a block-scaled fp8 mainloop: every 128 of K, the MMAs' partial sums are scaled by
// that K-block's scale_a (per row, or per 128 rows) times scale_b (per column, or per 128
// columns) and added into the fp32 accumulators: DeepSeek-V3's recipe, torch._scaled_mm's
// BlockWise1x128 / BlockWise128x128 ones.
//
// Base: CUTLASS's block-scaled collective (MainloopSm90TmaGmmaWarpSpecializedBlockwiseFP8),
// whose loads (TMA for A and B, a producer warp's cp.async for the scales), pipeline,
// storage and parameters stay. Its consumer waits for every MMA in flight before each
// promotion, and compiled with nvcc 13 its MMAs serialize (ptxas C7510); this consumer
// alternates two partial-sum fragments as fp8_mainloop.cuh does: while the MMAs of k-tile
// i run into one, k-tile i-1's sums are scaled and added from the other. The scale grids
// (LayoutSFA, LayoutSFB) may have any strides (scale_layout below), so the layouts people
// store (per-token scales K-major or M-major, a checkpoint's weight_scale_inv transposed)
// are read where they lie.
#pragma once

#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"

namespace pcr::tma {

// A scale grid of one operand: ((G, rows / G), (128, K / 128), L) with both strides given at
// run time (CUTLASS's own layouts fix one of them to 1): G = 1 (one scale per row and
// K-block) or 128 (per 128 x 128 block).
template <int G>
using ScaleLayout = cute::Layout<
    cute::Shape<cute::Shape<cute::Int<G>, int32_t>, cute::Shape<cute::Int<128>, int32_t>, int32_t>,
    cute::Stride<cute::Stride<cute::_0, int32_t>, cute::Stride<cute::_0, int32_t>, int32_t>>;

// The grid of an operand of `rows` x k with element strides `along_rows` (between G-blocks
// of rows) and `along_k` (between K-blocks).
template <int G>
ScaleLayout<G> scale_layout(int rows, int k, int64_t along_rows, int64_t along_k) {
  using namespace cute;
  return make_layout(
      make_shape(make_shape(Int<G>{}, (rows + G - 1) / G), make_shape(Int<128>{}, (k + 127) / 128),
                 1),
      make_stride(make_stride(_0{}, int32_t(along_rows)), make_stride(_0{}, int32_t(along_k)), 0));
}

template <class Base>
struct OverlappedBlockScaling : Base {
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;
  using typename Base::TileShape;
  using Scale = typename Base::ElementBlockScale;
  static_assert(cute::size<2>(TileShape{}) == 128 && Base::ScaleGranularityK == 128,
                "a k-tile is one K-block of the scales: 128 of fp8's K");

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
    // The stages' scales, broadcast over the tile: (BLK_M, BLK_N, (1, PIPE))
    using SmemSFA = typename Base::SmemLayoutSFA;
    using SmemSFB = typename Base::SmemLayoutSFB;
    Tensor sSFA = make_tensor(
        make_smem_ptr(shared_tensors.smem_SFA.data()),
        make_layout(
            make_shape(get<0>(shape(SmemSFA{})), get<1>(TileShape{}),
                       make_shape(get<1>(shape(SmemSFA{})), get<2>(shape(SmemSFA{})))),
            make_stride(get<0>(stride(SmemSFA{})), _0{},
                        make_stride(get<1>(stride(SmemSFA{})), get<2>(stride(SmemSFA{}))))));
    Tensor sSFB = make_tensor(
        make_smem_ptr(shared_tensors.smem_SFB.data()),
        make_layout(
            make_shape(get<0>(TileShape{}), get<0>(shape(SmemSFB{})),
                       make_shape(get<1>(shape(SmemSFB{})), get<2>(shape(SmemSFB{})))),
            make_stride(_0{}, get<0>(stride(SmemSFB{})),
                        make_stride(get<1>(stride(SmemSFB{})), get<2>(stride(SmemSFB{}))))));

    constexpr int kWarpGroups = size(TiledMma{}) / NumThreadsPerWarpGroup;
    int warp_group = __shfl_sync(0xFFFFFFFF, thread_idx / NumThreadsPerWarpGroup, 0);
    TiledMma tiled_mma;
    auto thread_mma = tiled_mma.get_slice(
        make_layout(Int<kWarpGroups>{}, Int<NumThreadsPerWarpGroup>{})(warp_group));
    Tensor tCrA = thread_mma.make_fragment_A(thread_mma.partition_A(sA));  // (MMA,M,K,PIPE)
    Tensor tCrB = thread_mma.make_fragment_B(thread_mma.partition_B(sB));  // (MMA,N,K,PIPE)
    // this thread's accumulators' scales, in each stage (broadcast modes have stride 0)
    Tensor tCsSFA = tiled_mma.get_slice(thread_idx).partition_C(sSFA);  // (MMA,M,N,(1,PIPE))
    Tensor tCsSFB = tiled_mma.get_slice(thread_idx).partition_C(sSFB);
    Tensor tCrSFA = make_tensor_like<Scale>(tCsSFA(_, _, _, _0{}));
    Tensor tCrSFB = make_tensor_like<Scale>(tCsSFB(_, _, _, _0{}));

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
    // After a wait: the sums in `part` are final; scale them by their stage's factors, add
    // them, free the stage. The fences pin the adds between the wait and the next issue
    // (see fp8_mainloop.cuh: otherwise ptxas serializes every MMA, C7514).
    PipelineState smem_pipe_release = smem_pipe_read;
    auto promote = [&](auto& part, bool release) {
      warpgroup_fence_operand(part);
      const int stage = smem_pipe_release.index();
      copy(tCsSFA(_, _, _, make_coord(_0{}, stage)), tCrSFA);
      copy(tCsSFB(_, _, _, make_coord(_0{}, stage)), tCrSFB);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) accum(i) += part(i) * (tCrSFA(i) * tCrSFB(i));
      warpgroup_fence_operand(accum);
      if (release) pipeline.consumer_release(smem_pipe_release);
      ++smem_pipe_release;  // the last k-tile's stage is left to mma_tail, as in CUTLASS
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

}  // namespace pcr::tma
