"""Readable reprs: a device says its string, chip, PCI address, VRAM and how it booted; a buffer its size,
address, device and chip (issue 12)."""
import re


def test_device_and_buffer_reprs(dev):
    r = repr(dev)
    assert r.startswith("<amdrv.AMHCQDevice am:sim: navi31 gfx1100 at 0000:") and "24 GiB VRAM" in r, r
    assert re.search(r"(cold|warm) boot>$", r), r
    buf = dev.alloc(6144)
    b = repr(buf)
    assert b == f"<hcq.Buffer 6 KiB (0x1800 bytes) at va {buf.va:#x} on am:sim (navi31 gfx1100)>", b
    v = repr(buf.view(4096, 16))
    assert v == f"<hcq.Buffer 16 B (0x10 bytes) at va {buf.va + 4096:#x} on am:sim (navi31 gfx1100), a view at +0x1000 of 6 KiB>", v
    dev.close()
    assert repr(dev).endswith("VRAM, closed>")
