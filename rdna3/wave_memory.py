"""Memory as the wave executor sees it.

The executor never touches bytes directly: every vector or scalar memory instruction becomes one
call, for all active lanes of all waves at once, on an object with this interface (the GPU model
implements it over its page tables; `FlatMemory` is a plain one for tests):

    load(addrs, size) -> uint32[N, max(1, size // 4)]       sub-dword sizes come back zero-extended
    store(addrs, data, size)                                data: uint32[N, max(1, size // 4)]
    atomic(op, addrs, data, dtype, cmp=None) -> uint32[N, k] the old values, k = dwords of dtype

`addrs` is uint64[N] of 64-bit virtual addresses, in lane order (wave-major); when several lanes
store to one address the highest lane wins, and atomics on one address apply in lane order. An
access outside mapped memory raises `MemoryFault`.
"""
from __future__ import annotations

import numpy as np

from rdna3.wave_ops import ATOMICS, flush_denormals

U8, U32, U64 = np.uint8, np.uint32, np.uint64


class MemoryFault(Exception):
    def __init__(self, space: str, addr: int, size: int, write: bool, why: str = "not mapped"):
        self.space, self.addr, self.size, self.write = space, addr, size, write
        super().__init__(f"{'write' if write else 'read'} of {size} bytes at {space} address "
                         f"{addr:#x}: {why}")


# atomics whose effect on one address over several lanes is an accumulate (None: swap, where each
# lane's old value is the previous lane's data)
SEGMENT_UFUNCS = {"add": np.add, "sub": np.subtract, "and": np.bitwise_and, "or": np.bitwise_or,
                  "xor": np.bitwise_xor, "min": np.minimum, "max": np.maximum, "add_f32": np.add,
                  "add_f32_ftz": np.add, "swap": None}


def _ftz_running_sums(seq: np.ndarray) -> np.ndarray:
    """add_f32_ftz over one address: seq[0] the old value, then each lane's data; returns [old, r1, ..., rn]
    where r_i = flush(r_(i-1)) + flush(d_i) (the cache's float add flushes denormal inputs, wave_ops.ATOMICS).
    One accumulate of the flushed inputs gives the same sums unless a partial sum is itself denormal (it would
    be flushed before the next add): then step by step."""
    acc = np.add.accumulate(flush_denormals(seq), dtype=seq.dtype)
    inner = acc[1:-1]
    if np.any((inner != 0) & (np.abs(inner) < np.finfo(seq.dtype).tiny)):
        acc = seq.copy()
        for i in range(1, len(seq)):
            acc[i] = flush_denormals(acc[i - 1:i])[0] + flush_denormals(seq[i:i + 1])[0]
    acc[0] = seq[0]
    return acc


