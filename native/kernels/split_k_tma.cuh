// Split-K (split_k.cuh) for the CUTLASS 3.x families: the unsplit kernel's tile scheduler
// tag is pcr::split::Local<PersistentScheduler>, which CUTLASS's selector maps as it maps
// the tag it renames.
#pragma once

#include "split_k.cuh"
#include "tma_gemm.cuh"

namespace cutlass::gemm::kernel::detail {
template <class Base, class Tag, class ArchTag, class TileShape, class ClusterShape,
          uint32_t SchedulerPipelineStageCount>
struct TileSchedulerSelector<pcr::split::Local<Base, Tag>, ArchTag, TileShape, ClusterShape,
                             SchedulerPipelineStageCount>
    : TileSchedulerSelector<Base, ArchTag, TileShape, ClusterShape, SchedulerPipelineStageCount> {};
}  // namespace cutlass::gemm::kernel::detail
