"""The VRAM allocator: alignment, huge-page-friendly placement, the boot region, misuse, exhaustion, and
random alloc/free sequences checked against a page bitmap."""
import random

import pytest

from amdrv.memory import BOOT_SIZE, GIANT, HUGE, PAGE, VRAMAllocator, VRAMError, VRAMExhausted

GiB, MiB = 1 << 30, 1 << 20


def test_layout_boot_region_below_the_reserved_top():
    a = VRAMAllocator(24 * GiB)
    # top 64 KiB is the discovery/TMR reserve; the boot region ends at the 2 MiB boundary below it
    assert a.boot_end == 24 * GiB - 2 * MiB and a.boot_base == a.boot_end - BOOT_SIZE
    assert a.free_ranges() == [(0, a.boot_base)]
    a2 = VRAMAllocator(8 * GiB, boot_size=3 * MiB, reserved_top=3 * MiB)
    assert a2.boot_end == 8 * GiB - 4 * MiB and a2.boot_base == a2.boot_end - 4 * MiB


def test_boot_allocations_are_deterministic_and_never_freed():
    def boot(a):
        return [a.alloc_boot(0x1300000, 1 * MiB, "tmr"), a.alloc_boot(5000, tag="ring"),
                a.alloc_boot(PAGE, 64 * 1024, "mqd"), a.alloc_boot(3 * PAGE, tag="pd")]

    a, b = VRAMAllocator(16 * GiB), VRAMAllocator(16 * GiB)
    a.alloc(10 * MiB)  # heap traffic does not move the boot region
    first, second = boot(a), boot(b)
    assert a.boot_layout() == b.boot_layout()
    assert [(x.addr, x.size) for x in first] == [(y.addr, y.size) for y in second]
    tmr, ring, mqd, pd = first
    assert tmr.addr == a.boot_base and ring.addr == tmr.end and ring.size == 2 * PAGE
    assert mqd.addr % (64 * 1024) == 0 and pd.addr == mqd.end
    assert all(x.boot and a.boot_base <= x.addr and x.end <= a.boot_end for x in first)
    assert a.in_use() == 10 * MiB and a.boot_used == pd.end - a.boot_base
    with pytest.raises(VRAMError, match="boot memory, which is never freed"):
        a.free(tmr)


def test_boot_region_exhaustion_names_the_request():
    a = VRAMAllocator(1 * GiB, boot_size=2 * MiB)
    a.alloc_boot(MiB, tag="tmr")
    with pytest.raises(VRAMExhausted, match=r"boot region exhausted: fw needs 2 MiB .* 1 MiB is left of 2 MiB"):
        a.alloc_boot(2 * MiB, tag="fw")


def test_alignment_and_huge_defaults():
    a = VRAMAllocator(8 * GiB)
    small = a.alloc(100)
    assert small.addr == 0 and small.size == PAGE
    big = a.alloc(3 * MiB)
    assert big.addr % HUGE == 0 and big.size == 3 * MiB
    giant = a.alloc(GiB + PAGE)
    assert giant.addr % GIANT == 0
    odd = a.alloc(PAGE, align=64 * 1024)
    assert odd.addr % (64 * 1024) == 0
    # a later small allocation fills the hole left below the 2 MiB-aligned one (best fit)
    s2 = a.alloc(PAGE)
    assert s2.addr < HUGE


def test_huge_default_falls_back_when_fragmented():
    a = VRAMAllocator(64 * MiB, boot_size=2 * MiB)  # heap is [0, 60 MiB)
    holes = [a.alloc(3 * MiB, align=PAGE) for _ in range(20)]  # packed at 3 MiB steps
    for h in holes[1::2]:  # free ranges at 3, 9, 15, ... MiB: none holds a 2 MiB-aligned 3 MiB
        a.free(h)
    assert a.largest_free() == 3 * MiB
    # 3 MiB with 2 MiB alignment fits nowhere now; the default alignment steps down
    x = a.alloc(3 * MiB)
    assert x.addr % HUGE != 0 and x.addr % PAGE == 0
    with pytest.raises(VRAMExhausted):
        a.alloc(3 * MiB, align=HUGE)


def test_free_coalesces_and_in_use_returns_to_zero():
    a = VRAMAllocator(1 * GiB)
    blocks = [a.alloc(PAGE * (i + 1), align=PAGE) for i in range(10)]
    assert a.in_use() == sum(b.size for b in blocks)
    for b in blocks[1::2] + blocks[::2]:
        a.free(b)
    assert a.in_use() == 0 and a.allocations() == [] and a.free_ranges() == [(0, a.boot_base)]


