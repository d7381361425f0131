"""The simulated Hopper GPU behind the RM model: memory, GPU virtual address spaces, GPFIFO channels
and the host's methods, the copy engine, and compute launches recorded from their QMDs.

What the hardware does, from the public class headers (nvdrv.classes names each source):
- A channel's work is its GPFIFO ring of 8-byte entries (address of a pushbuffer segment and its length
  in dwords) between GPGet and the GPPut the driver writes in USERD; the host fetches entries when the
  channel's work submit token is written to the usermode doorbell (NVC361_NOTIFY_CHANNEL_PENDING) and
  the channel's TSG is scheduled. Pushbuffer segments are method headers (clb06f.h NVB06F_DMA_*) and data.
- Host methods (below 0x100) run on any subchannel: semaphores (SEM_ADDR/PAYLOAD/EXECUTE: acquire waits
  until the 32/64-bit value at the address is >= the payload (ACQ_CIRC_GEQ), release writes the payload
  and, with RELEASE_TIMESTAMP, the GPU time in nanoseconds 8 bytes after it), WFI, MEM_OP (barriers,
  flushes, TLB invalidation: nothing to model here, caches are not modelled).
- Engine methods go to the class bound to the subchannel by SET_OBJECT: HOPPER_DMA_COPY_A copies
  LINE_LENGTH_IN bytes from OFFSET_IN to OFFSET_OUT on LAUNCH_DMA (pitch, virtual addresses) and can
  release a semaphore; HOPPER_COMPUTE_A launches the QMD at SEND_PCAS_A << 8 on SEND_SIGNALING_PCAS2_B.
- Faults: a GPU address no mapping covers (an MMU fault, Xid 31 ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT),
  a method the bound class does not have or a QMD the compute class rejects (Xid 13
  ROBUST_CHANNEL_GR_EXCEPTION), a malformed GPFIFO entry or method header (Xid 32 ROBUST_CHANNEL_PBDMA_ERROR)
  stop the channel: RM writes the channel's error notifier (NvNotification, nvgputypes.h: info32 the Xid)
  and nothing more runs on it (nverror.h for the numbers).

Kernels cannot run here: the model has no SASS executor. A launch is decoded and validated and recorded
in `launches`; its QMD release (if enabled) is written as the hardware would after the grid; the
memory a kernel would write is left as it was.
"""
from __future__ import annotations

import bisect
import struct
import time
from dataclasses import dataclass, field

from nvdrv import classes as C

XID_GR_EXCEPTION = 13          # nverror.h ROBUST_CHANNEL_GR_EXCEPTION
XID_MMU_FAULT = 31             # ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT
XID_PBDMA_ERROR = 32           # ROBUST_CHANNEL_PBDMA_ERROR
H100_SHARED_MEMORY_PER_CTA = 227 * 1024   # CUDA C Programming Guide, compute capability 9.0: 227 KB max
H100_VRAM = 80 << 30
PAGE = 4096


class ChannelError(Exception):
    """A fault that stops a channel: `xid` as RM reports it, the reason in words."""

    def __init__(self, xid: int, what: str):
        self.xid, self.what = xid, what
        super().__init__(f"Xid {xid}: {what}")


class Memory:
    """A physical allocation: VRAM (NV01_MEMORY_LOCAL_USER, backed by anonymous memory) or process
    pages RM was handed (NV01_MEMORY_SYSTEM_OS_DESCRIPTOR, read and written in place)."""

    def __init__(self, size: int, view: memoryview, kind: str, keep=None):
        self.size, self.view, self.kind, self._keep = size, view, kind, keep
        self.freed = False


