"""Firmware-blob fuzzer: mutated copies of the pinned firmware files, fed to the driver's parsers and to boots.

    python -m tools.fuzz.firmware                          # 2,000 parser cases, 40 boots (seconds)
    python -m tools.fuzz.firmware --budget 100000 --boots 1000 --seed 1   # the documented run
    python -m tools.fuzz.firmware --replay 1:4711          # one case again, with its traceback

Mutations (each case: one pinned file, one mutation, drawn from --seed and the case number):
  bitflip   1-8 bits flipped (half the cases inside the header)       bytes     a run of random bytes
  truncate  cut anywhere, down to 0 bytes                              extend    random bytes appended
  field     one scalar of the file's header struct (amdrv.autogen.ucode) set to an edge value
  overflow  an offset, size or count field made to run past the end or wrap 32 bits
  version   the header version changed                                 swap      two header fields swapped
  swapcomp  a component's place filled with another component's bytes, or two PSP package descriptors swapped
  zero      all zeros, the same size                                   random    random bytes, random size
  otherchip the same file of the other chip                            otherkind another pinned file

Two stages:
- parse (in-process, the --budget cases): `amdrv.firmware.parse(name, data)`. Expected: a FirmwareError
  whose message names the file, or an image. An accepted image is compared with the real file's: the
  same components (what the PSP is given) and the same MEC start address (what the GFX block programs)
  means the mutation touched nothing the GPU receives ("loads unchanged"); otherwise the PSP's signature
  check has to refuse it ("to the PSP"), which the boot stage checks on a sample.
- boot (--boots cases, of the files a boot loads): a fresh simulated GPU per case, booted cold with the
  mutated file handed to the driver as if it had passed the pin check (a store that skips the sha256: the
  parser and the PSP are the defence under test). One boot in ten instead puts the file in an override
  directory, where the pin check must refuse it. Expected: a FirmwareError naming the file (parse or pin),
  a PSP refusal naming the file (PSPError: the simulated PSP compares every payload with the pinned
  component of its type), or a boot whose loads are all unchanged with nothing recorded by the simulator.

Unexpected (each printed with its seed and case number, exit status 1): any other exception type, a
FirmwareError or refusal that does not name the file, a parse over --parse-timeout or a boot over
--boot-timeout seconds (a hang), and a boot that completes after staging a payload that is no pinned
component byte for byte, or with another MEC entry point, or with errors the simulated GPU recorded (it ran
corrupt firmware).

--device: am:sim[:CHIP] (default). A real GPU (am:PCI-ADDRESS) gets the boot stage only with the
override-directory form by default (the pin refuses before the GPU is touched); --unpinned-on-hardware
sends mutated payloads to its PSP, whose signature check is then what stands between it and the file.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from amdrv import structs
from amdrv.autogen import ucode
from amdrv.chips import SUPPORTED, by_name
from amdrv.firmware import PINS, FirmwareError, FirmwareStore, files_for, parse
from amdrv.firmware.headers import _LAYOUTS, kind_of
from tools.fuzz.common import Finding, Tally, add_common_args, case_rng, sim_bus, sim_chip

MUTATIONS = ("bitflip", "bytes", "truncate", "extend", "field", "overflow", "version", "swap", "swapcomp", "zero",
             "random", "otherchip", "otherkind")
EDGE = (0, 1, 2, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)
_FMT_BITS = {"B": 8, "H": 16, "I": 32, "b": 8, "h": 16, "i": 32}


class Hang(Exception):
    """A parse or boot that ran past its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raises Hang in the main thread after `seconds` (SIGALRM; a Python loop is interrupted)."""
    def ring(signum, frame):
        raise Hang(f"no outcome within {seconds:g} s")
    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def header_fields(name: str, data: bytes) -> list[tuple[str, int, int]]:
    """(field name, byte offset, bits) of every scalar in the file's header, nested structs flattened."""
    major, minor = int.from_bytes(data[8:10], "little"), int.from_bytes(data[10:12], "little")
    layout = _LAYOUTS[kind_of(name)].get((major, minor))
    out: list[tuple[str, int, int]] = []

    def walk(st, base, prefix):
        for fname in st.fields:
            f = st.field(fname)
            if isinstance(f.type, structs.Struct):
                if not f.dims:
                    walk(f.type, base + f.offset, f"{prefix}{fname}.")
            elif not f.dims and f.type in _FMT_BITS and not f.bits:
                out.append((prefix + fname, base + f.offset, _FMT_BITS[f.type]))
    walk(structs.get(ucode, layout or "common_firmware_header"), 0, "")
    if kind_of(name) in ("sos", "ta"):   # the package descriptors after the v2.0 header
        desc = structs.get(ucode, "psp_fw_bin_desc")
        head = structs.get(ucode, "psp_firmware_header_v2_0").size
        for i in range(min(int.from_bytes(data[32:36], "little"), 16)):
            for fname in desc.fields:
                out.append((f"descriptor {i} {fname}", head + i * desc.size + desc.offset(fname), 32))
    return [f for f in out if f[1] + f[2] // 8 <= len(data)]


def _put(buf: bytearray, off: int, bits: int, value: int) -> None:
    buf[off:off + bits // 8] = (value & ((1 << bits) - 1)).to_bytes(bits // 8, "little")


def _get(buf: bytes, off: int, bits: int) -> int:
    return int.from_bytes(buf[off:off + bits // 8], "little")


@dataclass
class Case:
    index: int
    file: str
    mutation: str
    detail: str
    data: bytes

    @property
    def label(self) -> str:
        return f"{self.file} {self.mutation} {self.detail}"


def mutate(rng, name: str, files: dict[str, bytes], mutation: str) -> tuple[str, bytes]:
    """(what was done, the mutated bytes) of one mutation of pinned file `name`."""
    orig = files[name]
    d = bytearray(orig)
    if mutation == "bitflip":
        n, span = rng.randint(1, 8), (512 if rng.random() < 0.5 else len(d))
        at = sorted(rng.randrange(min(span, len(d))) for _ in range(n))
        for a in at:
            d[a] ^= 1 << rng.randrange(8)
        return f"bits at {','.join(hex(a) for a in at)}", bytes(d)
    if mutation == "bytes":
        a, n = rng.randrange(len(d)), rng.randint(1, 64)
        d[a:a + n] = rng.randbytes(len(d[a:a + n]))
        return f"{n} bytes at {a:#x}", bytes(d)
    if mutation == "truncate":
        cut = rng.choice((0, 1, 16, 31, 32, 64, 255, 256, rng.randrange(len(d)), len(d) - 1))
        return f"to {cut} bytes", bytes(d[:cut])
    if mutation == "extend":
        n = rng.choice((1, 4, 4096, rng.randint(1, 65536)))
        return f"{n} bytes appended", bytes(d) + rng.randbytes(n)
    if mutation in ("field", "overflow", "swap"):
        fields = header_fields(name, orig)
        if mutation == "swap":
            (fa, oa, ba), (fb, ob, bb) = rng.sample(fields, 2)
            va, vb = _get(orig, oa, ba), _get(orig, ob, bb)
            _put(d, oa, ba, vb)
            _put(d, ob, bb, va)
            return f"{fa} <-> {fb}", bytes(d)
        if mutation == "overflow":
            fields = [f for f in fields if any(w in f[0] for w in ("size", "offset", "count", "addr"))] or fields
        fname, off, bits = rng.choice(fields)
        old = _get(orig, off, bits)
        if mutation == "overflow":
            choices = [(1 << bits) - 1 - rng.randrange(64), len(orig) - old + 1 + old, len(orig),
                       len(orig) + 1, old + len(orig), (1 << bits) - old]
        else:
            choices = list(EDGE) + [old + 1, old - 1, old * 2, old >> 1, len(orig), len(orig) + 1,
                                    rng.getrandbits(bits)]
        value = rng.choice(choices) & ((1 << bits) - 1)
        _put(d, off, bits, value)
        return f"{fname} {old:#x} -> {value:#x}", bytes(d)
    if mutation == "swapcomp":
        # one component's place filled with another's bytes (the wrong image in a slot), or, in a PSP package,
        # two whole descriptors swapped
        comps = [c for c in parse(name, orig).components if not c.name.startswith("PPTABLE_")]
        if kind_of(name) in ("sos", "ta") and rng.random() < 0.5:
            n = int.from_bytes(orig[32:36], "little")
            i, j = rng.sample(range(n), 2)
            di, dj = 36 + 16 * i, 36 + 16 * j   # psp_fw_bin_desc[k] of psp_firmware_header_v2_0
            d[di:di + 16], d[dj:dj + 16] = orig[dj:dj + 16], orig[di:di + 16]
            return f"descriptors {i} <-> {j}", bytes(d)
        dst, src = rng.sample(comps, 2) if len(comps) > 1 else (comps[0], comps[0])
        d[dst.offset:dst.offset + dst.size] = (src.data * (dst.size // src.size + 1))[:dst.size]
        if d == orig:   # one component only (or identical ones): its bytes rotated instead
            d[dst.offset:dst.offset + dst.size] = src.data[1:] + src.data[:1]
        return f"{dst.name} filled with {src.name}'s bytes", bytes(d)
    if mutation == "version":
        major, minor = rng.choice(((0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (2, 3), (2, 4), (2, 5),
                                   (3, 0), (0xFFFF, 0xFFFF)))
        _put(d, 8, 16, major)
        _put(d, 10, 16, minor)
        return f"header v{major}.{minor}", bytes(d)
    if mutation == "zero":
        return "all zeros", bytes(len(d))
    if mutation == "random":
        n = rng.choice((0, 1, 32, 256, rng.randrange(2 * len(d))))
        return f"{n} random bytes", rng.randbytes(n)
    if mutation == "otherchip":
        kind = kind_of(name)
        other = [n for n in files if n != name and kind_of(n) == kind]
        src = rng.choice(other)
        return f"bytes of {src}", files[src]
    if mutation == "otherkind":
        src = rng.choice([n for n in files if kind_of(n) != kind_of(name)])
        return f"bytes of {src}", files[src]
    raise ValueError(f"unknown mutation {mutation!r}; known: {', '.join(MUTATIONS)}")


def make_case(seed: int, index: int, files: dict[str, bytes], names: list[str]) -> Case:
    rng = case_rng(seed, index, "firmware")
    while True:   # a mutation that changed nothing (a field set to its own value) is drawn again
        name, mutation = rng.choice(names), rng.choice(MUTATIONS)
        detail, data = mutate(rng, name, files, mutation)
        if data != files[name]:
            return Case(index, name, mutation, detail, data)


# -- the oracle: what a driver or GPU would receive ---------------------------------------------------------
def received(img) -> tuple:
    """What of a parsed file reaches the GPU: every component's bytes (the PSP loads; for the sos package
    the bootloader parts too) and, for the MEC file, the start address the GFX block programs."""
    # The smu file's soft PPTables go nowhere: with SCPM the PSP owns the PPTable, and without it this driver
    # sends none (the SMU's built-in one is used).
    comps = tuple((c.name, c.psp_fw_type, c.data) for c in img.components if not c.name.startswith("PPTABLE_"))
    start = (img.header.get("ucode_start_addr_lo"), img.header.get("ucode_start_addr_hi")) \
        if img.kind == "mec" else None
    return comps, start


def names_file(e: BaseException, file: str) -> bool:
    return file in str(e)


def parse_outcome(case: Case, reference: dict[str, tuple], timeout: float) -> tuple[str, str, bool]:
    """(outcome, detail, unexpected) of feeding the case to the parser."""
    try:
        with time_limit(timeout):
            img = parse(case.file, case.data)
    except FirmwareError as e:
        if not names_file(e, case.file):
            return "FirmwareError without the file's name", str(e), True
        return "FirmwareError", str(e), False
    except Hang as e:
        return "hang", str(e), True
    except Exception as e:   # noqa: BLE001 - the fuzzer's job is to catch exactly these
        return f"raw {type(e).__name__}", "".join(traceback.format_exception_only(e)).strip(), True
    if received(img) == reference[case.file]:
        return "accepted: loads unchanged", "nothing the GPU receives changed", False
    return "accepted: to the PSP", "components differ from the pinned file: the PSP must refuse them", False


# -- boots ----------------------------------------------------------------------------------------------------
class HandedStore(FirmwareStore):
    """A firmware store that hands out given bytes as verified: the pin check skipped, as if a user had
    changed the pins. What the parsers and the PSP do with a bad file is then what is tested."""

    def __init__(self, files: dict[str, bytes]):
        super().__init__(offline=True)
        self.files = files

    def read_all(self, names):
        return {n: self.files[n] for n in names}


def boot_outcome(case: Case, files: dict[str, bytes], reference: dict, device: str, pinned: bool,
                 timeout: float) -> tuple[str, str, bool]:
    """(outcome, detail, unexpected) of a cold boot with the case's file in place of the pinned one."""
    import pcie
    from amdrv.am import AMGPU, AMError
    from amdrv.ip.psp import PSP, PSPError, PSPTimeout

    chip = sim_chip(device)
    tmp = None
    if pinned:   # through an override directory: the pin check must refuse it
        tmp = tempfile.TemporaryDirectory(prefix="fuzz-fw-")
        for n, b in files.items():
            Path(tmp.name, n).write_bytes(case.data if n == case.file else b)
        store = FirmwareStore(override=tmp.name, offline=True)
    else:
        store = HandedStore({**files, case.file: case.data})
    gpu = pci = None
    staged: list[bytes] = []   # every payload the driver staged for the PSP, recorded as it does so
    stage = PSP._stage

    def recording_stage(self, data):
        staged.append(hashlib.sha256(data).digest())
        return stage(self, data)
    try:
        with time_limit(timeout), mock.patch.object(PSP, "_stage", recording_stage):
            if chip is not None:
                pci = pcie.open_function("sim", chip, fresh=True, bus=sim_bus())
                pci.dev.blocks["PSP"].firmware = _sim_reference(chip, files)
                errors_before = len(pci.dev.errors)
                gpu = AMGPU.open(pci, cold=True, firmware=store)
            else:
                gpu = AMGPU.open(device, cold=True, firmware=store)
                errors_before = None
    except FirmwareError as e:
        if not names_file(e, case.file):
            return "FirmwareError without the file's name", str(e), True
        return ("pin refused" if pinned else "FirmwareError"), str(e), False
    except Hang as e:
        return "hang", str(e), True
    except Exception as e:   # noqa: BLE001
        chain, x = [], e
        while x is not None:
            chain.append(x)
            x = x.__cause__
        refusal = next((x for x in chain if isinstance(x, PSPError) and not isinstance(x, PSPTimeout)), None)
        if refusal is not None and names_file(e, case.file):
            return "PSP refused", str(e), False
        if refusal is None and isinstance(e, AMError) and names_file(e, case.file):
            # the simulated GPU would not run what the file made the driver program (the MEC's entry point)
            return "boot stopped naming the file", str(e), False
        return f"{type(e).__name__}" + (" (PSP refusal without the file's name)" if refusal else ""), \
            "".join(traceback.format_exception_only(e)).strip(), True
    finally:
        if gpu is None and pci is not None:
            pci.close()
        if tmp is not None:
            tmp.cleanup()
    try:
        if pinned:
            return "booted past the pin check", "a mutated file was not refused by its pin", True
        # What reached the GPU: every staged payload must be a component of a pinned file, byte for byte.
        pinned = _pinned_payloads(files)
        names = {hashlib.sha256(c.data).digest(): f"{img.name} {c.name}" for img in gpu.psp.images.values()
                 for c in img.components}
        differ = [names.get(h, f"payload {i}") for i, h in enumerate(staged) if h not in pinned]
        if gpu.gfx.mec_start != reference[gpu.gfx.mec_firmware][1]:
            differ.append(f"{gpu.gfx.mec_firmware} (MEC start address)")
        if differ:
            return "booted with corrupt firmware", f"loads differ from the pinned files: {', '.join(differ)}", True
        if errors_before is not None and len(pci.dev.errors) > errors_before:
            return "booted with simulator errors", str(pci.dev.errors[errors_before]), True
        if case.file not in gpu.psp.images and case.file != gpu.gfx.mec_firmware:
            return "booted: file not read", "a cold boot does not read this file (the PSP's TAs)", False
        return "booted: loads unchanged", "the mutation touched nothing this boot sends to the GPU", False
    finally:
        gpu.dev.close()


_SIM_FW: dict = {}
_PAYLOADS: dict = {}


def _pinned_payloads(files: dict[str, bytes]) -> set[bytes]:
    """sha256 of every component of every pinned file: what a boot may send to the PSP."""
    key = tuple(sorted((n, len(b)) for n, b in files.items()))
    if key not in _PAYLOADS:
        _PAYLOADS[key] = {hashlib.sha256(c.data).digest() for n, b in files.items() for c in parse(n, b).components}
    return _PAYLOADS[key]


def _sim_reference(chip: str, files: dict[str, bytes]):
    """The simulated PSP's own reading of the real pinned files (gpusim.fwcheck), shared by every boot."""
    from gpusim import fwcheck
    if chip not in _SIM_FW:
        _SIM_FW[chip] = fwcheck.PinnedFirmware(by_name(chip), read=files.__getitem__)
    return _SIM_FW[chip]


# -- the run ----------------------------------------------------------------------------------------------------
def load_pinned() -> dict[str, bytes]:
    store = FirmwareStore()
    return store.read_all(sorted(PINS))


def run(seed: int, budget: int, boots: int, device: str = "am:sim", parse_timeout: float = 2.0,
        boot_timeout: float = 60.0, unpinned_on_hardware: bool = False, progress=None) -> tuple[Tally, Tally]:
    files = load_pinned()
    reference = {n: received(parse(n, b)) for n, b in files.items()}
    names = sorted(files)
    parsed = Tally("firmware parse")
    for i in range(budget):
        case = make_case(seed, i, files, names)
        outcome, detail, bad = parse_outcome(case, reference, parse_timeout)
        parsed.add(case.mutation, outcome, detail,
                   Finding(seed, i, case.label, outcome, detail) if bad else None)
        if progress and i % 10000 == 9999:
            progress(f"parse: {i + 1}/{budget} cases, {len(parsed.findings)} unexpected")
    booted = Tally("firmware boot")
    chip = sim_chip(device)
    boot_names = files_for(by_name(chip or "navi31"))
    on_hw = chip is None
    for j in range(boots):
        case = make_case(seed, budget + j, files, boot_names)
        pinned = j % 10 == 9 or (on_hw and not unpinned_on_hardware)
        outcome, detail, bad = boot_outcome(case, files, reference, device, pinned, boot_timeout)
        booted.add(case.mutation, outcome, detail,
                   Finding(seed, budget + j, case.label + (" (override directory)" if pinned else ""), outcome,
                           detail) if bad else None)
        if progress and j % 100 == 99:
            progress(f"boot: {j + 1}/{boots} cases, {len(booted.findings)} unexpected")
    return parsed, booted


def replay(seed: int, index: int, budget: int, device: str) -> int:
    """One case again: its mutation, the parse's outcome with a full traceback, and a boot of it."""
    files = load_pinned()
    chip = sim_chip(device)
    names = sorted(files) if index < budget else files_for(by_name(chip or "navi31"))
    case = make_case(seed, index, files, names)
    print(f"case {seed}:{index}: {case.label}")
    try:
        parse(case.file, case.data)
        print("parse: accepted")
    except FirmwareError as e:
        print(f"parse: FirmwareError: {e}")
    except Exception:   # noqa: BLE001
        traceback.print_exc()
    reference = {n: received(parse(n, b)) for n, b in files.items()}
    if case.file in files_for(by_name(chip or "navi31")):
        print("boot:", *boot_outcome(case, files, reference, device, False, 60.0)[:2])
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.fuzz.firmware", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, budget=2000)
    ap.add_argument("--boots", type=int, default=40, help="boot-stage cases (default 40)")
    ap.add_argument("--parse-timeout", type=float, default=2.0)
    ap.add_argument("--boot-timeout", type=float, default=60.0)
    ap.add_argument("--unpinned-on-hardware", action="store_true",
                    help="on a real GPU, hand mutated payloads to its PSP (default: override directory only)")
    ap.add_argument("--replay", metavar="SEED:CASE", help="run one case again and show its traceback")
    args = ap.parse_args(argv)
    if args.replay:
        seed, _, index = args.replay.partition(":")
        return replay(int(seed), int(index), args.budget, args.device)
    try:
        t0 = time.monotonic()
        parsed, booted = run(args.seed, args.budget, args.boots, args.device, args.parse_timeout, args.boot_timeout,
                             args.unpinned_on_hardware, progress=lambda s: print(s, file=sys.stderr, flush=True))
    except FirmwareError as e:
        print(f"fuzz firmware: the pinned files are needed as the starting point: {e}", file=sys.stderr)
        return 2
    print(parsed.table())
    print()
    print(booted.table())
    bad = len(parsed.findings) + len(booted.findings)
    print(f"\nseed {args.seed}: {parsed.cases} parser cases, {booted.cases} boots on {args.device}, "
          f"{bad} unexpected, {time.monotonic() - t0:.1f} s")
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "device": args.device,
                       "parse": {"counts": {f"{g}|{o}": n for (g, o), n in parsed.counts.items()},
                                 "unexpected": [vars(x) for x in parsed.findings]},
                       "boot": {"counts": {f"{g}|{o}": n for (g, o), n in booted.counts.items()},
                                "unexpected": [vars(x) for x in booted.findings]}}, f, indent=2)
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("DRIVERLESS_OFFLINE", "1")
    sys.exit(main())
