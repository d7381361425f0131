"""The cache model (gpusim.gl2) on its own: lines per level, GCR actions, GL2 as the engines' point of
coherence, MTYPE UC bypassing GL2, eviction writing dirty bytes back."""
import numpy as np

from gpusim import gl2 as G
from gpusim import provider

NC, UC = 0, G.MTYPE_UC << G.MTYPE_SHIFT


def open_dev(bus):
    return provider.open_function("navi31", fresh=True, bus=bus, vram_size=1 << 30).dev


def load(c, dev, kind, page, lo, n, pte=NC):
    """A shader load as gpusim.dispatch does it: memory, the caches over it, then the fill."""
    buf = np.frombuffer(bytearray(dev.vram.read(page, G.PAGE)), np.uint8)
    c.overlay(kind, (False, page), buf)
    c.fill(kind, (False, page), pte, buf, list(range(lo >> 6, ((lo + n - 1) >> 6) + 1)))
    return buf[lo:lo + n].tobytes()


def test_lines_stay_until_their_level_is_invalidated(sim_bus):
    dev = open_dev(sim_bus)
    c = dev.blocks["GL2"]
    dev.vram.write(0x10000, b"old!" * 64)
    assert load(c, dev, "k", 0x10000, 0, 4) == b"old!"
    dev.vram.write(0x10000, b"new!" * 64)                       # memory changes underneath (the HDP)
    assert load(c, dev, "k", 0x10000, 0, 4) == b"old!"          # K$
    assert load(c, dev, "v", 0x10000, 0, 4) == b"old!"          # a vector load misses L0, hits GL1/GL2
    assert load(c, dev, "k", 0x10000, 128, 4) == b"new!"        # a line never loaded is fetched fresh
    c.gcr(G.GLK_INV, "test")
    assert load(c, dev, "k", 0x10000, 0, 4) == b"old!"          # K$ refilled from GL1/GL2
    c.gcr(G.GLK_INV | G.GL1_INV | G.GL2_INV, "test")
    assert load(c, dev, "k", 0x10000, 0, 4) == b"new!"
    assert load(c, dev, "v", 0x10000, 0, 4) == b"old!"          # the vector L0 was not invalidated
    c.gcr(G.GLV_INV, "test")
    assert load(c, dev, "v", 0x10000, 0, 4) == b"new!"


def test_uc_memory_is_not_kept_in_gl2(sim_bus):
    dev = open_dev(sim_bus)
    c = dev.blocks["GL2"]
    assert load(c, dev, "v", 0x20000, 0, 4, pte=UC) == bytes(4)
    dev.vram.write(0x20000, b"host")
    c.gcr(G.GLV_INV | G.GL1_INV, "test")                        # no GL2_INV needed: UC never entered GL2
    assert load(c, dev, "v", 0x20000, 0, 4, pte=UC) == b"host"
    c.store((False, 0x20000), UC, 8, b"thru")                   # UC stores go through
    assert dev.vram.read(0x20008, 4) == b"thru" and c.dirty_bytes == 0


def test_dirty_bytes_write_back_invalidate_discard_and_coherent_engines(sim_bus):
    dev = open_dev(sim_bus)
    c = dev.blocks["GL2"]
    dev.vram.write(0x30000, b"AAAAAAAA")
    c.store((False, 0x30000), NC, 2, b"bb")                     # bytes 2..3 dirty in GL2
    assert dev.vram.read(0x30000, 8) == b"AAAAAAAA"
    assert c.coherent_read((False, 0x30000), 0, b"AAAAAAAA") == b"AAbbAAAA"   # the CP/SDMA see it
    dev.vram.write(0x30006, b"CC")                              # memory changes other bytes meanwhile
    c.gcr(G.GL2_INV, "test")                                    # a plain invalidate keeps dirty bytes
    c.gcr(G.GL2_WB, "test")
    assert dev.vram.read(0x30000, 8) == b"AAbbAACC"             # only the dirty bytes were written
    c.store((False, 0x30000), NC, 0, b"zz")
    c.gcr(G.GL2_DISCARD | G.GL2_INV, "test")                    # discarded: never reaches memory
    c.gcr(G.GL2_WB, "test")
    assert dev.vram.read(0x30000, 8) == b"AAbbAACC"
    c.store((False, 0x30000), NC, 0, b"yy")
    c.write_through((False, 0x30000), 0, b"xx")                 # an engine's write over dirty bytes wins
    c.gcr(G.GL2_WB, "test")
    assert dev.vram.read(0x30000, 2) == b"xx"


def test_release_mem_bits_and_eviction(sim_bus):
    dev = open_dev(sim_bus)
    c = dev.blocks["GL2"]
    c.store((False, 0x40000), NC, 0, b"dirty")
    c.release(G.REL_GL2_INV, "test")
    assert dev.vram.read(0x40000, 5) == bytes(5)
    c.release(G.REL_GL2_WB, "test")
    assert dev.vram.read(0x40000, 5) == b"dirty"
    c.store((False, 0x50000), NC, 0, b"evict me")
    for p in range(G.CAPACITY["gl2"] // G.PAGE + 2):            # fill GL2 past its capacity, a page at a time
        load(c, dev, "v", 0x100000 + p * G.PAGE, 0, G.PAGE)
    assert dev.vram.read(0x50000, 8) == b"evict me" and c.dirty_bytes == 0
