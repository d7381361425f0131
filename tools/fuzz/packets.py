"""Packet and wave-code fuzzer: random and mutated PM4 streams on the compute queue, random and mutated SDMA
streams on the copy queue, and random wave code from the assembler's tables, each submitted through the
driver to a simulated GPU; then the driver must see what went wrong, recover, and run a correct job.

    python -m tools.fuzz.packets                                   # 300 cases, seed 0
    python -m tools.fuzz.packets --budget 2000 --seed 3
    python -m tools.fuzz.packets --kinds wave --replay 3:41        # one case of a run again, verbosely

A case is one stream (or one kernel) of a kind:
  pm4-mutated   a valid compute stream (a kernel launch, WRITE_DATA, COPY_DATA, WAIT_REG_MEM, ACQUIRE_MEM,
                RELEASE_MEM, an INDIRECT_BUFFER) with 1-4 mutations: bit flips, a dword replaced by an edge
                value, a header's count or opcode changed, dwords dropped, duplicated or swapped
  pm4-random    1-6 type-3 packets of random opcodes (nvd.h's and others) with random lengths and bodies of
                edge values, the scratch buffer's address and random dwords; now and then a non-type-3 header
  sdma-mutated  a valid SDMA stream (COPY_LINEAR, WRITE, FENCE, POLL_REGMEM, CONSTANT_FILL, TIMESTAMP, GCR,
                TRAP, NOP) with the same mutations
  sdma-random   1-6 SDMA packets of random op/sub-op with random bodies
  wave          a kernel whose body is 1-24 random instruction words of the gfx11 encoding tables (any
                opcode, random fields and operands) and assembled loads, stores, branches and messages,
                after a prologue that loads the scratch buffer's address, ended by s_endpgm
Streams go in through the driver's raw ring path (amdrv.queue: ring write, doorbell) followed by the
driver's own fence on the device's timeline; kernels through hcq (dev.program, a launch with wait).

Expected outcomes: the work completes (`ran`); the driver raises HCQFault (a VM fault the IH reported, or a
halted wave) or HCQTimeout (the queue stopped: the simulator records why, e.g. an unknown opcode), then
`recover()` makes the next correct job run. Unexpected (a finding, exit status 1): any other exception (a
simulator crash is one that escapes the doorbell write), a stream that stops the queue without the
simulator recording why, a correct job that fails after recover(), or the canary buffer (which no stream
names) changed. The simulated GPU is powered on fresh once per run; a case that needs more than recover()
(a stream that wrote registers through the privileged kernel queue) reopens it, counted in the table.
"""
from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
import time
import traceback
from array import array

import hcq
from amdrv import pm4, sdma_packets
from amdrv.autogen import pm4 as P
from rdna3 import assemble
from rdna3.codeobj import KernelArg, KernelSpec, write_code_object
from amdrv.firmware import FirmwareError
from tools.fuzz.common import Finding, Tally, add_common_args, case_rng, firmware_missing, sim_chip

KINDS = ("pm4-mutated", "pm4-random", "sdma-mutated", "sdma-random", "wave")
SCRATCH_BYTES = 1 << 16
CANARY_BYTES = 1 << 14
# fill(dst, value): dst[work-item] = value, one workgroup: the known-good job after every case
FILL_ASM = ("s_load_b64 s[2:3], s[0:1], 0x0\ns_load_b32 s4, s[0:1], 0x8\nv_lshlrev_b32 v1, 2, v0\n"
            "s_waitcnt lgkmcnt(0)\nv_mov_b32 v2, s4\nglobal_store_b32 v1, v2, s[2:3]\ns_endpgm\n")
FILL_ARGS = [KernelArg(0, 8, "global_buffer", "global", "dst"), KernelArg(8, 4, "by_value", name="value")]
EDGE = (0, 1, 2, 3, 4, 0xFF, 0xFFFF, 0x3FFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)
M32 = 0xFFFFFFFF


