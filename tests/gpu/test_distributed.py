"""Tensor parallelism over two GPUs as a serving stack runs it: one process per GPU under
torch.distributed with NCCL, each running its shard of a Linear through pycutlass_rt.
Column-parallel (the weight's output rows split, outputs all-gathered) and row-parallel
(K split, float32 partial sums all-reduced), eagerly, through the torch operator and
replayed from a CUDA graph per rank. Skipped where fewer than two GPUs or no NCCL are
present (tests/gpu/test_multi_gpu.py drives two GPUs from one process)."""

import json
import os
import socket

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

pytestmark = [
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs"),
    pytest.mark.skipif(not dist.is_available() or not dist.is_nccl_available(), reason="no NCCL"),
]
WORLD = 2
M, K, N = 300, 1024, 2048  # odd M: a serving batch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _operands(device):
    """x and the whole weight, identical on every rank (one seed)."""
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.rand(M, K, device=device, generator=g).sub_(0.5).to(torch.bfloat16)
    w = torch.rand(N, K, device=device, generator=g).sub_(0.5).div_(K**0.5).to(torch.bfloat16)
    return x, w


def _relative_error(y, ref) -> float:
    return ((y.double() - ref).norm() / ref.norm()).item()


def _worker(rank: int, port: int, out_dir: str) -> None:
    import pycutlass_rt as pcr
    import pycutlass_rt.torch as pt

    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD
    )
    try:
        dev = torch.device("cuda", rank)
        x, w = _operands(dev)
        ref = x.double() @ w.double().t()
        errors = {}

        # column-parallel: this rank's N / WORLD outputs, gathered
        cols = N // WORLD
        w_col = w[rank * cols : (rank + 1) * cols]
        y_col = torch.empty(M, cols, device=dev, dtype=torch.bfloat16)
        pcr.gemm(x, w_col.t(), None, y_col)
        parts = [torch.empty_like(y_col) for _ in range(WORLD)]
        dist.all_gather(parts, y_col)
        errors["column"] = _relative_error(torch.cat(parts, 1), ref)

        # row-parallel: this rank's K / WORLD, partial sums in float32 all-reduced
        ks = K // WORLD
        x_row, w_row = x[:, rank * ks : (rank + 1) * ks], w[:, rank * ks : (rank + 1) * ks]
        partial = torch.empty(M, N, device=dev, dtype=torch.float32)
        pcr.gemm(x_row, w_row.t(), None, partial)
        dist.all_reduce(partial)
        errors["row"] = _relative_error(partial, ref)

        # the torch operator, then a CUDA graph of the shard's GEMM replayed on new inputs
        y_op = pt.linear(x, w_col)
        parts = [torch.empty_like(y_op) for _ in range(WORLD)]
        dist.all_gather(parts, y_op.contiguous())
        errors["operator"] = _relative_error(torch.cat(parts, 1), ref)

        xg = x.clone()
        yg = torch.empty(M, cols, device=dev, dtype=torch.bfloat16)
        stream = torch.cuda.Stream(dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            pcr.gemm(xg, w_col.t(), None, yg)  # scratch grows outside capture
            with torch.cuda.graph(graph, stream=stream):
                pcr.gemm(xg, w_col.t(), None, yg)
        torch.cuda.current_stream(dev).wait_stream(stream)
        xg.mul_(-2)
        graph.replay()
        parts = [torch.empty_like(yg) for _ in range(WORLD)]
        dist.all_gather(parts, yg)
        errors["graph"] = _relative_error(torch.cat(parts, 1), -2 * ref)

        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(errors, f)
    finally:
        dist.destroy_process_group()


def test_tensor_parallel_linear_one_process_per_gpu(tmp_path):
    mp = pytest.importorskip("torch.multiprocessing")
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    for rank in range(WORLD):
        errors = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert set(errors) == {"column", "row", "operator", "graph"}
        for kind, err in errors.items():
            assert err < 1e-2, f"rank {rank}, {kind}-parallel: relative error {err:.2e}"
