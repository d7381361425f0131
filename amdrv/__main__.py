"""python -m amdrv: what the AM driver supports and would use on this machine; `info` boots a GPU.

    python -m amdrv                          supported GPUs, pinned firmware (fetched and verified),
                                             the generated hardware tables each chip binds to
    python -m amdrv info --device am:sim     boots the GPU (warm when a clean AM run left it), prints IP
                                             versions, VRAM, BARs, firmware versions, boot kind, time and
                                             MMIO counts, then leaves it with fini (so the next is warm)
"""
import argparse
import importlib
import sys
import time
from pathlib import Path

from amdrv import chips, regs
from amdrv.firmware import FirmwareError, FirmwareStore, TAG, files_for, parse

AUTOGEN = Path(__file__).parent / "autogen"
# Register tables per IP block, by the header family upstream amdgpu includes for that block version.
REG_TABLE_OF = {"gc": "regs_gc_11_0_0", "mp0": "regs_mp_13_0_0", "mp1": "regs_mp_13_0_0",
                "mmhub": "regs_mmhub_{v}", "nbio": "regs_nbio_4_3_0", "osssys": "regs_osssys_6_0_0",
                "hdp": "regs_hdp_6_0_0"}


def _supported() -> None:
    print("Supported GPUs")
    for c in chips.SUPPORTED:
        ids = ", ".join(f"{chips.AMD_VENDOR_ID:04x}:{d:04x}" for d in c.pci_device_ids)
        ips = ", ".join(f"{b.upper()} {'.'.join(map(str, v))}" for b, v in c.ip.items())
        print(f"  {c.name} ({c.gfx_target}): {c.products}\n    PCI {ids}\n    IP  {ips}")


def _firmware(store: FirmwareStore) -> bool:
    print(f"\nFirmware (linux-firmware {TAG}; cache {store.cache})")
    ok = True
    for c in chips.SUPPORTED:
        names = files_for(c)
        try:
            blobs = store.read_all(names)
        except FirmwareError as e:
            print(f"  {c.name}: not ready\n    " + str(e).replace("\n", "\n    "))
            ok = False
            continue
        parts = 0
        for name, data in blobs.items():
            parts += len(parse(name, data).components)
        print(f"  {c.name}: {len(names)} files fetched and verified (size, sha256), "
              f"{parts} components parsed")
    return ok


def _tables() -> None:
    print("\nHardware tables (amdrv/autogen, generated from linux-source-6.1 headers)")
    for c in chips.SUPPORTED:
        mods = []
        for block, pattern in REG_TABLE_OF.items():
            name = pattern.format(v=c.ip_tag(block))
            mods.append(f"{block.upper()}={name.removeprefix('regs_')}")
        print(f"  {c.name}: " + ", ".join(mods))
    t0 = time.perf_counter()
    rows = []
    for path in sorted(AUTOGEN.glob("*.py")):
        if path.name == "__init__.py":
            continue
        if path.stem.startswith("regs_"):
            what = f"{len(regs.load(path.stem.removeprefix('regs_')))} MMIO registers with their fields"
        else:
            what = (importlib.import_module(f"amdrv.autogen.{path.stem}").__doc__ or "").split("\n")[0]
        rows.append(f"  {path.stem:18} {path.stat().st_size / 1024:4.0f} KiB  {what}")
    ms = (time.perf_counter() - t0) * 1e3
    print("\n".join(rows))
    print(f"  ({len(rows)} modules; all loaded in {ms:.0f} ms)")


def _version(v) -> str:
    return ".".join(map(str, v))


def info(device: str, cold: bool | None = None) -> int:
    """Boots (or attaches warm to) `device` and prints what it found; fini at the end."""
    from amdrv.am import AMGPU
    from amdrv.memory import fmt_size

    gpu = AMGPU.open(device, cold=cold)
    try:
        dev, rep = gpu.dev, gpu.boot_report
        pci = dev.pci
        print(f"{dev.name}: {dev.chip.name} ({dev.chip.gfx_target}) at {pci.address}, "
              f"PCI {pci.vendor_id:04x}:{pci.device_id:04x}")
        print(f"Boot: {rep.kind}{' after a mode1 reset' if rep.mode1_reset else ''} in "
              f"{rep.seconds * 1e3:.0f} ms; {rep.reason}")
        print(f"  MMIO: {rep.mmio_reads} reads, {rep.mmio_writes} writes; by block:")
        for s in rep.steps:
            print(f"  {s.name:12} {s.seconds * 1e3:6.1f} ms {s.mmio_reads:5} reads {s.mmio_writes:5} writes")
        vram = dev.vram
        how = "all through BAR0" if vram.visible == vram.size else \
            f"{fmt_size(vram.visible)} through BAR0, the rest through MM_INDEX/MM_DATA (small BAR)"
        print(f"VRAM: {fmt_size(vram.size)} ({how}); boot region {fmt_size(dev.mm.boot_used)} used at "
              f"{dev.mm.boot_base:#x}")
        print("BARs: " + ", ".join(f"BAR{i} {what} {fmt_size(pci.bar(i).size)}"
                                   for i, what in ((0, "VRAM"), (2, "doorbells"), (5, "registers"))))
        print("IP blocks: " + ", ".join(f"{name}{'' if inst == 0 else inst} {_version(ip.version)}"
                                        for (name, inst), ip in sorted(dev.disc.ips.items())))
        print("Firmware:")
        for line in gpu.firmware_versions():
            print(f"  {line}")
        print(f"GFX: MEC {'ready' if gpu.gfx.mec_ready() else 'NOT ready'}; "
              f"SDMA: {'ready' if gpu.sdma.ready() else 'NOT ready'}")
    except BaseException:
        gpu.dev.close()  # no fini: the next boot must not trust this state
        raise
    gpu.fini()
    print("fini: engines halted, clocks low, clean-exit flag set (the next open boots warm)")
    return 0


def report() -> int:
    print("driverless AM driver: supported GPUs, their firmware and tables\n")
    _supported()
    try:
        store = FirmwareStore()
    except FirmwareError as e:
        print(e, file=sys.stderr)
        return 2
    fw_ok = _firmware(store)
    _tables()
    if not fw_ok:
        print("\nFirmware is not complete: see the ways to supply it above.")
    print("\nBoot a GPU and show it: python -m amdrv info --device am:sim (or am, am:sim:navi33, am:PCI-ADDRESS)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """argv: the arguments after `python -m amdrv` (none: the report)."""
    parser = argparse.ArgumentParser(prog="python -m amdrv", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("info", help="boot a GPU (or attach warm) and print what it is and how it booted")
    p.add_argument("--device", default="am", help="AM device string: am, am:sim, am:sim:navi33, "
                   "am:0000:03:00.0 (default: am, the first AMD GPU no kernel driver holds)")
    p.add_argument("--cold", action="store_true", default=None, help="force a cold boot")
    args = parser.parse_args(argv or [])
    if args.command is None:
        return report()
    from amdrv.am import AMError
    from pcie import PCIError
    try:
        return info(args.device, cold=args.cold)
    except (AMError, PCIError, FirmwareError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
