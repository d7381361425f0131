"""A representative set of kernel IR programs with inputs, for the code generators' tests and bench/compile.py.

    samples() -> dict[name, Sample]     Sample(kernel, inputs, scalars): inputs are numpy arrays for the
                                        kernel's read buffers, in buffer order; scalars its scalar values

Together they cover every IR op, uniform (SGPR) and per-lane (VGPR) integer arithmetic, idiv/mod by
powers of two and by other constants, nested reductions, sizes that leave part of a wave idle, and
enough simultaneously live values to need a real register allocation.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from compiler_bridge import ir

F, I = "float32", "int32"


@dataclass
class Sample:
    kernel: ir.Kernel
    inputs: list
    scalars: tuple = ()


def _buf(name, dtype, n, access):
    return ir.BufParam(name, dtype, n, access)


def samples(seed: int = 0) -> dict[str, Sample]:
    rng = np.random.default_rng(seed)
    out = {}

    # elementwise float chain with a division and exp, n not a multiple of 32
    n = 77
    b = ir.Builder()
    i = b.gid()
    x, y = b.load(0, i, F), b.load(1, i, F)
    z = b.binary("add", b.binary("mul", x, y), b.unary("exp", x))
    z = b.binary("div", z, b.binary("add", y, b.const(2.5, F)))
    b.store(2, i, b.unary("relu", z))
    out["ew_chain"] = Sample(b.kernel("ew_chain", [_buf("x", F, n, "r"), _buf("y", F, n, "r"),
                                                   _buf("o", F, n, "w")], n),
                             [rng.standard_normal(n).astype(np.float32), rng.uniform(-2, 2, n).astype(np.float32)])

    # unary math: log sqrt sigmoid tanh neg max sub, and division by a constant and by special values
    n = 40
    b = ir.Builder()
    i = b.gid()
    x, y = b.load(0, i, F), b.load(1, i, F)
    ax = b.binary("max", x, b.unary("neg", x))                               # |x|
    t = b.binary("add", b.unary("log", b.binary("add", ax, b.const(0.5, F))), b.unary("sqrt", ax))
    t = b.binary("sub", t, b.unary("sigmoid", y))
    t = b.binary("add", t, b.unary("tanh", b.binary("mul", x, y)))
    t = b.binary("add", t, b.binary("div", x, b.const(3.0, F)))
    b.store(2, i, t)
    b.store(3, i, b.binary("div", x, y))                                     # y holds 0, inf, -0
    ys = rng.uniform(-3, 3, n).astype(np.float32)
    ys[:4] = [0.0, np.inf, -0.0, 1e-39]
    out["unary_math"] = Sample(b.kernel("unary_math", [_buf("x", F, n, "r"), _buf("y", F, n, "r"),
                                                       _buf("o", F, n, "w"), _buf("q", F, n, "w")], n),
                               [rng.uniform(-4, 4, n).astype(np.float32), ys])

    # row sum and row max over a non-power-of-two row length
    rows, cols = 33, 7
    b = ir.Builder()
    i = b.gid()
    base = b.binary("mul", i, b.const(cols, I))
    j = b.begin_reduce()
    s = b.end_reduce("sum", cols, b.load(0, b.binary("add", base, j), F))
    j = b.begin_reduce()
    m = b.end_reduce("max", cols, b.load(0, b.binary("add", base, j), F))
    b.store(1, i, b.binary("add", s, m))
    out["row_sum_max"] = Sample(b.kernel("row_sum_max", [_buf("x", F, rows * cols, "r"),
                                                         _buf("o", F, rows, "w")], rows),
                                [rng.standard_normal(rows * cols).astype(np.float32)])

    # softmax of each row: max, sum of exp(x - max), then one output element per item (nested reduces)
    rows, cols = 6, 10
    n = rows * cols
    b = ir.Builder()
    i = b.gid()
    r = b.binary("idiv", i, b.const(cols, I))
    base = b.binary("mul", r, b.const(cols, I))
    j = b.begin_reduce()
    mx = b.end_reduce("max", cols, b.load(0, b.binary("add", base, j), F))
    j = b.begin_reduce()
    e = b.unary("exp", b.binary("sub", b.load(0, b.binary("add", base, j), F), mx))
    den = b.end_reduce("sum", cols, e)
    num = b.unary("exp", b.binary("sub", b.load(0, i, F), mx))
    b.store(1, i, b.binary("div", num, den))
    out["softmax"] = Sample(b.kernel("softmax", [_buf("x", F, n, "r"), _buf("o", F, n, "w")], n),
                            [rng.standard_normal(n).astype(np.float32) * 3])

    # matmul: out[r, c] = sum_k a[r, k] * b[k, c], index arithmetic by idiv/mod with a power of two
    M, K, N = 5, 9, 8
    b = ir.Builder()
    i = b.gid()
    r, c = b.binary("idiv", i, b.const(N, I)), b.binary("mod", i, b.const(N, I))
    k = b.begin_reduce()
    av = b.load(0, b.binary("add", b.binary("mul", r, b.const(K, I)), k), F)
    bv = b.load(1, b.binary("add", b.binary("mul", k, b.const(N, I)), c), F)
    acc = b.end_reduce("sum", K, b.binary("mul", av, bv))
    b.store(2, i, acc)
    out["matmul"] = Sample(b.kernel("matmul", [_buf("a", F, M * K, "r"), _buf("b", F, K * N, "r"),
                                               _buf("o", F, M * N, "w")], M * N),
                           [rng.standard_normal(M * K).astype(np.float32),
                            rng.standard_normal(K * N).astype(np.float32)])

    # int32: transpose by idiv/mod by a non-power-of-two, compares, where, casts, int reductions
    R, C = 7, 13
    n = R * C
    b = ir.Builder()
    i = b.gid()
    src = b.binary("add", b.binary("mul", b.binary("mod", i, b.const(R, I)), b.const(C, I)),
                   b.binary("idiv", i, b.const(R, I)))
    v = b.load(0, src, I)
    neg = b.compare("cmplt", v, b.const(0, I))
    w = b.where(neg, b.unary("neg", v), b.binary("mul", v, b.const(3, I)))
    f = b.cast(w, F)
    big = b.compare("cmple", f, b.const(150.0, F))
    w = b.binary("add", w, b.cast(big, I))
    w = b.binary("sub", w, b.cast(b.compare("cmpeq", v, b.const(5, I)), I))
    w = b.binary("max", w, b.cast(b.cast(v, "bool"), I))
    j = b.begin_reduce()
    isum = b.end_reduce("sum", 3, b.binary("mul", j, b.binary("mod", w, b.const(4, I))))
    j = b.begin_reduce()
    imax = b.end_reduce("max", 4, b.unary("relu", b.binary("sub", v, j)))
    w = b.binary("add", w, b.binary("add", isum, imax))
    b.store(1, i, w)
    b.store(2, i, b.cast(b.binary("mul", f, b.const(0.37, F)), I))
    b.store(3, i, b.cast(b.compare("cmpne", b.cast(v, F), b.const(2.0, F)), I))
    out["int_ops"] = Sample(b.kernel("int_ops", [_buf("x", I, n, "r"), _buf("o", I, n, "w"), _buf("t", I, n, "w"),
                                                 _buf("u", I, n, "w")], n),
                            [rng.integers(-60, 60, n).astype(np.int32)])

    # uniform (SGPR) arithmetic from scalar parameters and reduce indices, float scalar parameter
    n = 50
    b = ir.Builder()
    i = b.gid()
    p, q = b.param(0, I), b.param(1, F)
    u = b.binary("add", b.binary("mul", p, b.const(3, I)), b.const(2, I))                 # 3p + 2, uniform
    u = b.binary("add", b.binary("idiv", u, b.const(5, I)), b.binary("mod", u, b.const(8, I)))
    u = b.where(b.compare("cmplt", p, b.const(100, I)), u, b.unary("neg", u))
    j = b.begin_reduce()
    inner = b.binary("max", b.binary("sub", j, p), b.unary("relu", b.binary("idiv", j, b.const(3, I))))
    us = b.end_reduce("sum", 6, inner)
    x = b.load(0, i, F)
    y = b.binary("mul", x, q)
    y = b.binary("add", y, b.cast(b.binary("add", u, us), F))
    y = b.where(b.compare("cmplt", y, q), q, y)
    b.store(1, i, y)
    b.store(2, i, b.binary("add", b.binary("add", i, u), b.cast(b.compare("cmpne", u, b.const(7, I)), I)))
    out["uniform"] = Sample(b.kernel("uniform", [_buf("x", F, n, "r"), _buf("o", F, n, "w"), _buf("g", I, n, "w")], n,
                                     [ir.ScalarParam("p", I), ir.ScalarParam("q", F)]),
                            [rng.standard_normal(n).astype(np.float32)], (11, 0.75))

    # nested reduces with work that is invariant in the inner loop (j * K) or in both (i * J * K, y[i])
    rows, J, K = 9, 3, 5
    b = ir.Builder()
    i = b.gid()
    j = b.begin_reduce()
    k = b.begin_reduce()
    idx = b.binary("add", b.binary("add", b.binary("mul", i, b.const(J * K, I)), b.binary("mul", j, b.const(K, I))), k)
    yi = b.load(1, i, F)
    inner = b.end_reduce("max", K, b.binary("mul", b.load(0, idx, F), yi))
    outer = b.end_reduce("sum", J, b.binary("add", inner, b.binary("mul", b.load(1, i, F), b.const(2.0, F))))
    b.store(2, i, outer)
    out["nested"] = Sample(b.kernel("nested", [_buf("x", F, rows * J * K, "r"), _buf("y", F, rows, "r"),
                                               _buf("o", F, rows, "w")], rows),
                           [rng.standard_normal(rows * J * K).astype(np.float32),
                            rng.standard_normal(rows).astype(np.float32)])

    # many values live at once (register pressure): 24 loads, summed in reverse order of loading
    n, W = 33, 24
    b = ir.Builder()
    i = b.gid()
    vals = [b.load(0, b.binary("add", b.binary("mul", i, b.const(W, I)), b.const(t, I)), F) for t in range(W)]
    acc = vals[-1]
    for t in reversed(vals[:-1]):
        acc = b.binary("add", b.binary("mul", acc, b.const(0.5, F)), t)
    b.store(1, i, acc)
    out["pressure"] = Sample(b.kernel("pressure", [_buf("x", F, n * W, "r"), _buf("o", F, n, "w")], n),
                             [rng.standard_normal(n * W).astype(np.float32)])
    return out


_NP = {F: np.float32, I: np.int32}


def outputs(k: ir.Kernel) -> list[int]:
    return [t for t, b in enumerate(k.bufs) if b.access == "w"]


def _buffers(s: Sample) -> list[np.ndarray]:
    ins = iter(s.inputs)
    return [next(ins) if b.access == "r" else np.zeros(b.size, _NP[b.dtype]) for b in s.kernel.bufs]


def run_reference(s: Sample) -> list[np.ndarray]:
    """The written buffers after the C reference backend ran the kernel."""
    from compiler_bridge.codegen.c import CProgram
    bufs = [a.copy() for a in _buffers(s)]
    CProgram(s.kernel)(*bufs, *s.scalars)
    return [bufs[t] for t in outputs(s.kernel)]


def scalar_values(s: Sample) -> list:
    """Scalar arguments as raw 32-bit patterns (what rdna3.wave.pack_kernargs takes)."""
    return [int(np.float32(v).view(np.uint32)) if p.dtype == F else int(np.int32(v).view(np.uint32))
            for p, v in zip(s.kernel.scalars, s.scalars)]


def run_wave(s: Sample, code_object: bytes, name: str, launch, stats: dict | None = None) -> list[np.ndarray]:
    """The written buffers after the kernel ran on rdna3's wave executor (no device boot);
    `stats` (a dict) receives the executed wave instructions and the wave count."""
    from rdna3.codeobj import CodeObject
    from rdna3.wave import dispatch, pack_kernargs
    from rdna3.wave_memory import FlatMemory
    co = CodeObject(code_object)
    mem = FlatMemory()
    bufs = _buffers(s)
    addrs = [mem.upload(a.tobytes()) if b.access == "r" else mem.alloc(a.nbytes)
             for a, b in zip(bufs, s.kernel.bufs)]
    (gx, _, _), (lx, _, _) = launch
    res = dispatch(co, name, mem, (gx * lx,), (lx,), pack_kernargs(co.kernel(name), addrs + scalar_values(s)))
    if stats is not None:
        stats.update(instructions=res.instructions, waves=res.waves)
    return [mem.array(addrs[t], _NP[s.kernel.bufs[t].dtype], s.kernel.bufs[t].size) for t in outputs(s.kernel)]


def run_hcq(dev, s: Sample, code_object: bytes, name: str, launch) -> list[np.ndarray]:
    """The written buffers after the kernel ran on an hcq device."""
    bufs = _buffers(s)
    handles = []
    for a in bufs:
        h = dev.alloc(max(a.nbytes, 4))
        dev.copyin(h, a.tobytes())
        handles.append(h)
    try:
        prog = dev.program(code_object, name)
        g, l_ = launch
        prog(*handles, *s.scalars, global_size=tuple(g), local_size=tuple(l_), wait=True)
        return [np.frombuffer(dev.copyout(handles[t], bufs[t].nbytes), bufs[t].dtype).copy()
                for t in outputs(s.kernel)]
    finally:
        for h in handles:
            dev.free(h)