@dataclass
class VASpace:
    """A FERMI_VASPACE_A: sorted, non-overlapping (va, size, memory, offset) mappings."""
    starts: list = field(default_factory=list)
    maps: list = field(default_factory=list)

    def map(self, va: int, size: int, mem: Memory, offset: int) -> None:
        i = bisect.bisect_right(self.starts, va)
        if (i and self.maps[i - 1][0] + self.maps[i - 1][1] > va) or (i < len(self.starts) and self.starts[i] < va + size):
            raise ValueError(f"GPU VA {va:#x}+{size:#x} overlaps a mapping")
        self.starts.insert(i, va)
        self.maps.insert(i, (va, size, mem, offset))

    def unmap(self, va: int) -> tuple | None:
        i = bisect.bisect_left(self.starts, va)
        if i < len(self.starts) and self.starts[i] == va:
            self.starts.pop(i)
            return self.maps.pop(i)
        return None

    def find(self, va: int, n: int, write: bool = False) -> tuple[Memory, int]:
        i = bisect.bisect_right(self.starts, va) - 1
        if i >= 0:
            base, size, mem, off = self.maps[i]
            if va + n <= base + size and not mem.freed:
                return mem, off + va - base
        raise ChannelError(XID_MMU_FAULT, f"MMU fault: {'write' if write else 'read'} of {n} bytes at GPU VA "
                                          f"{va:#x}, which no mapping covers")

    def read(self, va: int, n: int) -> bytes:
        mem, off = self.find(va, n)
        return bytes(mem.view[off:off + n])

    def write(self, va: int, data: bytes) -> None:
        mem, off = self.find(va, len(data), write=True)
        mem.view[off:off + len(data)] = data


def bits(raw: bytes, lo: int, hi: int) -> int:
    return (int.from_bytes(raw, "little") >> lo) & ((1 << (hi - lo + 1)) - 1)


def decode_qmd(raw: bytes) -> dict:
    """The QMD V03_00 fields nvdrv.classes lists, by name."""
    v = int.from_bytes(raw, "little")
    return {name: (v >> lo) & ((1 << (hi - lo + 1)) - 1) for name, (lo, hi) in C.QMD_FIELDS.items()}


@dataclass
class Launch:
    """A compute launch as the model decoded it (it cannot run the kernel)."""
    channel: int
    qmd_va: int
    program_va: int
    grid: tuple
    block: tuple
    shared_bytes: int
    registers: int
    cb0_va: int
    cb0_bytes: int
    cb0: bytes


class Channel:
    """A HOPPER_CHANNEL_GPFIFO_A: its ring, USERD and the host's position in them."""

    def __init__(self, cid: int, vas: VASpace, ring_va: int, entries: int, userd: Memory, userd_off: int,
                 notifier: Memory | None, tsg):
        self.cid, self.vas, self.ring_va, self.entries = cid, vas, ring_va, entries
        self.userd, self.userd_off, self.notifier, self.tsg = userd, userd_off, notifier, tsg
        self.subchannels: dict[int, int] = {}       # subchannel -> class bound by SET_OBJECT
        self.engines: set[int] = set()              # engine classes allocated on the channel
        self.sem = [0, 0, 0, 0]                     # host SEM_ADDR_LO/HI, PAYLOAD_LO/HI
        self.ce = {}                                # copy engine method state
        self.compute = {}                           # compute method state
        self.pending: tuple | None = None           # (segment address, dwords, header, data word) in progress
        self.error: ChannelError | None = None
        self.freed = False
        self.kicked_put = 0                         # GPPut as the last doorbell found it

    def userd_word(self, off: int) -> int:
        return struct.unpack_from("<I", self.userd.view, self.userd_off + off)[0]

    def set_userd_word(self, off: int, v: int) -> None:
        struct.pack_into("<I", self.userd.view, self.userd_off + off, v)


