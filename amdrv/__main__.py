"""python -m amdrv: what the AM driver supports and would use on this machine.

Until the driver boots a GPU, the main job reports the supported GPUs, the state of their pinned
firmware (fetching what is missing unless offline, verifying everything, parsing every header), and the
generated hardware tables each chip's IP blocks bind to.
"""
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


def main() -> int:
    print("driverless AM driver: nothing to boot yet, reporting what would be used\n")
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