def fill_code_object() -> bytes:
    return write_code_object([KernelSpec("fill", assemble(FILL_ASM), args=FILL_ARGS)])


class Target:
    """The simulated GPU a run fuzzes and what each case needs of it: the fill program (the correct job),
    a scratch buffer the streams may name, and a canary buffer no stream names."""

    def __init__(self, device: str, timeout: float):
        self.device, self.timeout, self.reopens = device, timeout, 0
        self.dev = None
        self.open()

    def open(self) -> None:
        if self.dev is not None:
            try:
                self.dev.close()
            except Exception:  # noqa: BLE001 - a GPU this far gone may not fini; a fresh one replaces it
                pass
        chip = sim_chip(self.device)
        self.dev = dev = hcq.open(f"am:sim:{chip}", fresh=True)
        self.sim = dev.gpu.dev.pci.dev
        dev.default_timeout = max(2.0, 4 * self.timeout)   # the correct job and copies wait this long
        self.fill = dev.program(fill_code_object(), "fill")
        self.canary = dev.alloc(CANARY_BYTES)
        self.spacer = dev.alloc((100 << 20) + (12 << 10))   # no bit flip of a scratch address lands in the canary
        self.scratch = dev.alloc(SCRATCH_BYTES)
        self.check_buf = dev.alloc(4096)
        self.check_copy = dev.alloc(4096)
        self.canary_data = bytes((i * 131 + 7) & 0xFF for i in range(CANARY_BYTES))
        dev.copyin(self.canary, self.canary_data)
        self.satisfied = dev.new_signal(1)       # a signal waits on it are met by
        self.ib = dev.alloc(4096, host=True)     # host memory for an INDIRECT_BUFFER's commands

    def canary_span(self) -> tuple[int, int]:
        return self.canary.va, self.canary.va + CANARY_BYTES

    def correct_job(self, value: int) -> str | None:
        """The known-good work: a launch (compute) and a copy (SDMA); None when both are right, else why."""
        dev = self.dev
        try:
            self.fill(self.check_buf, value, global_size=(1,), local_size=(64,), wait=True)
            dev.copy(self.check_copy, self.check_buf, 256)
            got = dev.copyout(self.check_copy, 256)
        except hcq.HCQError as e:
            return f"{type(e).__name__}: {e}"
        want = value.to_bytes(4, "little") * 64
        return None if got == want else f"wrong data: {got[:16].hex()}... (want {want[:16].hex()}...)"


# ------------------------------------------------------------------------------------------ PM4 streams
_PM4_OPS = sorted({v for k, v in vars(P).items() if k.startswith("PACKET3_") and isinstance(v, int) and v < 0x100
                   and not k.endswith(("_START", "_END"))})


def pm4_valid(t: Target, rng) -> array:
    """A valid compute stream naming only the scratch buffer, the satisfied signal and the IB page."""
    b = pm4.PM4()
    s = t.scratch.va
    for _ in range(rng.randint(1, 4)):
        what = rng.choice(("launch", "write", "copy", "wait", "acquire", "release", "ib", "nop"))
        if what == "launch":
            q = t.dev.compute_queue()
            q.exec(t.fill, [t.scratch, rng.getrandbits(32)], (1, 1, 1), (rng.choice((32, 64)), 1, 1))
            b.buf.extend(q.buf)
        elif what == "write":
            b.write_data(s + 4 * rng.randrange(64), *(rng.getrandbits(32) for _ in range(rng.randint(1, 8))))
        elif what == "copy":
            b.copy_data(pm4.SEL_MEMORY, s, pm4.SEL_MEMORY, s + 4 * rng.randrange(1, 64))
        elif what == "wait":
            b.wait_reg_mem(t.satisfied.va, 1)
        elif what == "acquire":
            b.acquire_mem()
        elif what == "release":
            b.release_mem(s + 8 * rng.randrange(64), rng.getrandbits(32), data_sel=rng.choice((pm4.DATA_32,
                                                                                                pm4.DATA_64)))
        elif what == "ib":
            inner = pm4.PM4()
            inner.write_data(s + 4 * rng.randrange(64), rng.getrandbits(32))
            t.dev.copyin(t.ib, inner.buf.tobytes())
            b.indirect_buffer(t.ib.va, len(inner.buf))
        else:
            b.nop(rng.randint(1, 4))
    return b.buf


