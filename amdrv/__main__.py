"""python -m amdrv: what the AM driver supports and would use on this machine; `info` boots a GPU.

    python -m amdrv                          supported GPUs, pinned firmware (verified; where from),
                                             the generated hardware tables each chip binds to
    python -m amdrv info --device am:sim     boots the GPU (warm when a clean AM run left it), prints IP
                                             versions, VRAM, BARs, firmware versions, boot kind, time and
                                             MMIO counts, then leaves it with fini (so the next is warm)
    --json (either form)                     the same as JSON (also: driverless info [--device D] --json)
"""
import argparse
import importlib
import json
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
        origin = {n: store.origin(n) for n in names}   # before reading: what is missing now gets downloaded
        try:
            blobs = store.read_all(names)
        except FirmwareError as e:
            print(f"  {c.name}: not ready\n    " + str(e).replace("\n", "\n    "))
            ok = False
            continue
        parts = 0
        for name, data in blobs.items():
            parts += len(parse(name, data).components)
        counts = {w: sum(o == w for o in origin.values()) for w in dict.fromkeys(origin.values())}
        print(f"  {c.name}: {len(names)} files verified (size, sha256): "
              + ", ".join(f"{k} {w}" for w, k in counts.items()) + f"; {parts} components parsed")
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


def _info_dict(gpu) -> dict:
    """What info prints, as plain data (driverless info --device D --json)."""
    dev, rep, pci = gpu.dev, gpu.boot_report, gpu.dev.pci
    return {
        "device": dev.name, "chip": dev.chip.name, "gfx_target": dev.chip.gfx_target, "address": pci.address,
        "pci_id": f"{pci.vendor_id:04x}:{pci.device_id:04x}",
        "boot": {"kind": rep.kind, "mode1_reset": rep.mode1_reset, "reason": rep.reason, "seconds": rep.seconds,
                 "mmio_reads": rep.mmio_reads, "mmio_writes": rep.mmio_writes,
                 "steps": [{"name": s.name, "seconds": s.seconds, "mmio_reads": s.mmio_reads,
                            "mmio_writes": s.mmio_writes} for s in rep.steps]},
        "vram": {"size": dev.vram.size, "visible": dev.vram.visible, "boot_base": dev.mm.boot_base,
                 "boot_used": dev.mm.boot_used},
        "bars": {str(i): pci.bar(i).size for i in (0, 2, 5)},
        "ip_blocks": {f"{name}{'' if inst == 0 else inst}": _version(ip.version)
                      for (name, inst), ip in sorted(dev.disc.ips.items())},
        "firmware": gpu.firmware_versions(),
        "mec_ready": bool(gpu.gfx.mec_ready()), "sdma_ready": bool(gpu.sdma.ready()),
    }


def _fini_line(device: str) -> str:
    from amdrv import device_spec
    kept = device_spec.parse(device).persistent   # a simulated GPU outlives the process in its state file
    return "engines halted, clocks low, clean-exit flag set " + (
        "(the next open boots warm)" if kept else "(this simulated GPU is not kept: the next open boots cold)")


def info(device: str, cold: bool | None = None, as_json: bool = False) -> int:
    """Boots (or attaches warm to) `device` and prints what it found (as JSON with as_json); fini at the end."""
    from amdrv.am import AMGPU
    from amdrv.memory import fmt_size

    gpu = AMGPU.open(device, cold=cold)
    if as_json:
        try:
            data = _info_dict(gpu)
        except BaseException:
            gpu.dev.close()  # no fini: the next boot must not trust this state
            raise
        gpu.fini()
        data["fini"] = _fini_line(device)
        print(json.dumps(data, indent=2))
        return 0
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
    print(f"fini: {_fini_line(device)}")
    return 0


def report_dict() -> dict:
    """Supported GPUs and the state of their firmware, as plain data (driverless info --json)."""
    store = FirmwareStore()
    out = {"chips": [], "firmware": {"tag": TAG, "cache": str(store.cache), "chips": {}}}
    for c in chips.SUPPORTED:
        out["chips"].append({"name": c.name, "gfx_target": c.gfx_target, "products": c.products,
                             "pci_ids": [f"{chips.AMD_VENDOR_ID:04x}:{d:04x}" for d in c.pci_device_ids],
                             "ip": {b: _version(v) for b, v in c.ip.items()}})
        names = files_for(c)
        origin = {n: store.origin(n) for n in names}
        try:
            store.read_all(names)
            out["firmware"]["chips"][c.name] = {"ready": True, "files": origin}
        except FirmwareError as e:
            out["firmware"]["chips"][c.name] = {"ready": False, "files": origin, "error": str(e)}
    return out


def report(as_json: bool = False) -> int:
    if as_json:
        try:
            print(json.dumps(report_dict(), indent=2))
        except FirmwareError as e:
            print(json.dumps({"error": str(e)}))
            return 2
        return 0
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
    for q in (parser, p):
        q.add_argument("--json", action="store_true", help="print machine-readable JSON instead")
    args = parser.parse_args(argv or [])
    if args.command is None:
        return report(as_json=args.json)
    from amdrv.am import AMError
    from pcie import PCIError
    try:
        return info(args.device, cold=args.cold, as_json=args.json)
    except (AMError, PCIError, FirmwareError) as e:
        if args.json:
            print(json.dumps({"error": str(e)}))
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
