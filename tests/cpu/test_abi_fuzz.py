"""The C ABI against lying producers: 100,000 generated calls, no crash.

Each case hands pcr_describe (and pcr_plan_create and pcr_kernel_verdicts, which share
its validation) DLTensors a broken producer could export: NULL or short-lived shapes,
ranks past 32, negative, huge and wrapping extents and strides, odd and huge byte
offsets, NULL and odd data pointers, unknown dtypes and devices, and extras (bias,
scales, aux, amax, scale_d, a convolution's geometry) made the same way. The library
must answer each with a status (any of the header's), never crash, hang or read the
data (every pointer here is fake). The cases run in a child process, so a crash is a
failed test that names the seed and the case; the driver is this file run as a script.

    python tests/cpu/test_abi_fuzz.py --seed 3 --cases 100000
"""

import argparse
import ctypes
import os
import subprocess
import sys

import numpy as np

HERE = os.path.abspath(__file__)

#: values a lying producer might put in a shape or stride
EDGES = [0, 1, 2, 3, 7, 8, 16, 127, 128, 129, 4096, 65535, 2**31 - 1, 2**31, 2**32 + 1,
         2**40, 2**62, 2**63 - 1, -1, -2, -(2**31), -(2**63)]  # fmt: skip


#: (code, bits) of DLPack dtypes the library takes: float16, bfloat16, float32, e4m3, int8
DTYPES = {"f16": (2, 16), "bf16": (4, 16), "f32": (2, 32), "e4m3": (10, 8), "i8": (0, 8),
          "i32": (0, 32)}  # fmt: skip
#: (a and b, d) dtype pairs of real problems
PAIRS = [("f16", "f16"), ("bf16", "bf16"), ("f32", "f32"), ("e4m3", "bf16"), ("i8", "i32")]


class Maker:
    """Generates a consistent problem's DLTensors (GPU or host, any layouts), then lies in
    0 to 3 of their fields; keeps every buffer they point into alive until reset()."""

    def __init__(self, abi, rng):
        self.abi, self.rng, self.keep, self.tensors = abi, rng, [], []
        self.next_address = 0x10000000

    def reset(self):
        self.keep, self.tensors = [], []

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def tensor(self, rows, cols, dtype, device, batch=None):
        """A truthful row- or column-major (batched) matrix at a fake address."""
        abi, rng = self.abi, self.rng
        t = abi.DLTensor()
        dims = ([batch] if batch is not None else []) + [rows, cols]
        t.ndim = len(dims)
        if rng.random() < 0.5:
            inner = [cols, 1]
        else:
            inner = [1, max(rows, 1)]
        pad = self.pick([0, 0, 8, 3])
        inner = [x + pad if x > 1 else x for x in inner]
        strides = inner if batch is None else [rows * cols + pad] + inner
        shape = (ctypes.c_int64 * 33)(*dims)
        stride_arr = (ctypes.c_int64 * 33)(*strides)
        self.keep += [shape, stride_arr, t]
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(stride_arr, ctypes.POINTER(ctypes.c_int64))
        t.data = self.next_address
        self.next_address += 1 << 30  # distinct, never overlapping
        t.dtype.code, t.dtype.bits = DTYPES[dtype]
        t.dtype.lanes = 1
        t.device.device_type, t.device.device_id = device, 0
        self.tensors.append((t, shape, stride_arr))
        return t

    def lie(self):
        """One field of one tensor made what a broken producer might export."""
        rng = self.rng
        t, shape, strides = self.pick(self.tensors)
        field = int(rng.integers(10))
        if field == 0:
            t.ndim = self.pick([0, -1, 1, 4, 5, 32, 33, 2**31 - 1, -(2**31)])
        elif field == 1:
            t.shape = None
        elif field == 2:
            shape[int(rng.integers(3))] = self.pick(EDGES)
        elif field == 3:
            strides[int(rng.integers(3))] = self.pick(EDGES)
        elif field == 4:
            t.strides = None
        elif field == 5:
            t.byte_offset = self.pick([1, 2, 6, 2**31, 2**63, 2**64 - 2])
        elif field == 6:
            t.data = self.pick([None, 0x10001, 2**64 - 16, 2**63])
        elif field == 7:
            t.dtype.code = self.pick([0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 255])
            t.dtype.bits = self.pick([8, 16, 32, 64, 0, 1, 4, 6, 128, 255])
            t.dtype.lanes = self.pick([1, 1, 2, 0, 65535])
        elif field == 8:
            t.device.device_type = self.pick([1, 2, 3, 13, 0, 99, -1])
        else:
            t.device.device_id = self.pick([1, -1, 2**31 - 1])

    def problem(self):
        """(a, b, c, d, extras) of a consistent problem with 0 to 3 lies in it."""
        abi, rng = self.abi, self.rng
        m, n, k = (int(rng.choice([0, 1, 8, 16, 33, 64, 127, 256])) for _ in range(3))
        ab, dt = self.pick(PAIRS)
        device = self.pick([1, 1, 2])  # host (validated without a GPU), or CUDA
        batch = self.pick([None, None, None, 0, 1, 3])
        a = self.tensor(m, k, ab, device, batch)
        b = self.tensor(k, n, ab, device, self.pick([batch, None]) if batch is not None else None)
        d = self.tensor(m, n, dt, device, batch)
        c = self.tensor(m, n, dt, device, batch) if rng.random() < 0.3 else None
        x = None
        if rng.random() < 0.5:
            x = abi.Extras()
            x.activation = self.pick([0, 0, 0, 0, 1, 2, 3, 8, 99, -1])
            x.math = self.pick([0] * 8 + [1, 7])
            x.activation_alpha = self.pick([0.0, 1.0, -1.0] * 4 + [float("nan"), float("inf")])
            x.activation_beta = self.pick([1.0, 6.0] * 4 + [float("nan")])
            if rng.random() < 0.3:
                x.bias = ctypes.pointer(self.tensor(1, n, dt, device))
            if rng.random() < 0.2:
                x.scale_a = ctypes.pointer(self.tensor(m, 1, "f32", device))
                x.scale_b = ctypes.pointer(self.tensor(1, n, "f32", device))
            if rng.random() < 0.1:
                x.aux = ctypes.pointer(self.tensor(m, n, dt, device))
                x.amax = ctypes.pointer(self.tensor(1, 1, "f32", device))
            if rng.random() < 0.1:
                x.scale_d = ctypes.pointer(self.tensor(1, 1, "f32", device))
            if rng.random() < 0.1:
                conv = abi.Conv(*[int(self.pick([0, 1, 2, 3, -1, 2**31 - 1])) for _ in range(8)])
                self.keep.append(conv)
                x.conv = ctypes.pointer(conv)
            self.keep.append(x)
        for _ in range(int(rng.choice([0, 1, 1, 2, 3]))):
            self.lie()
        ptr = ctypes.pointer
        return ptr(a), ptr(b), (ptr(c) if c is not None else None), ptr(d), x and ptr(x)


