"""Graphs on the AM backend: recorded launches and copies become queues built once and replayed with
new values patched in (hcq.api.Graph)."""
from __future__ import annotations

import struct

from amdrv.hcq.queues import AMComputeQueue, AMCopyQueue
from hcq.api import Buffer, Graph, HCQError, Var


class GraphBuilder:
    """The graph half of AMHCQDevice (a base class of it): _build_graph and _replay_graph."""

    def _build_graph(self, graph: Graph, values: dict) -> None:
        """Runs of consecutive launches become one compute queue, runs of copies one copy queue; each
        queue after the first waits for the one before through a graph-private signal, and the last
        signals the timeline. A compute run's launches are written once into an indirect buffer in host
        memory, so a replay submits a few dwords however many kernels the graph holds. Uses of each
        variable are recorded as patch points (kernarg bytes, copy packet addresses)."""
        self._open_check("graph build")
        sync = self.new_signal()
        bodies: list = []   # per run: [queue, index of its leading wait or -1]; compute queues hold launches only
        patches: dict[str, list] = {}
        # the launches' slots in an arena of the graph's own: replays patch them in place, which the device's
        # round-robin arena would hand to other launches once it wraps
        arena = self._kernarg_arena(sum(step[1].handle.slot for step in graph.steps if step[0] == "exec"))
        launch_arena, self.arena = self.arena, arena
        try:
            for step in graph.steps:
                compute = step[0] == "exec"
                if not bodies or isinstance(bodies[-1][0], AMComputeQueue) != compute:
                    q = AMComputeQueue(self) if compute else AMCopyQueue(self)
                    bodies.append([q, q.wait(sync, 0) if bodies and not compute else -1])
                q = bodies[-1][0]
                if compute:
                    _, prog, args, g, l_ = step
                    idx = q.exec(prog, [values[a.name] if isinstance(a, Var) else a for a in args], g, l_)
                    mem, base = q.kernarg_slot(idx)
                    lay = prog.layout
                    for i, a in enumerate(args):
                        if isinstance(a, Var):
                            patches.setdefault(a.name, []).append((mem, base + lay.arg_offsets[i], lay.arg_structs[i],
                                                                   lay, i))
                else:
                    _, dst, src, n = step
                    idx = q.copy(*(values[x.name] if isinstance(x, Var) else x for x in (dst, src)), n)
                    for x, field in ((dst, "dst"), (src, "src")):
                        if isinstance(x, Var):
                            patches.setdefault(x.name, []).append((q, idx, None, field, None))
        finally:
            self.arena = launch_arena
        arena.push()
        runs: list[tuple] = []       # (queue, index of its leading wait or -1, index of its tail signal)
        for i, (q, w) in enumerate(bodies):
            if isinstance(q, AMComputeQueue):
                ib = self._host_copy(q.buf)
                q = AMComputeQueue(self)
                w = q.wait(sync, 0) if i else -1
                q.indirect(ib)
            runs.append((q, w, q.signal(self.timeline if i == len(bodies) - 1 else sync, 0)))
        # the kernarg bytes replays patch in the graph's arena (pushed after patching where DMA is not coherent)
        spans = [(off, off + st.size) for uses in patches.values() for mem, off, st, *_ in uses if st is not None]
        span = (min(a for a, _ in spans), max(b for _, b in spans)) if spans and not self.coherent else None
        for q, _, _ in runs:
            q.refs = {}     # the graph keeps and checks its own buffers (Graph.held, Graph.bound)
        graph.backend = (runs, sync, patches, span, arena)
        graph.fence, graph.seq = 0, 0
        self._replay_graph(graph, {})

    def _replay_graph(self, graph: Graph, values: dict) -> None:
        if self._closed:
            self._open_check("graph replay")
        if graph.fence:
            self.timeline.wait(graph.fence)  # kernargs are rewritten in place: the last replay must be done
        runs, sync, patches, span, arena = graph.backend
        done = []
        try:
            for name, v in values.items():
                try:
                    uses = patches[name]
                except KeyError:
                    raise HCQError(f"{self.name}: the graph has no variable {name!r}; it has "
                                   f"{sorted(patches)}") from None
                done.append(name)
                _patch(uses, v)
        except BaseException:
            # a value refused (of a kind that does not fit, another GPU's buffer, one too small for a copy): the
            # variables patched so far get their last replay's values back, so the graph is as that one left it
            for name in done:
                if name in graph.bound:
                    _patch(patches[name], graph.bound[name])
            raise
        if span and values:
            arena.touch(*span)
            arena.push()
        self._submit_graph_runs(graph, runs)


def _patch(uses: list, v) -> None:
    """Writes v at each use of one graph variable: kernarg bytes (a Buffer of this device where the parameter
    is a pointer, a number converted as a launch's pack converts it), or a copy command's address
    (update_copy checks the buffer's device and room first). ArgumentError where v does not fit."""
    if type(v) is Buffer:
        for mem, off, st, lay, i in uses:
            if st is None:
                mem.update_copy(off, **{lay: v})
            elif v.device is lay.device and (lay.is_buffer[i] or i in lay.untyped_index):
                st.pack_into(mem, off, v.va)
            else:
                raise lay.diagnose_one(i, v)
        return
    for mem, off, st, lay, i in uses:
        if st is None or lay.is_buffer[i] or type(v) in (bytes, bytearray) and len(v) != st.size:
            raise (lay.diagnose_one(i, v) if st is not None else
                   HCQError(f"{mem.dev.name}: a graph copy's {lay} is a Buffer, not {type(v).__name__} {v!r:.40}"))
        try:
            st.pack_into(mem, off, v)
        except (struct.error, TypeError, OverflowError):
            st.pack_into(mem, off, lay.arg_value(i, v))    # an untyped parameter's float or negative int
