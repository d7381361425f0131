"""The launch cases both launch benchmarks time (bench/launch.py on AM, bench/nv_launch.py on NVIDIA),
written once against the backend-neutral HCQ API: `prog` is an `add` kernel taking (out, a, b, n)."""
from __future__ import annotations


def launch_cases(dev, prog, graph_kernels: int) -> dict:
    """{name: (callable, kernels per call)}: a queue built and submitted per launch, a program call, and a
    graph of `graph_kernels` launches replayed with a changed buffer and scalar each time."""
    n = 1024
    out, a, b = dev.alloc(4 * n), dev.alloc(4 * n), dev.alloc(4 * n)
    xs = [dev.alloc(4 * n) for _ in range(2)]
    g3, l3 = (n // 256, 1, 1), (256, 1, 1)
    launch_args = [out, a, b, n]

    def fresh():
        q = dev.compute_queue()
        q.exec(prog, launch_args, g3, l3)
        q.signal(dev.timeline, dev.next_timeline())
        q.submit()

    def call():
        prog(out, a, b, n, global_size=g3, local_size=l3)

    graph = dev.graph()
    xv, nv = graph.var("x"), graph.var("n")
    for _ in range(graph_kernels):
        graph.exec(prog, out, xv, b, nv, global_size=g3, local_size=l3)
    graph(x=xs[0], n=n)
    flip = [0]

    def replay():
        flip[0] ^= 1
        graph(x=xs[flip[0]], n=n - flip[0])

    return {"fresh_queue": (fresh, 1), "program_call": (call, 1), "graph_replay": (replay, graph_kernels)}
