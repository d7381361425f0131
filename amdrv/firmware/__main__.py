"""python -m amdrv.firmware {status,verify,fetch,seed,inspect}: manage the pinned firmware.

  status [--json]    every pinned file: verified, missing or bad (override directory, then cache)
  verify [--dir DIR] exit 0 only when every pinned file is present and matches its pin
  fetch [--chip C]   download what is missing into the cache (all chips by default)
  seed DIR           copy pinned files found in DIR (e.g. /lib/firmware/amdgpu) into the cache, verified;
                     other versions and compressed files are skipped (exit 0: the download takes over)
  inspect FILE       header fields and components of one firmware file
"""
import argparse
import json
import sys
from pathlib import Path

from amdrv import chips
from amdrv.firmware import parse, pins
from amdrv.firmware.store import FirmwareError, FirmwareStore, check, pin_of, read_local

COMPRESSED = (".zst", ".xz")   # how distributions other than Debian ship linux-firmware (not read: skipped)


def _status(store: FirmwareStore, as_json: bool = False) -> int:
    rows = store.status()
    ok = sum(s.state == "verified" for s in rows)
    if as_json:
        print(json.dumps({"tag": pins.TAG, "cache": str(store.cache),
                          "override": str(store.override) if store.override else None,
                          "verified": ok, "total": len(rows),
                          "files": [{"name": s.name, "state": s.state, "where": s.where,
                                     "chips": [c.name for c in chips.SUPPORTED if s.name in pins.files_for(c)]}
                                    for s in rows]}, indent=2))
        return 0 if ok == len(rows) else 1
    for s in rows:
        print(f"  {s.state:9} {s.name:22} {s.where}")
    print(f"{ok}/{len(rows)} pinned files verified (linux-firmware {pins.TAG})")
    return 0 if ok == len(rows) else 1


def _verify_dir(directory: Path) -> int:
    bad = 0
    for name, pin in sorted(pins.PINS.items()):
        p = next((q for q in (directory / name, directory / "amdgpu" / name) if q.is_file()), None)
        try:
            if p is None:
                raise FirmwareError(f"firmware: {name} is missing from {directory}")
            read_local(pin, p, str(p))
            print(f"  verified  {name}")
        except FirmwareError as e:
            bad += 1
            print(f"  FAILED    {e}")
    print(f"{len(pins.PINS) - bad}/{len(pins.PINS)} pinned files verified in {directory}")
    return 0 if bad == 0 else 1


def _seed(store: FirmwareStore, directory: Path) -> int:
    """Copies the pinned files DIR holds into the cache. Seeding only saves downloads: a file that is not
    the pinned release (another linux-firmware version, or compressed .zst/.xz as newer distributions ship)
    is skipped with one line saying so, and never fails the command; the pinned download (or the offline
    error listing what is missing) takes over at first use."""
    copied, skipped = 0, []
    for name in sorted(pins.PINS):
        p = next((q for q in (directory / name, directory / "amdgpu" / name) if q.is_file()), None)
        if p is None:
            packed = next((q for ext in COMPRESSED for q in (directory / (name + ext),
                                                              directory / "amdgpu" / (name + ext)) if q.is_file()),
                          None)
            if packed is not None:
                skipped.append(f"{packed.name} (compressed)")
            continue
        try:
            store.store(name, read_local(pin_of(name), p, str(p)))
            copied += 1
        except FirmwareError as e:
            unreadable = isinstance(e.__context__, OSError)   # read_local: the file could not be read
            skipped.append(f"{name} ({e.__context__.strerror if unreadable else 'not the pinned size/sha256'})")
        except OSError as e:   # the cache could not be written
            skipped.append(f"{name} ({e.strerror or e})")
    print(f"seed: {copied} pinned files copied from {directory} into {store.cache}")
    if skipped:
        print(f"seed: skipped {len(skipped)} file(s) that are not linux-firmware {pins.TAG}'s: "
              + ", ".join(skipped) + "; the pinned files are downloaded instead when first needed")
    return 0


INSPECT_MAX = 16 << 20   # the largest amdgpu firmware file is well under 1 MiB


def _inspect(path: Path) -> int:
    size = path.stat().st_size
    if size > INSPECT_MAX:
        raise FirmwareError(f"firmware: {path} is {size} bytes; no amdgpu firmware file is larger than "
                            f"{INSPECT_MAX >> 20} MiB, so it is not one (not read)")
    data = path.read_bytes()
    pin = pins.PINS.get(path.name)
    if pin:
        try:
            check(pin, data, str(path))
            print(f"{path.name}: matches the pin (linux-firmware {pins.TAG})")
        except FirmwareError as e:
            print(f"warning: {e}")
    else:
        print(f"{path.name}: not a pinned file")
    img = parse(path.name, data)
    print(f"kind {img.kind}, header v{img.header_version[0]}.{img.header_version[1]}, "
          f"IP v{img.ip_version[0]}.{img.ip_version[1]}, ucode version {img.ucode_version:#x}")
    for k, v in img.header.items():
        print(f"  {k:44} {v:#x}" if isinstance(v, int) else f"  {k:44} {v}")
    print("components:")
    for c in img.components:
        t = f"psp_gfx_fw_type {c.psp_fw_type}" if c.psp_fw_type is not None else "-"
        ver = f"{c.version:#x}" if c.version is not None else "-"
        print(f"  {c.name:28} offset {c.offset:#8x} size {c.size:8d} version {ver:>10}  {t}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m amdrv.firmware", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("status")
    st.add_argument("--json", action="store_true", help="print machine-readable JSON instead")
    v = sub.add_parser("verify")
    v.add_argument("--dir", type=Path)
    f = sub.add_parser("fetch")
    f.add_argument("--chip", choices=[c.name for c in chips.SUPPORTED])
    s = sub.add_parser("seed")
    s.add_argument("dir", type=Path)
    i = sub.add_parser("inspect")
    i.add_argument("file", type=Path)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "verify" and args.dir:
            return _verify_dir(args.dir)
        if args.cmd == "inspect":
            return _inspect(args.file)
        store = FirmwareStore()
        if args.cmd in ("status", "verify"):
            return _status(store, as_json=getattr(args, "json", False))
        if args.cmd == "seed":
            return _seed(store, args.dir)
        names = pins.files_for(chips.by_name(args.chip)) if args.chip else sorted(pins.PINS)
        store.read_all(names)
        print(f"fetch: {len(names)} files verified in {store.cache}")
        return 0
    except (FirmwareError, OSError) as e:
        print(e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