def run(seed: int, cases: int) -> None:
    """The child: ``cases`` generated calls; prints progress so a crash names its case."""
    from pycutlass_rt import _abi, _lib

    lib = _lib.load()
    statuses = {int(s) for s in _abi.Status}
    rng = np.random.default_rng(seed)
    make = Maker(_abi, rng)
    problem = _abi.Problem()
    count = lib.pcr_kernel_count()
    verdicts = (_abi.Verdict * count)()
    for case in range(cases):
        if case % 5000 == 0:
            print(f"seed {seed} case {case}", flush=True)
        make.reset()
        a, b, c, d, extras = make.problem()
        alpha = float(rng.choice([1.0, 1.0, 0.0, -2.5, float("nan"), 1e300]))
        beta = float(rng.choice([0.0, 0.0, 1.0, float("nan")]))
        which = rng.random()
        if which < 0.7:
            st = lib.pcr_describe(
                a, b, c, d, alpha, beta, extras, ctypes.byref(problem), verdicts, count
            )
        elif which < 0.9:
            plan = ctypes.c_void_p()
            st = lib.pcr_plan_create(
                a, b, c, d, alpha, beta, extras, -1, ctypes.byref(problem), ctypes.byref(plan)
            )
            if plan.value:
                lib.pcr_plan_destroy(plan.value)
        else:  # a problem record as garbled as the tensors
            raw = rng.integers(-(2**31), 2**31, ctypes.sizeof(problem) // 4, dtype=np.int32)
            ctypes.memmove(ctypes.byref(problem), raw.tobytes(), ctypes.sizeof(problem))
            st = lib.pcr_kernel_verdicts(ctypes.byref(problem), verdicts, count)
        if st not in statuses:
            raise SystemExit(f"seed {seed} case {case}: status {st} is not the header's")
    print(f"seed {seed}: {cases} cases, no crash", flush=True)


def test_a_hundred_thousand_lying_calls_crash_nothing():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    cases, seeds = 25_000, range(4)
    children = {
        seed: subprocess.Popen(
            [sys.executable, HERE, "--seed", str(seed), "--cases", str(cases)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for seed in seeds
    }
    for seed, child in children.items():
        out, _ = child.communicate(timeout=900)
        tail = out[-2000:]
        assert child.returncode == 0, f"seed {seed}: exit {child.returncode}\n{tail}"
        assert f"{cases} cases, no crash" in out, tail


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=100_000)
    args = parser.parse_args()
    run(args.seed, args.cases)