def test_double_free_and_foreign_blocks():
    a, other = VRAMAllocator(1 * GiB), VRAMAllocator(1 * GiB)
    b = a.alloc(PAGE, tag="ring")
    a.free(b)
    with pytest.raises(VRAMError, match=r"free of <VRAM 0x0\+0x1000 ring>: not a live allocation .*double free"):
        a.free(b)
    b2 = a.alloc(PAGE)  # same address again: the stale Block still cannot free it
    assert b2.addr == b.addr
    with pytest.raises(VRAMError, match="double free"):
        a.free(b)
    with pytest.raises(VRAMError, match="not a live allocation"):
        other.free(b2)
    a.free(b2)


def test_exhaustion_names_size_and_largest_free_block():
    a = VRAMAllocator(64 * MiB, boot_size=2 * MiB)
    a.alloc(40 * MiB, tag="weights")
    with pytest.raises(VRAMExhausted, match=r"cannot allocate 32 MiB \(0x2000000\) aligned to 0x1000 for "
                                            r"activations: the largest free block is 20 MiB \(0x1400000\)"):
        a.alloc(32 * MiB, tag="activations")
    assert isinstance(VRAMExhausted("x"), MemoryError)


@pytest.mark.parametrize("size,align,match", [(0, PAGE, "size must be positive"),
                                              (PAGE, 3 * PAGE, "power of two")])
def test_bad_requests(size, align, match):
    with pytest.raises(VRAMError, match=match):
        VRAMAllocator(GiB).alloc(size, align)


def test_vram_too_small_for_boot_region():
    with pytest.raises(VRAMError, match="cannot hold a 64 MiB boot region"):
        VRAMAllocator(32 * MiB)


def test_random_alloc_free_against_a_page_bitmap():
    rng = random.Random(1234)
    a = VRAMAllocator(256 * MiB, boot_size=8 * MiB)
    npages = a.boot_base // PAGE
    owner = [None] * npages
    live = []
    for step in range(3000):
        if live and rng.random() < 0.45:
            b = live.pop(rng.randrange(len(live)))
            a.free(b)
            for p in range(b.addr // PAGE, b.end // PAGE):
                assert owner[p] is b
                owner[p] = None
            continue
        size = rng.choice([PAGE, 3 * PAGE, 64 << 10, HUGE, 5 * MiB, rng.randrange(1, 600000)])
        align = rng.choice([None, None, PAGE, 64 << 10, HUGE])
        try:
            b = a.alloc(size, align)
        except VRAMExhausted:
            continue
        assert b.size >= size and b.size % PAGE == 0 and b.end <= a.boot_base
        assert b.addr % (align or PAGE) == 0
        if align is None and size >= HUGE and b.addr % HUGE:
            # a 2 MiB-default allocation only loses its alignment when no aligned place was free
            assert not any(((s + HUGE - 1) & -HUGE) + b.size <= e for s, e in a.free_ranges())
        for p in range(b.addr // PAGE, b.end // PAGE):
            assert owner[p] is None, f"step {step}: {b} overlaps {owner[p]}"
            owner[p] = b
        live.append(b)
        if step % 500 == 0:
            free = set()
            for s, e in a.free_ranges():
                free.update(range(s // PAGE, e // PAGE))
            assert free == {p for p in range(npages) if owner[p] is None}
            assert a.in_use() == sum(x.size for x in live)
    for b in live:
        a.free(b)
    assert a.in_use() == 0 and a.free_ranges() == [(0, a.boot_base)]


def test_small_bar_keeps_the_boot_region_cpu_visible():
    vis = 256 << 20
    mm = VRAMAllocator(24 << 30, visible=vis)
    assert mm.boot_end == vis and mm.boot_base == vis - BOOT_SIZE
    big = mm.alloc(4 << 30)  # the VRAM above the window is heap
    assert big.addr >= vis and big.end <= (24 << 30) - (64 << 10)
    low = mm.alloc(1 << 20)
    assert low.end <= mm.boot_base
    # large BAR: unchanged layout
    assert VRAMAllocator(24 << 30, visible=32 << 30).boot_end == VRAMAllocator(24 << 30).boot_end