class ByteSpace:
    """A bounded, byte-addressed array with vectorized access (one memory region, or LDS)."""

    def __init__(self, nbytes: int, name: str = "memory"):
        self.name = name
        self.u8 = np.zeros((nbytes + 3) // 4 * 4, U8)
        self.u32 = self.u8.view(U32)
        self.size = nbytes

    def check(self, off: np.ndarray, size: int, write: bool, base: int = 0):
        if off.size and (off.min() < 0 or off.max() + size > self.size):
            bad = off[(off < 0) | (off + size > self.size)][0]
            raise MemoryFault(self.name, int(bad) + base, size, write, f"outside [{base:#x}, {base + self.size:#x})")

    def load(self, off: np.ndarray, size: int) -> np.ndarray:
        k = max(1, size // 4)
        if size >= 4 and not np.any(off & 3):
            idx = off >> 2
            return self.u32[idx[:, None] + np.arange(k)] if k > 1 else self.u32[idx][:, None]
        b = self.u8[off[:, None] + np.arange(size)]
        if size < 4:
            b = np.concatenate([b, np.zeros((len(off), 4 - size), U8)], axis=1)
        return np.ascontiguousarray(b).view(U32).reshape(len(off), k)

    def store(self, off: np.ndarray, data: np.ndarray, size: int):
        k = max(1, size // 4)
        data = np.ascontiguousarray(data, U32).reshape(len(off), k)
        if size >= 4 and not np.any(off & 3):
            idx = off >> 2
            if k == 1:
                self.u32[idx] = data[:, 0]
            else:
                self.u32[idx[:, None] + np.arange(k)] = data
            return
        self.u8[off[:, None] + np.arange(size)] = data.view(U8)[:, :size]

    def atomic(self, op: str, off: np.ndarray, data: np.ndarray, dtype, cmp=None) -> np.ndarray:
        """Apply an atomic per lane, in lane order where lanes share an address; returns the old
        values. Lanes are processed in rounds: round r takes every address's r-th lane, so each
        round touches distinct addresses and is one vectorized step."""
        k = np.dtype(dtype).itemsize // 4
        out = np.empty((len(off), k), U32)
        if len(off) == 0:
            return out
        order = np.argsort(off, kind="stable")
        so = off[order]
        first = np.r_[True, so[1:] != so[:-1]]
        start = np.maximum.accumulate(np.where(first, np.arange(len(so)), 0))
        rank = np.empty(len(off), np.int64)
        rank[order] = np.arange(len(so)) - start
        cast = lambda a: np.ascontiguousarray(a).view(dtype).reshape(-1)
        bounds = np.r_[np.nonzero(first)[0], len(so)]
        rounds = int(rank.max()) + 1
        if op in SEGMENT_UFUNCS and rounds > len(bounds) - 1:
            # Few addresses hit by many lanes (a histogram): one accumulate per address instead.
            f = SEGMENT_UFUNCS[op]
            sdata = cast(data)[order]
            olds = np.empty(len(so), dtype)
            for a, b in zip(bounds[:-1], bounds[1:]):
                o = cast(self.load(so[a:a + 1], 4 * k))
                seq = np.concatenate([o, sdata[a:b]])
                if op == "add_f32_ftz":
                    seq = _ftz_running_sums(seq)
                else:
                    seq = seq if f is None else f.accumulate(seq, dtype=seq.dtype)   # no upcast: wrap
                olds[a:b] = seq[:-1]
                self.store(so[a:a + 1], np.ascontiguousarray(seq[-1:]).view(U32).reshape(1, k), 4 * k)
            out[order] = olds.view(U32).reshape(-1, k)
            return out
        for r in range(rounds):
            sel = np.nonzero(rank == r)[0] if r or rank.any() else slice(None)
            o = self.load(off[sel], 4 * k)
            out[sel] = o
            new = self._apply(op, cast(o), cast(data[sel]), None if cmp is None else cast(cmp[sel]))
            self.store(off[sel], np.ascontiguousarray(new).view(U32).reshape(-1, k), 4 * k)
        return out

    @staticmethod
    def _apply(op, old, data, cmp):
        if op == "cmpswap":
            return np.where(old == cmp, data, old)
        return np.asarray(ATOMICS[op](old, data), old.dtype)


class ScratchSpace:
    """Private memory in a scratch buffer of the GPU's memory, as gfx11 addresses it: the ByteSpace
    interface (load/store/atomic at flat offsets item * item_bytes + offset, item = wave * 32 + lane of the
    executor's batch) over `memory` (rdna3.wave_memory's interface: the dispatch's VM). Each wave has a slot of
    `wave_bytes` (COMPUTE_TMPRING_SIZE.WAVESIZE x 256) in the buffer at `base` (COMPUTE_DISPATCH_SCRATCH_BASE),
    slot = wave id % `slots` (WAVES): assumption, waves take slots in launch order and the executor never
    runs more waves at once than there are slots. Within a slot the lanes' dwords interleave: dword k of lane
    L at k * 128 + L * 4 (AMDGPUUsage, private segment: "the interleaving results in adjacent dwords being
    accessed" when the lanes use one private address; the exact swizzle is an assumption, invisible to a
    program that reaches its private memory through scratch and flat instructions only)."""

    def __init__(self, memory, base: int, wave_bytes: int, slots: int, item_bytes: int, first_wave: int):
        self.memory, self.base, self.wave_bytes, self.slots = memory, base, wave_bytes, slots
        self.item_bytes, self.first_wave = max(1, item_bytes), first_wave
        self.name = "private"

    def _addrs(self, off: np.ndarray) -> np.ndarray:
        off = np.asarray(off, np.int64)
        item, o = off // self.item_bytes, off % self.item_bytes
        wave, lane = item // 32 + self.first_wave, item % 32
        slot = wave % self.slots
        return (U64(self.base) + (slot * self.wave_bytes + (o >> 2) * 128 + lane * 4 + (o & 3)).astype(U64))

    def load(self, off: np.ndarray, size: int) -> np.ndarray:
        k = max(1, size // 4)
        n = len(off)
        if size >= 4 and not np.any(np.asarray(off) & 3):
            a = self._addrs((np.asarray(off)[:, None] + 4 * np.arange(k)).reshape(-1))
            return self.memory.load(a, 4).reshape(n, k)
        b = self.memory.load(self._addrs((np.asarray(off)[:, None] + np.arange(size)).reshape(-1)), 1)
        b = (b[:, 0] & U32(0xFF)).astype(U8).reshape(n, size)
        if size < 4:
            b = np.concatenate([b, np.zeros((n, 4 - size), U8)], axis=1)
        return np.ascontiguousarray(b).view(U32).reshape(n, k)

    def store(self, off: np.ndarray, data: np.ndarray, size: int):
        k = max(1, size // 4)
        n = len(off)
        data = np.ascontiguousarray(data, U32).reshape(n, k)
        if size >= 4 and not np.any(np.asarray(off) & 3):
            a = self._addrs((np.asarray(off)[:, None] + 4 * np.arange(k)).reshape(-1))
            self.memory.store(a, data.reshape(-1, 1), 4)
            return
        a = self._addrs((np.asarray(off)[:, None] + np.arange(size)).reshape(-1))
        self.memory.store(a, data.view(U8)[:, :size].reshape(-1, 1).astype(U32), 1)

    def atomic(self, op: str, off: np.ndarray, data: np.ndarray, dtype, cmp=None) -> np.ndarray:
        if np.dtype(dtype).itemsize != 4:
            bad = int(np.asarray(off)[0]) if len(off) else 0
            raise MemoryFault("private", bad, np.dtype(dtype).itemsize, True,
                              "a 64-bit atomic on private memory, whose dwords interleave by lane: not modelled")
        return self.memory.atomic(op, self._addrs(off), data, dtype, cmp)


class FlatMemory:
    """A sparse 64-bit address space of separately allocated regions; everything else faults."""

    def __init__(self, base: int = 0x1_0000_0000):
        self.next = base
        self.regions: list[tuple[int, ByteSpace]] = []
        self._bases = np.zeros(0, U64)

    def alloc(self, nbytes: int, align: int = 256) -> int:
        addr = (self.next + align - 1) // align * align
        self.regions.append((addr, ByteSpace(max(nbytes, 1), "global")))
        self._bases = np.array([b for b, _ in self.regions], U64)
        # A guard gap after each region so that running off its end faults instead of aliasing.
        self.next = addr + max(nbytes, 1) + 4096
        return addr

    def upload(self, data, align: int = 256) -> int:
        raw = np.ascontiguousarray(data).view(U8).reshape(-1) if isinstance(data, np.ndarray) \
            else np.frombuffer(bytes(data), U8)
        addr = self.alloc(len(raw), align)
        self.write(addr, raw)
        return addr

    def _region(self, addr: int, size: int, write: bool):
        i = int(np.searchsorted(self._bases, U64(addr), "right")) - 1
        if i < 0 or addr + size > self.regions[i][0] + self.regions[i][1].size:
            raise MemoryFault("global", addr, size, write)
        return self.regions[i]

    def write(self, addr: int, data):
        raw = np.ascontiguousarray(data).view(U8).reshape(-1) if isinstance(data, np.ndarray) \
            else np.frombuffer(bytes(data), U8)
        base, space = self._region(addr, len(raw), True)
        space.u8[addr - base: addr - base + len(raw)] = raw

    def read(self, addr: int, nbytes: int) -> bytes:
        base, space = self._region(addr, nbytes, False)
        return space.u8[addr - base: addr - base + nbytes].tobytes()

    def array(self, addr: int, dtype, count: int) -> np.ndarray:
        return np.frombuffer(self.read(addr, np.dtype(dtype).itemsize * count), dtype).copy()

    def _split(self, addrs: np.ndarray, size: int, write: bool):
        """Yield (lane indices or None for all, region, offsets)."""
        addrs = np.asarray(addrs, U64)
        if not self.regions:
            raise MemoryFault("global", int(addrs[0]), size, write)
        if addrs.size == 0:
            return
        lo, hi = int(addrs.min()), int(addrs.max())
        first = int(np.searchsorted(self._bases, U64(lo), "right")) - 1
        if first >= 0:
            base, space = self.regions[first]
            if hi + size <= base + space.size:       # the common case: one region holds all
                yield None, space, (addrs - U64(base)).astype(np.int64)
                return
        ri = np.searchsorted(self._bases, addrs, "right").astype(np.int64) - 1
        if ri.min() < 0:
            raise MemoryFault("global", int(addrs[ri < 0][0]), size, write)
        first = ri[0]
        if np.all(ri == first):
            base, space = self.regions[first]
            off = (addrs - U64(base)).astype(np.int64)
            space.check(off, size, write, base)
            yield None, space, off
            return
        for r in np.unique(ri):
            sel = np.nonzero(ri == r)[0]
            base, space = self.regions[r]
            off = (addrs[sel] - U64(base)).astype(np.int64)
            space.check(off, size, write, base)
            yield sel, space, off

    def load(self, addrs, size):
        if len(addrs) == 0:
            return np.zeros((0, max(1, size // 4)), U32)
        parts = list(self._split(addrs, size, False))
        if parts[0][0] is None:
            return parts[0][1].load(parts[0][2], size)
        out = np.empty((len(addrs), max(1, size // 4)), U32)
        for sel, space, off in parts:
            out[sel] = space.load(off, size)
        return out

    def store(self, addrs, data, size):
        if len(addrs) == 0:
            return
        data = np.asarray(data, U32).reshape(len(addrs), -1)
        for sel, space, off in self._split(addrs, size, True):
            space.store(off, data if sel is None else data[sel], size)

    def atomic(self, op, addrs, data, dtype, cmp=None):
        size = np.dtype(dtype).itemsize
        out = np.empty((len(addrs), size // 4), U32)
        for sel, space, off in self._split(addrs, size, True):
            s = slice(None) if sel is None else sel
            out[s] = space.atomic(op, off, data[s], dtype, None if cmp is None else cmp[s])
        return out