def pm4_random(t: Target, rng) -> array:
    out = array("I")
    for _ in range(rng.randint(1, 6)):
        if rng.random() < 0.05:
            out.append(rng.getrandbits(32))              # any header: types 0-2 included
            continue
        op = rng.choice(_PM4_OPS) if rng.random() < 0.8 else rng.getrandbits(8)
        count = rng.choice((rng.randint(0, 8), rng.randint(0, 40)))
        out.append(pm4.header(op, count))
        out.extend(_value(t, rng) for _ in range(count + 1))
    return out


def _value(t: Target, rng) -> int:
    r = rng.random()
    if r < 0.3:
        return rng.choice(EDGE)
    if r < 0.5:                                          # the scratch buffer: lo, hi
        a = t.scratch.va + 4 * rng.randrange(SCRATCH_BYTES // 4)
        return a & M32 if rng.random() < 0.5 else a >> 32
    if r < 0.6:
        return rng.getrandbits(rng.choice((4, 8, 16)))
    return rng.getrandbits(32)


# ------------------------------------------------------------------------------------------ SDMA streams
def sdma_valid(t: Target, rng) -> array:
    b = sdma_packets.SDMABuilder()
    s, half = t.scratch.va, SCRATCH_BYTES // 2
    for _ in range(rng.randint(1, 4)):
        what = rng.choice(("copy", "write", "fence", "poll", "fill", "timestamp", "gcr", "trap", "nop"))
        if what == "copy":
            b.copy(s + half, s + rng.randrange(64), rng.randint(1, half - 64))
        elif what == "write":
            b.write(s + 4 * rng.randrange(64), *(rng.getrandbits(32) for _ in range(rng.randint(1, 8))))
        elif what == "fence":
            b.fence(s + 4 * rng.randrange(64), rng.getrandbits(32))
        elif what == "poll":
            b.poll_mem(t.satisfied.va, 1)
        elif what == "fill":
            b.fill(s + 4 * rng.randrange(64), rng.getrandbits(32), 4 * rng.randint(1, 256))
        elif what == "timestamp":
            b.timestamp(s + 8 * rng.randrange(64))
        elif what == "gcr":
            b.gcr()
        elif what == "trap":
            b.trap(rng.getrandbits(28))
        else:
            b.nop(rng.randint(1, 4))
    return b.buf


def sdma_random(t: Target, rng) -> array:
    out = array("I")
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(17) if rng.random() < 0.8 else rng.getrandbits(8)
        sub = rng.choice((0, 0, 1, 2, 4, rng.getrandbits(8)))
        out.append(op | sub << 8 | rng.choice((0, rng.getrandbits(16))) << 16)
        out.extend(_value(t, rng) for _ in range(rng.choice((rng.randint(0, 7), rng.randint(0, 20)))))
    return out


# ------------------------------------------------------------------------------------------ mutations
def mutate(stream: array, rng, headers: list[int]) -> tuple[array, list[str]]:
    """1-4 mutations of a stream; headers: dword values that are packet headers of this engine."""
    s, done = array("I", stream), []
    for _ in range(rng.randint(1, 4)):
        if not s:
            break
        i = rng.randrange(len(s))
        m = rng.choice(("flip", "edge", "random", "count", "opcode", "drop", "dup", "swap", "header", "cut"))
        if m == "flip":
            s[i] ^= 1 << rng.randrange(32)
        elif m == "edge":
            s[i] = rng.choice(EDGE)
        elif m == "random":
            s[i] = rng.getrandbits(32)
        elif m == "count":                               # PM4 count 29:16 / SDMA fields 31:16
            s[i] = (s[i] & ~(0x3FFF << 16)) | (((s[i] >> 16 & 0x3FFF) + rng.choice((-2, -1, 1, 2, 100))) & 0x3FFF) << 16
        elif m == "opcode":                              # PM4 opcode 15:8 / SDMA op 7:0, sub-op 15:8
            s[i] = (s[i] & ~0xFF00) | rng.getrandbits(8) << 8 if rng.random() < 0.5 else (s[i] & ~0xFF) | rng.getrandbits(8)
        elif m == "drop":
            del s[i:i + rng.randint(1, 3)]
        elif m == "dup":
            s[i:i] = s[i:i + rng.randint(1, 3)]
        elif m == "swap":
            j = rng.randrange(len(s))
            s[i], s[j] = s[j], s[i]
        elif m == "header":
            s[i] = rng.choice(headers) if headers else rng.getrandbits(32)
        else:
            del s[i:]
        done.append(f"{m}@{i}")
    return s, done


# ------------------------------------------------------------------------------------------ wave code
_WAVE_PROLOGUE = "s_load_b64 s[2:3], s[0:1], 0x0\nv_lshlrev_b32 v1, 2, v0\ns_waitcnt lgkmcnt(0)\n"
_WAVE_TEMPLATES = (
    "global_store_b32 v1, v{a}, s[2:3] offset:{o4}", "global_load_b32 v{a}, v1, s[2:3] offset:{o4}",
    "global_atomic_add_u32 v1, v{a}, s[2:3]", "s_load_b32 s{s}, s[2:3], {o4}", "v_add_nc_u32 v{a}, v{b}, v{c}",
    "v_mul_f32 v{a}, v{b}, v{c}", "v_rcp_f32 v{a}, v{b}", "s_add_u32 s{s}, s{s}, {k}", "v_mov_b32 v{a}, {k}",
    "ds_store_b32 v1, v{a}", "ds_load_b32 v{a}, v1", "s_waitcnt vmcnt(0) lgkmcnt(0)", "s_barrier", "s_nop {n}",
    "s_sleep {n}", "s_cbranch_scc0 {br}", "s_cbranch_execz {br}", "s_branch {br}", "v_cmp_gt_u32 vcc_lo, v{a}, v{b}",
    "s_and_saveexec_b32 s{s}, vcc_lo", "s_mov_b32 exec_lo, s{s}", "s_trap {n}", "s_sendmsg sendmsg(MSG_DEALLOC_VGPRS)",
    "s_setprio {n}", "v_readfirstlane_b32 s{s}, v{a}", "scratch_store_b32 off, v{a}, off offset:{o4}",
)


def wave_code(rng) -> bytes:
    """A prologue (s[2:3] = the scratch buffer, v1 = 4 * work-item id), random words and instructions, s_endpgm."""
    from rdna3.encoding import FORMATS
    from rdna3.opcodes_gfx11 import OPCODES
    from tools.gen_isa import encode
    body = []
    for _ in range(rng.randint(1, 24)):
        if rng.random() < 0.5:
            kind = rng.choice(sorted(OPCODES))
            fmt = ("VOPD" if kind.startswith("VOPD") else "FLAT" if kind.split("_")[0] in ("FLAT", "GLOBAL", "SCRATCH")
                   else "MUBUF" if kind.startswith("MUBUF") else kind)
            layout = FORMATS[fmt][2]
            fields = {k: rng.getrandbits(w) for k, (lo, w) in layout.items()}
            fields["opx" if kind == "VOPDX" else "opy" if kind == "VOPDY" else "op"] = rng.choice(sorted(OPCODES[kind]))
            try:
                word = encode(fmt, fields)
            except Exception:  # noqa: BLE001 - a field combination the format cannot hold: use raw bits
                word = rng.getrandbits(32).to_bytes(4, "little")
            body.append(word + (rng.getrandbits(32).to_bytes(4, "little") if rng.random() < 0.3 else b""))
        elif rng.random() < 0.1:
            body.append(rng.getrandbits(32).to_bytes(4, "little"))
        else:
            text = rng.choice(_WAVE_TEMPLATES).format(
                a=rng.randrange(2, 8), b=rng.randrange(8), c=rng.randrange(8), s=rng.randrange(4, 12),
                o4=4 * rng.randrange(64), k=rng.choice((0, 1, 64, -1, 0x3F800000)), n=rng.randrange(8),
                br=rng.randint(-4, 4))
            try:
                body.append(assemble(text))
            except Exception:  # noqa: BLE001 - a template our assembler refuses: a fuzz input like any other
                body.append(rng.getrandbits(32).to_bytes(4, "little"))
    return assemble(_WAVE_PROLOGUE) + b"".join(body) + assemble("s_endpgm")


# ------------------------------------------------------------------------------------------ one case
def names_canary(stream, span: tuple[int, int]) -> bool:
    """Whether a stream could address the canary (a dword that is the low half of an address inside it):
    then a changed canary is the stream's doing, not corruption."""
    lo, hi = span[0] & M32, (span[1] - 1) & M32
    return any(lo <= d <= hi for d in stream)


def run_case(t: Target, kind: str, rng, verbose: bool = False) -> tuple[str, str, str | None]:
    """(outcome, example text, why it is unexpected or None)."""
    dev, sim = t.dev, t.sim
    errors_before = len(sim.errors)
    stream = None
    try:
        if kind == "wave":
            co = write_code_object([KernelSpec("fuzz", wave_code(rng), vgpr_count=rng.choice((16, 64, 256)),
                                               sgpr_count=106, args=FILL_ARGS, group_segment_size=4096)])
            prog = dev.program(co, "fuzz")
            prog(t.scratch, 1, global_size=(rng.randint(1, 2),), local_size=(rng.choice((32, 64)),), wait=True,
                 timeout=t.timeout)
        else:
            engine = kind.split("-")[0]
            if kind == "pm4-mutated":
                stream, how = mutate(pm4_valid(t, rng), rng, [pm4.header(op, 1) for op in _PM4_OPS[:8]])
            elif kind == "pm4-random":
                stream = pm4_random(t, rng)
            elif kind == "sdma-mutated":
                stream, how = mutate(sdma_valid(t, rng), rng, [0, 1, 2, 5, 8, 11])
            else:
                stream = sdma_random(t, rng)
            if verbose:
                print(" ".join(f"{d:08x}" for d in stream))
            raw = dev.compute if engine == "pm4" else dev.sdma
            if stream:
                raw.submit(stream)
            fence = dev.compute_queue() if engine == "pm4" else dev.copy_queue()
            fence.signal(dev.timeline, dev.next_timeline())
            fence.submit()
            dev.synchronize(t.timeout)
        outcome, text = "ran", ""
    except hcq.HCQFault as e:
        outcome, text = "fault", str(e)
    except hcq.HCQTimeout as e:
        outcome, text = "hang", str(e)
    except hcq.HCQError as e:
        outcome, text = "refused", str(e)
    except Exception as e:  # noqa: BLE001 - a raw exception is what the fuzzer looks for
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return "crash", f"{type(e).__name__}: {e} at {tb.filename}:{tb.lineno}", "raw exception"
    new_errors = [str(x) for x in sim.errors[errors_before:]]
    why = None
    if new_errors:
        text = new_errors[0]      # what the simulator saw; the outcome says what the driver raised
        outcome += ": " + _reason(new_errors[0])
    elif outcome == "hang":
        waits = _sim_waits(t, "sdma" if kind.startswith("sdma") else "pm4")
        if waits:
            outcome += ": " + waits
        else:
            why = "the queue stopped without the simulator recording why"
    internal = next((e for e in new_errors if _INTERNAL.search(e)), None)
    if internal:
        why = why or "the simulator hit an internal error (a Python exception it turned into a stop)"
        text = internal
    if "a shader wave halted" in text and not any("DISPATCH_DIRECT" in e for e in new_errors):
        why = why or "a halted wave reported with no dispatch stopped in this case"
    if verbose:
        print(outcome, text, *new_errors, sep="\n  ")
    # recovery: what the driver does after a fault or hang, then the correct job must run
    if outcome != "ran":
        dev.recover()
    bad = t.correct_job(rng.getrandbits(32) | 1)
    if bad is not None:
        dev.recover()
        bad = t.correct_job(rng.getrandbits(32) | 1)
        if bad is None:
            outcome += " (needed recover)"
    if bad is not None:
        wrote_regs = stream is not None and _writes_registers(stream)
        t.open()
        t.reopens += 1
        if not wrote_regs:
            why = why or f"the correct job failed after recover(): {bad}"
        outcome += " (reopened)"
        return outcome, text, why
    got = dev.copyout(t.canary)
    if got != t.canary_data and not (stream is not None and names_canary(stream, t.canary_span())):
        why = why or "the canary buffer changed"
        dev.copyin(t.canary, t.canary_data)
    return outcome, text, why


_INTERNAL = re.compile(r"\b(IndexError|KeyError|TypeError|AttributeError|ValueError|ZeroDivisionError|OverflowError|"
                       r"AssertionError|RecursionError|NameError|UnboundLocalError|struct\.error)\b")
_KERNEL_STOPS = (("illegal instruction", "illegal instruction"), ("undecodable", "undecodable (a format not modelled)"),
                 ("memory fault", "memory fault"), ("beyond the kernel's", "VGPR past its allocation"),
                 ("unsupported", "instruction not modelled"), ("still running after", "ran too long"))


def _reason(error: str) -> str:
    """A short class of a simulator error, for the table's outcome column: what follows "hung at ...: ",
    numbers, addresses and dumped dwords dropped; a stopped kernel by why it stopped."""
    what = re.sub(r"^\[step \d+\] \w+: ", "", error)
    m = re.search(r"hung at rptr \S+?(?: \(wptr \S+\))?: (.*)", what)
    what = (m.group(1) if m else what).split("; ")[0]
    if what.startswith("DISPATCH_DIRECT"):
        return "kernel: " + next((label for k, label in _KERNEL_STOPS if k in what), "stopped")
    what = re.sub(r"\([^)]*\)|0x[0-9a-fA-F]+|(?<!type-)\b\d+\b|\b[0-9a-f]{8}\b|\.\.\.", " ", what)
    return " ".join(what.replace(":", " ").split()[:6])


def _sim_waits(t: Target, engine: str) -> str:
    """What the simulated engine waits for when the driver saw no progress and the simulator recorded no
    error: a WAIT_REG_MEM / POLL_REGMEM that is not met, the rest of a packet the ring does not hold yet,
    or a kernel still running; "" when it is none of these (then the stop is a finding)."""
    if engine == "sdma":
        sdma = t.sim.blocks["SDMA"]
        q = sdma.queues[0]
        if q.poll is not None:
            return "waits (POLL_REGMEM not met)"
        if q.xfer is not None:
            return "waits (a copy or fill still moving)"
        if sdma._ptr(0, "RPTR") != sdma._ptr(0, "WPTR"):
            return "waits (a packet longer than the ring holds)"
        return ""
    cp = t.sim.blocks["CP"]
    for q in cp.queues.values():
        if q.active and not q.hung:
            if q.dispatch is not None:
                return "waits (a kernel still running)"
            if q.waiting:
                return "waits (WAIT_REG_MEM not met)"
            if q.rptr != q.wptr & (cp._ring_dwords(q) - 1) or q.ibs:
                return "waits (a packet longer than the ring holds)"
    return ""


def _writes_registers(stream) -> bool:
    """Whether a PM4 stream has a packet that can write a register (WRITE_DATA/COPY_DATA to a register,
    SET_CONFIG/UCONFIG_REG, WAIT_REG_MEM's write-then-wait): the privileged kernel queue may write any
    register, which can leave the GPU needing more than recover(), as on hardware."""
    ops = {P.PACKET3_WRITE_DATA, P.PACKET3_COPY_DATA, P.PACKET3_WAIT_REG_MEM, P.PACKET3_SET_CONFIG_REG,
           P.PACKET3_SET_UCONFIG_REG}
    return any(d >> 30 == 3 and (d >> 8 & 0xFF) in ops for d in stream)


# ------------------------------------------------------------------------------------------ the run
def run(seed: int, budget: int, kinds=KINDS, device: str = "am:sim", timeout: float = 1.0,
        replay: int | None = None, kernel_max_steps: int = 50_000, target: Target | None = None,
        progress: bool = False) -> Tally:
    """target: a Target to reuse (tests); by default one is opened for the run and closed after it."""
    if sim_chip(device) is None:
        raise SystemExit(f"{device}: the packet fuzzer runs on simulated GPUs only (am:sim[:CHIP]): a real "
                         "GPU would need a reset after most cases")
    t = target or Target(device, timeout)
    tally = Tally(f"packet fuzzer (seed {seed}, {', '.join(kinds)})")
    cases = [replay] if replay is not None else range(budget)
    stop = signal.signal(signal.SIGTERM, _interrupt) if threading.current_thread() is threading.main_thread() else None
    t0 = time.monotonic()
    try:
        for i in cases:
            if progress and i and i % 50 == 0:
                print(f"... {i} cases, {len(tally.findings)} unexpected, {time.monotonic() - t0:.0f} s",
                      file=sys.stderr, flush=True)
            # a kernel that never ends stops the queue after this many executor steps (a simulator knob:
            # the hang is the same, the driver's timeout sees it either way)
            t.sim.blocks["CP"].kernel_max_steps = kernel_max_steps
            rng = case_rng(seed, i, "packets")
            kind = rng.choice(list(kinds))
            outcome, text, why = run_case(t, kind, rng, verbose=replay is not None)
            finding = Finding(seed, i, kind, outcome, f"{why}: {text}") if why else None
            tally.add(kind, outcome, text, finding)
    except KeyboardInterrupt:      # Ctrl-C or SIGTERM: the table of the cases run so far
        tally.title += f" (stopped after {tally.cases} cases)"
    finally:
        if stop is not None:
            signal.signal(signal.SIGTERM, stop)
        if target is None:
            t.dev.close()
    tally.reopens = t.reopens
    return tally


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.fuzz.packets", description=__doc__.splitlines()[0])
    add_common_args(ap, budget=300)
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    ap.add_argument("--timeout", type=float, default=1.0, help="seconds the driver waits for a case's work")
    ap.add_argument("--replay", metavar="SEED:CASE", help="run one case again and print its stream and outcome")
    args = ap.parse_args(argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        ap.error(f"unknown kinds {bad}; choose from {', '.join(KINDS)}")
    seed, replay = args.seed, None
    if args.replay:
        seed, replay = (int(x) for x in args.replay.split(":"))
    t0 = time.monotonic()
    try:
        tally = run(seed, args.budget, kinds, args.device, args.timeout, replay, progress=True)
    except FirmwareError as e:
        return firmware_missing(ap.prog, e)
    print(tally.table())
    print(f"{tally.cases} cases in {time.monotonic() - t0:.1f} s; the GPU was reopened {tally.reopens} time(s)")
    if args.json:
        tally.write_json(args.json)
    return 1 if tally.findings else 0


if __name__ == "__main__":
    sys.exit(main())