class HopperGPU:
    """One simulated H100 (GH100): channels, their engines and the GPU clock (nanoseconds, as the
    hardware's PTIMER counts: the semaphore timestamp unit)."""

    name = "NVIDIA H100 80GB HBM3 (simulated)"
    uuid = bytes.fromhex("0badc0de0000400080001100beefcafe")

    def __init__(self):
        self.channels: dict[int, Channel] = {}
        self.launches: list[Launch] = []
        self.copies = 0
        self.vram_used = 0
        self._t0 = time.perf_counter_ns()

    def now_ns(self) -> int:
        return time.perf_counter_ns() - self._t0 + 1_000_000

    # ------------------------------------------------------------------------------ doorbell and host
    def doorbell(self, token: int) -> None:
        """NOTIFY_CHANNEL_PENDING: the token is the one GET_WORK_SUBMIT_TOKEN handed out (here the channel
        id). The host fetches the channel's entries up to the GPPut it reads now; entries put after the
        last doorbell wait for the next one. A token no channel has is dropped (assumption: hardware
        ignores it; RM may report it)."""
        ch = self.channels.get(token)
        if ch is not None and not ch.freed:
            ch.kicked_put = ch.userd_word(C.USERD_GP_PUT)
        self.run()

    def run(self) -> None:
        """Runs every scheduled channel until each is idle, stopped or waiting on a semaphore; a release
        on one channel can let another's acquire pass, so it repeats while anything progresses."""
        progress = True
        while progress:
            progress = False
            for ch in list(self.channels.values()):
                if ch.freed or ch.error or not ch.tsg.scheduled:
                    continue
                try:
                    progress |= self._run_channel(ch)
                except ChannelError as e:
                    self._fault(ch, e)

    def _fault(self, ch: Channel, e: ChannelError) -> None:
        ch.error = e
        if ch.notifier is not None:
            # NvNotification (nvgputypes.h): timeStamp, info32 (the Xid), info16, status; status 0xFFFF
            # marks the error -- assumption: RM's exact status value is not in the public headers
            mem, off = ch.notifier
            struct.pack_into("<QIHH", mem.view, off, time.time_ns(), e.xid, ch.cid & 0xFFFF, 0xFFFF)

    def _run_channel(self, ch: Channel) -> bool:
        progress = False
        while True:
            if ch.pending is not None:
                done = self._run_segment(ch, *ch.pending)
                if not done:
                    return progress
                ch.pending = None
                get = (ch.userd_word(C.USERD_GP_GET) + 1) % ch.entries
                ch.set_userd_word(C.USERD_GP_GET, get)
                progress = True
            get, put = ch.userd_word(C.USERD_GP_GET), ch.kicked_put
            if put >= ch.entries:
                raise ChannelError(XID_PBDMA_ERROR, f"GPPut {put} is outside the {ch.entries}-entry GPFIFO")
            if get == put:
                return progress
            e0, e1 = struct.unpack("<II", ch.vas.read(ch.ring_va + get * C.GP_ENTRY_BYTES, C.GP_ENTRY_BYTES))
            addr = (e0 & ~3) | ((e1 & 0xFF) << 32)
            n = (e1 >> C.GP_ENTRY1_LENGTH_SHIFT) & ((1 << C.GP_ENTRY1_LENGTH_BITS) - 1)
            if e1 & C.GP_ENTRY1_LEVEL_SUBROUTINE:
                raise ChannelError(XID_PBDMA_ERROR, "GPFIFO entry asks for a subroutine level, which the model "
                                                    "does not run")
            ch.pending = (addr, n, 0, 0)
            progress = True

    def _run_segment(self, ch: Channel, addr: int, n: int, pos: int, skip: int = 0) -> bool:
        """Runs the methods of one pushbuffer segment from dword `pos` (skipping the first `skip` data
        words of the header there); False if a semaphore acquire is not met yet: the position of that
        method is kept and the next try starts at it."""
        words = struct.unpack(f"<{n}I", ch.vas.read(addr, 4 * n)) if n else ()
        i = pos
        while i < n:
            hdr = words[i]
            op, count, subc, method = hdr >> 29, (hdr >> 16) & 0x1FFF, (hdr >> 13) & 7, (hdr & 0xFFF) << 2
            start = i
            if op == C.DMA_SEC_OP_IMMD_DATA_METHOD:
                data, i = (count,), i + 1
            elif op in (C.DMA_SEC_OP_INC_METHOD, C.DMA_SEC_OP_NON_INC_METHOD, C.DMA_SEC_OP_ONE_INC):
                if i + 1 + count > n:
                    raise ChannelError(XID_PBDMA_ERROR, f"method header {hdr:#010x} at dword {i} of the segment at "
                                                        f"{addr:#x} runs {count} data words past its {n} dwords")
                data, i = words[i + 1:i + 1 + count], i + 1 + count
            else:
                raise ChannelError(XID_PBDMA_ERROR, f"method header {hdr:#010x} at dword {i} of the segment at "
                                                    f"{addr:#x} has opcode {op}, which the host does not decode")
            for k in range(skip, len(data)):
                m = (method if op == C.DMA_SEC_OP_NON_INC_METHOD else
                     method + 4 * min(k, 1) if op == C.DMA_SEC_OP_ONE_INC else method + 4 * k)
                if not self._method(ch, subc, m, data[k]):
                    ch.pending = (addr, n, start, k)
                    return False
            skip = 0
        return True

    def _method(self, ch: Channel, subc: int, m: int, v: int) -> bool:
        if m < 0x100:
            return self._host_method(ch, subc, m, v)
        cls = ch.subchannels.get(subc)
        if cls is None:
            raise ChannelError(XID_GR_EXCEPTION, f"method {m:#x} on subchannel {subc}, which no SET_OBJECT bound")
        if cls == C.HOPPER_DMA_COPY_A:
            self._copy_method(ch, m, v)
        elif cls == C.HOPPER_COMPUTE_A:
            self._compute_method(ch, m, v)
        return True

    def _host_method(self, ch: Channel, subc: int, m: int, v: int) -> bool:
        if m == C.NVC86F_SET_OBJECT:
            cls = v & 0xFFFF
            if cls not in ch.engines:
                raise ChannelError(XID_GR_EXCEPTION, f"SET_OBJECT {C.class_name(cls)} on subchannel {subc}: the "
                                                     "channel has no such engine object (allocate it with RM first)")
            ch.subchannels[subc] = cls
        elif C.NVC86F_SEM_ADDR_LO <= m <= C.NVC86F_SEM_PAYLOAD_HI:
            ch.sem[(m - C.NVC86F_SEM_ADDR_LO) >> 2] = v
        elif m == C.NVC86F_SEM_EXECUTE:
            return self._sem_execute(ch, v)
        elif m in (C.NVC86F_WFI, C.NVC86F_MEM_OP_A, C.NVC86F_MEM_OP_B, C.NVC86F_MEM_OP_C, C.NVC86F_MEM_OP_D):
            pass        # the model runs methods in order and has no caches or TLBs: nothing to wait for
        else:
            raise ChannelError(XID_PBDMA_ERROR, f"host method {m:#x} is not one the model knows")
        return True

    def _sem_execute(self, ch: Channel, v: int) -> bool:
        lo, hi, plo, phi = ch.sem
        if lo & 3:
            raise ChannelError(XID_PBDMA_ERROR, f"semaphore address low word {lo:#x} is not 4-byte aligned (SEM_ADDR_LO "
                                                "OFFSET is 31:2)")
        va = ((hi & 0x1FFFFFF) << 32) | lo
        wide = bool(v & C.SEM_EXECUTE_PAYLOAD_SIZE_64BIT)
        payload = (phi << 32 | plo) if wide else plo
        op = v & C.SEM_EXECUTE_OPERATION_MASK
        if op == C.SEM_EXECUTE_OPERATION_RELEASE:
            if v & C.SEM_EXECUTE_RELEASE_TIMESTAMP_EN:
                if va & 0xF:
                    raise ChannelError(XID_PBDMA_ERROR, f"semaphore release with timestamp at {va:#x}: the 16-byte "
                                                        "structure must be 16-byte aligned (assumption)")
                ch.vas.write(va + 8, struct.pack("<Q", self.now_ns()))
            ch.vas.write(va, struct.pack("<Q" if wide else "<I", payload))
            return True
        if op in (C.SEM_EXECUTE_OPERATION_ACQ_CIRC_GEQ, C.SEM_EXECUTE_OPERATION_ACQUIRE):
            cur = struct.unpack("<Q" if wide else "<I", ch.vas.read(va, 8 if wide else 4))[0]
            if op == C.SEM_EXECUTE_OPERATION_ACQUIRE:
                return cur == payload
            if wide:
                return cur >= payload
            return ((cur - payload) & 0xFFFFFFFF) < 0x80000000     # circular >= on 32 bits
        raise ChannelError(XID_PBDMA_ERROR, f"SEM_EXECUTE operation {op} is not one the model knows")

    # ------------------------------------------------------------------------------------ copy engine
    def _copy_method(self, ch: Channel, m: int, v: int) -> None:
        if m == C.NVC8B5_LAUNCH_DMA:
            self._launch_dma(ch, v)
        elif m in (C.NVC8B5_OFFSET_IN_UPPER, C.NVC8B5_OFFSET_IN_LOWER, C.NVC8B5_OFFSET_OUT_UPPER,
                   C.NVC8B5_OFFSET_OUT_LOWER, C.NVC8B5_LINE_LENGTH_IN, C.NVC8B5_SET_SEMAPHORE_A,
                   C.NVC8B5_SET_SEMAPHORE_B, C.NVC8B5_SET_SEMAPHORE_PAYLOAD, C.NVC8B5_SET_SEMAPHORE_PAYLOAD_UPPER):
            ch.ce[m] = v
        else:
            raise ChannelError(XID_GR_EXCEPTION, f"HOPPER_DMA_COPY_A method {m:#x} is not one the model knows")

    def _launch_dma(self, ch: Channel, v: int) -> None:
        ce = ch.ce
        transfer = v & C.LAUNCH_DMA_DATA_TRANSFER_TYPE_MASK
        if transfer:
            if v & C.LAUNCH_DMA_MULTI_LINE_ENABLE:
                raise ChannelError(XID_GR_EXCEPTION, "LAUNCH_DMA with MULTI_LINE_ENABLE: the model copies single "
                                                     "lines only")
            if not (v & C.LAUNCH_DMA_SRC_MEMORY_LAYOUT_PITCH and v & C.LAUNCH_DMA_DST_MEMORY_LAYOUT_PITCH):
                raise ChannelError(XID_GR_EXCEPTION, "LAUNCH_DMA with a block-linear layout (SRC/DST_MEMORY_LAYOUT "
                                                     "0): a linear copy needs PITCH on both sides")
            if v & (C.LAUNCH_DMA_SRC_TYPE_PHYSICAL | C.LAUNCH_DMA_DST_TYPE_PHYSICAL):
                raise ChannelError(XID_GR_EXCEPTION, "LAUNCH_DMA with a physical address: userspace channels copy "
                                                     "between virtual addresses")
            src = (ce.get(C.NVC8B5_OFFSET_IN_UPPER, 0) & 0x1FFFFFF) << 32 | ce.get(C.NVC8B5_OFFSET_IN_LOWER, 0)
            dst = (ce.get(C.NVC8B5_OFFSET_OUT_UPPER, 0) & 0x1FFFFFF) << 32 | ce.get(C.NVC8B5_OFFSET_OUT_LOWER, 0)
            n = ce.get(C.NVC8B5_LINE_LENGTH_IN, 0)
            if n:
                ch.vas.write(dst, ch.vas.read(src, n))
            self.copies += 1
        sem_type = (v >> C.LAUNCH_DMA_SEMAPHORE_TYPE_SHIFT) & 3
        if sem_type:
            va = (ce.get(C.NVC8B5_SET_SEMAPHORE_A, 0) & 0x1FFFFFF) << 32 | ce.get(C.NVC8B5_SET_SEMAPHORE_B, 0)
            payload = ce.get(C.NVC8B5_SET_SEMAPHORE_PAYLOAD, 0)
            wide = bool(v & C.LAUNCH_DMA_SEMAPHORE_PAYLOAD_SIZE_64BIT)
            if wide:
                payload |= ce.get(C.NVC8B5_SET_SEMAPHORE_PAYLOAD_UPPER, 0) << 32
            if sem_type == C.LAUNCH_DMA_SEMAPHORE_TYPE_FOUR_WORD:
                ch.vas.write(va + 8, struct.pack("<Q", self.now_ns()))
            ch.vas.write(va, struct.pack("<Q" if wide else "<I", payload))

    # ---------------------------------------------------------------------------------------- compute
    def _compute_method(self, ch: Channel, m: int, v: int) -> None:
        if m == C.NVCBC0_SEND_SIGNALING_PCAS2_B:
            if v & 0xF != C.PCAS_ACTION_INVALIDATE_COPY_SCHEDULE:
                raise ChannelError(XID_GR_EXCEPTION, f"SEND_SIGNALING_PCAS2_B action {v & 0xF}: the model schedules "
                                                     "QMDs with INVALIDATE_COPY_SCHEDULE (3) only")
            if C.NVCBC0_SEND_PCAS_A not in ch.compute:
                raise ChannelError(XID_GR_EXCEPTION, "SEND_SIGNALING_PCAS2_B before SEND_PCAS_A gave a QMD address")
            self._launch(ch, ch.compute[C.NVCBC0_SEND_PCAS_A] << 8)
        elif m in (C.NVCBC0_SEND_PCAS_A, C.NVCBC0_SET_SHADER_SHARED_MEMORY_WINDOW_A,
                   C.NVCBC0_SET_SHADER_SHARED_MEMORY_WINDOW_B, C.NVCBC0_SET_SHADER_LOCAL_MEMORY_WINDOW_A,
                   C.NVCBC0_SET_SHADER_LOCAL_MEMORY_WINDOW_B, C.NVCBC0_INVALIDATE_SHADER_CACHES):
            ch.compute[m] = v
        else:
            raise ChannelError(XID_GR_EXCEPTION, f"HOPPER_COMPUTE_A method {m:#x} is not one the model knows")

    def _launch(self, ch: Channel, qmd_va: int) -> None:
        raw = ch.vas.read(qmd_va, C.QMD_BYTES)
        q = decode_qmd(raw)
        bad = lambda why: ChannelError(XID_GR_EXCEPTION, f"QMD at {qmd_va:#x}: {why}")  # noqa: E731
        if (q["QMD_MAJOR_VERSION"], q["QMD_VERSION"]) != (C.QMD_MAJOR_VERSION_V03, C.QMD_VERSION_V03_00):
            raise bad(f"version {q['QMD_MAJOR_VERSION']}.{q['QMD_VERSION']}, HOPPER_COMPUTE_A takes QMD V03_00")
        if C.NVCBC0_SET_SHADER_SHARED_MEMORY_WINDOW_B not in ch.compute or \
                C.NVCBC0_SET_SHADER_LOCAL_MEMORY_WINDOW_B not in ch.compute:
            raise bad("launched before SET_SHADER_SHARED_MEMORY_WINDOW and SET_SHADER_LOCAL_MEMORY_WINDOW placed the "
                      "shared and local windows")
        grid = (q["CTA_RASTER_WIDTH"], q["CTA_RASTER_HEIGHT"], q["CTA_RASTER_DEPTH"])
        block = (q["CTA_THREAD_DIMENSION0"], q["CTA_THREAD_DIMENSION1"], q["CTA_THREAD_DIMENSION2"])
        if min(grid) < 1 or min(block) < 1:
            raise bad(f"grid {grid} and block {block} need every dimension >= 1")
        if block[0] * block[1] * block[2] > C.QMD_MAX_THREADS_PER_CTA:
            raise bad(f"block {block} has {block[0] * block[1] * block[2]} threads; sm_90 allows "
                      f"{C.QMD_MAX_THREADS_PER_CTA}")
        if q["SHARED_MEMORY_SIZE"] > H100_SHARED_MEMORY_PER_CTA:
            raise bad(f"SHARED_MEMORY_SIZE {q['SHARED_MEMORY_SIZE']} is more than the {H100_SHARED_MEMORY_PER_CTA} "
                      "bytes a CTA can have")
        prog = q["PROGRAM_ADDRESS_UPPER"] << 32 | q["PROGRAM_ADDRESS_LOWER"]
        ch.vas.find(prog, 16)           # the first instruction must be mapped (an MMU fault otherwise)
        if not q["CONSTANT_BUFFER_VALID0"]:
            raise bad("constant bank 0 (the kernel's parameters) is not valid")
        cb0 = q["CONSTANT_BUFFER_ADDR_UPPER0"] << 32 | q["CONSTANT_BUFFER_ADDR_LOWER0"]
        cb0_bytes = q["CONSTANT_BUFFER_SIZE_SHIFTED4_0"] << 4
        data = ch.vas.read(cb0, cb0_bytes)
        self.launches.append(Launch(ch.cid, qmd_va, prog, grid, block, q["SHARED_MEMORY_SIZE"], q["REGISTER_COUNT_V"],
                                    cb0, cb0_bytes, data))
        if q["RELEASE0_ENABLE"]:
            va = q["RELEASE0_ADDRESS_UPPER"] << 32 | q["RELEASE0_ADDRESS_LOWER"]
            payload = q["RELEASE0_PAYLOAD_UPPER"] << 32 | q["RELEASE0_PAYLOAD_LOWER"]
            if q["RELEASE0_STRUCTURE_SIZE"] == C.QMD_RELEASE_STRUCTURE_SIZE_FOUR_WORDS:
                ch.vas.write(va + 8, struct.pack("<Q", self.now_ns()))
            ch.vas.write(va, struct.pack("<Q" if q["RELEASE0_PAYLOAD64B"] else "<I",
                                         payload if q["RELEASE0_PAYLOAD64B"] else payload & 0xFFFFFFFF))
