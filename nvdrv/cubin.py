"""A cubin (the ELF NVRTC and ptxas write for one SM) read with pyelftools: what a launch needs.

    cubin = parse_cubin(data, path="saxpy.cubin", sm=90)   # sm: the GPU's; refuses a cubin it cannot run
    k = cubin.kernels["saxpy"]
    k.code, k.registers, k.shared_size, k.const0_size, k.param_base, k.params, k.max_threads
    k.arg_entries()          # [(offset, size, "untyped"), ...]: the kernel's parameters for hcq's ArgLayout

Bad input raises `CubinError` (a ValueError) naming the file and the field at fault.

Where the facts come from (no NVIDIA document describes the format; nothing here is copied code):
- ELF header: e_machine EM_CUDA (190, in the ELF registry and pyelftools); EI_OSABI 0x33 with
  EI_ABIVERSION 7 (what NVRTC 12.9 writes for sm_50..sm_90a): the SM in e_flags bits 0-7, the virtual
  (PTX) architecture in bits 16-23, 0x400 "64-bit addresses", 0x800 set for an arch-specific target
  (sm_90a); EI_OSABI 0x41 with EI_ABIVERSION 8 (NVRTC 12.9 for sm_100 and later, NVRTC 13.5 for every SM,
  sm_90 included): the SM in bits 8-15, 0x8 set for sm_100a by NVRTC 12.9 (NVRTC 13.5 sets no bit we could
  find for an arch-specific target). Observed by compiling one source for each target with NVRTC 12.9 and
  13.5 and comparing the headers; the rest of this module reads both versions' cubins alike.
- `.nv.info` sections (ELF type SHT_LOPROC 0x70000000) hold EIATTR records: a format byte (EIFMT_NVAL 1,
  EIFMT_BVAL 2, EIFMT_HVAL 3: a 16-bit value follows; EIFMT_SVAL 4: a 16-bit size, then that many bytes),
  an attribute byte, then the value. Attribute numbers and names are those `cuobjdump -elf` prints (and
  public cubin readers list, e.g. VivekPanyam/cudaparsers); the values were checked against NVRTC 12.9
  output for kernels whose parameters, launch bounds and shared memory are known.
  EIATTR_KPARAM_INFO (0x17, SVAL 12 bytes): u32 index, u16 ordinal, u16 offset, u32 whose bits 0-7 are the
  pointee's log2 alignment, bits 8-11 the space, bits 12-16 the cbank, bit 17 set when the parameter is
  not in the constant bank, bits 18-31 the size in bytes. EIATTR_PARAM_CBANK (0x0a, SVAL 8): u32 symbol
  index of `.nv.constant0.<kernel>`, u16 offset of the parameters in constant bank 0 (0x210 on sm_90),
  u16 their size. EIATTR_CBANK_PARAM_SIZE (0x19, HVAL). EIATTR_MAX_THREADS (0x05, SVAL 3 x u32:
  `__launch_bounds__`' maximum), EIATTR_REQNTID (0x10, SVAL 3 x u32), EIATTR_MAXREG_COUNT (0x1b, HVAL),
  EIATTR_EXIT_INSTR_OFFSETS (0x1c) and EIATTR_S2RCTAID_INSTR_OFFSETS (0x1d) (SVAL, u32 byte offsets in
  .text), EIATTR_CUDA_API_VERSION (0x37, SVAL u32). In the module-wide `.nv.info`: EIATTR_REGCOUNT
  (0x2f), EIATTR_FRAME_SIZE (0x11), EIATTR_MIN_STACK_SIZE (0x12), each SVAL (u32 symbol index, u32 value).
- Registers: EIATTR_REGCOUNT where the cubin has it (sm_90 with NVRTC 12.9), else bits 24-31 of the
  `.text.<kernel>` section's sh_info (sm_80 and older cubins); barriers: bits 20-26 of its sh_flags.
  Observed in NVRTC 12.9 output.
- `.nv.shared.<kernel>`: the kernel's static shared memory (SHT_NOBITS). On sm_90 it includes the 1 KiB
  the CUDA toolchain reserves at the start of shared memory for its own use (`.nv.shared.reserved.0`):
  observed, a kernel with 512 bytes of `__shared__` has a 1536-byte section.
- `.nv.constant0.<kernel>`: constant bank 0 as the kernel sees it (driver area, then the parameters at
  EIATTR_PARAM_CBANK's offset); `.nv.constant<N>` without a kernel name and `.nv.global*` are module data
  (`__constant__`, `__device__` variables), which need `.rela*` relocations a loader must apply.
Compatibility (CUDA C Programming Guide, "Binary Compatibility"): a cubin for sm_XY runs on a GPU of
compute capability X.Z with Z >= Y; an arch-specific cubin (sm_90a) runs only on exactly that one.
"""
from __future__ import annotations

import io
import sys
import struct
from dataclasses import dataclass, field

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

EM_CUDA = 190
SHT_CUDA_INFO = 0x70000000

# EIFMT_* record formats.
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4
# EIATTR_* attribute numbers (names as cuobjdump -elf prints them); only those this module reads are named
# constants, the rest appear by number in CubinKernel.attributes.
EIATTR_MAX_THREADS = 0x05
EIATTR_PARAM_CBANK = 0x0A
EIATTR_REQNTID = 0x10
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19
EIATTR_MAXREG_COUNT = 0x1B
EIATTR_EXIT_INSTR_OFFSETS = 0x1C
EIATTR_S2RCTAID_INSTR_OFFSETS = 0x1D
EIATTR_REGCOUNT = 0x2F
EIATTR_CUDA_API_VERSION = 0x37
EIATTR_NAMES = {
    0x04: "EIATTR_CTAIDZ_USED", EIATTR_MAX_THREADS: "EIATTR_MAX_THREADS", EIATTR_PARAM_CBANK: "EIATTR_PARAM_CBANK",
    0x0D: "EIATTR_SYNC_STACK", 0x0F: "EIATTR_EXTERNS", EIATTR_REQNTID: "EIATTR_REQNTID",
    EIATTR_FRAME_SIZE: "EIATTR_FRAME_SIZE", EIATTR_MIN_STACK_SIZE: "EIATTR_MIN_STACK_SIZE",
    EIATTR_KPARAM_INFO: "EIATTR_KPARAM_INFO", 0x18: "EIATTR_SMEM_PARAM_SIZE",
    EIATTR_CBANK_PARAM_SIZE: "EIATTR_CBANK_PARAM_SIZE", EIATTR_MAXREG_COUNT: "EIATTR_MAXREG_COUNT",
    EIATTR_EXIT_INSTR_OFFSETS: "EIATTR_EXIT_INSTR_OFFSETS", EIATTR_S2RCTAID_INSTR_OFFSETS:
    "EIATTR_S2RCTAID_INSTR_OFFSETS", 0x1E: "EIATTR_CRS_STACK_SIZE", 0x23: "EIATTR_MAX_STACK_SIZE",
    0x28: "EIATTR_COOP_GROUP_INSTR_OFFSETS", EIATTR_REGCOUNT: "EIATTR_REGCOUNT",
    0x34: "EIATTR_INDIRECT_BRANCH_TARGETS", 0x36: "EIATTR_SW_WAR", EIATTR_CUDA_API_VERSION: "EIATTR_CUDA_API_VERSION",
}
_KPARAM_NOT_CBANK = 1 << 17


class CubinError(ValueError):
    """A cubin this loader cannot use; the message names the file and the field."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its ordinal in the signature, byte offset in the parameter block, size."""
    ordinal: int
    offset: int
    size: int
    log_align: int = 0


@dataclass(frozen=True)
class Attribute:
    """One EIATTR record: format, attribute number, value (an int for NVAL/BVAL/HVAL, bytes for SVAL)."""
    fmt: int
    attr: int
    value: int | bytes

    @property
    def name(self) -> str:
        return EIATTR_NAMES.get(self.attr, f"EIATTR_0x{self.attr:02x}")


@dataclass(frozen=True)
class CubinKernel:
    name: str
    code: bytes                     # .text.<name>: the SASS, entry at offset 0
    registers: int                  # per thread
    barriers: int                   # named barriers used
    shared_size: int                # static shared memory (.nv.shared.<name>), bytes
    const0_size: int                # constant bank 0 as the kernel sees it (.nv.constant0.<name>), bytes
    const0: bytes                   # its initial contents (the launch writes the parameters at param_base)
    param_base: int                 # offset of the parameters in constant bank 0
    param_size: int                 # bytes of parameters
    params: tuple[Param, ...]       # by ordinal
    max_threads: tuple[int, int, int] | None = None     # __launch_bounds__ maximum (EIATTR_MAX_THREADS)
    reqntid: tuple[int, int, int] | None = None         # required block size (EIATTR_REQNTID)
    max_reg_count: int | None = None
    frame_size: int = 0             # per-thread stack frame (local memory), bytes
    min_stack_size: int = 0
    exit_offsets: tuple[int, ...] = ()
    s2rctaid_offsets: tuple[int, ...] = ()
    cuda_api_version: int | None = None
    attributes: tuple[Attribute, ...] = field(default=(), repr=False)

    def arg_entries(self) -> list[tuple[int, int, str]]:
        """(offset, size, kind) per parameter in ordinal order, as hcq's argument layouts take them. A
        cubin gives no types, so every kind is "untyped": a pointer and an 8-byte integer look alike."""
        return [(p.offset, p.size, "untyped") for p in self.params]

    def check_block(self, block: tuple[int, int, int]) -> None:
        """Raises CubinError when a launch's block size breaks the kernel's launch bounds."""
        threads = block[0] * block[1] * block[2]
        if self.reqntid and tuple(block) != self.reqntid:
            raise CubinError(f"kernel {self.name}: block {tuple(block)} but the cubin requires {self.reqntid} "
                             "(EIATTR_REQNTID)")
        if self.max_threads:
            limit = self.max_threads[0] * self.max_threads[1] * self.max_threads[2]
            if threads > limit:
                raise CubinError(f"kernel {self.name}: block {tuple(block)} has {threads} threads, more than its "
                                 f"__launch_bounds__ allow ({limit}, EIATTR_MAX_THREADS)")


@dataclass(frozen=True)
class Cubin:
    path: str
    sm: int                         # e.g. 90
    virtual_sm: int | None          # the PTX architecture it came from, when the header says
    arch_specific: bool             # sm_90a-style: runs only on exactly this SM
    abi_version: int
    kernels: dict[str, CubinKernel]
    module_sections: dict[str, int]          # module data (.nv.constant3, .nv.global, ...): name -> size
    relocations: dict[str, int]              # .rela*/.rel* sections for code or data: name -> entries

    @property
    def arch(self) -> str:
        return f"sm_{self.sm}{'a' if self.arch_specific else ''}"

    def kernel(self, name: str) -> CubinKernel:
        try:
            return self.kernels[name]
        except KeyError:
            raise CubinError(f"{self.path}: no kernel {name!r} (kernels: {', '.join(sorted(self.kernels)) or 'none'})"
                             ) from None

    def runs_on(self, sm: int) -> bool:
        if self.arch_specific:
            return sm == self.sm
        return sm // 10 == self.sm // 10 and sm % 10 >= self.sm % 10


def _u32s(path, where, value: bytes) -> tuple[int, ...]:
    if len(value) % 4:
        raise CubinError(f"{path}: {where}: {len(value)} bytes is not a list of 32-bit values")
    return struct.unpack(f"<{len(value) // 4}I", value)


def parse_attributes(data: bytes, path: str = "<cubin>", section: str = ".nv.info") -> list[Attribute]:
    """The EIATTR records of one .nv.info section."""
    out, at = [], 0
    while at < len(data):
        if at + 4 > len(data):
            raise CubinError(f"{path}: {section}: record at byte {at} is cut short ({len(data) - at} bytes left)")
        fmt, attr, value = struct.unpack_from("<BBH", data, at)
        if fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            out.append(Attribute(fmt, attr, value))
            at += 4
        elif fmt == EIFMT_SVAL:
            if at + 4 + value > len(data):
                raise CubinError(f"{path}: {section}: {EIATTR_NAMES.get(attr, hex(attr))} at byte {at} says "
                                 f"{value} bytes but the section ends {len(data) - at - 4} bytes later")
            out.append(Attribute(fmt, attr, bytes(data[at + 4:at + 4 + value])))
            at += 4 + value
        else:
            raise CubinError(f"{path}: {section}: record at byte {at} has format {fmt}, not an EIFMT (1..4)")
    return out


def _sm_from_header(path, elf) -> tuple[int, int | None, bool, int]:
    ident, flags = elf.header.e_ident, elf.header.e_flags
    osabi = ident["EI_OSABI"]
    osabi = osabi if isinstance(osabi, int) else {"ELFOSABI_CUDA": 0x33}.get(osabi, osabi)
    abi = ident["EI_ABIVERSION"]
    if abi == 7:
        return flags & 0xFF, (flags >> 16) & 0xFF or None, bool(flags & 0x800), abi
    if abi == 8:
        return (flags >> 8) & 0xFF, None, bool(flags & 0x8), abi
    raise CubinError(f"{path}: ELF EI_ABIVERSION {abi} (EI_OSABI {osabi}) is not a cubin ABI this loader knows "
                     "(7: sm_50..sm_90a, 8: sm_100 and later)")


def parse_cubin(data: bytes, path: str = "<cubin>", sm: int | None = None) -> Cubin:
    """The kernels of a cubin. `sm` (e.g. 90): the GPU it is for; a cubin that cannot run there is refused."""
    data = bytes(data)
    if data[:4] != b"\x7fELF":
        raise CubinError(f"{path}: not an ELF file (starts {data[:4]!r}): not a cubin")
    try:
        elf = ELFFile(io.BytesIO(data))
        if elf.header.e_machine not in ("EM_CUDA", EM_CUDA):
            raise CubinError(f"{path}: ELF e_machine {elf.header.e_machine}, not EM_CUDA: not a cubin")
        if elf.elfclass != 64:
            raise CubinError(f"{path}: a {elf.elfclass}-bit ELF; cubins for 64-bit hosts are ELF64")
        sm_, vsm, specific, abi = _sm_from_header(path, elf)
        h = elf.header
        for what, off, n, size in (("section headers", h.e_shoff, h.e_shnum, h.e_shentsize),
                                   ("program headers", h.e_phoff, h.e_phnum, h.e_phentsize)):
            if off + n * size > len(data):
                raise CubinError(f"{path}: the {what} (bytes {off}..{off + n * size}) run past the end of the file "
                                 f"({len(data)} bytes): truncated")
        sections = {}
        for i in range(elf.num_sections()):
            s = elf.get_section(i)
            end = s["sh_offset"] + (0 if s["sh_type"] == "SHT_NOBITS" else s["sh_size"])
            if end > len(data):
                raise CubinError(f"{path}: section {s.name or i} (bytes {s['sh_offset']}..{end}) runs past the end "
                                 f"of the file ({len(data)} bytes): truncated")
            sections[s.name] = (i, s)
        cubin = _read(path, elf, sections, sm_, vsm, specific, abi)
    except ELFError as e:
        raise CubinError(f"{path}: malformed ELF ({e}): truncated or not a cubin") from None
    except (struct.error, IndexError, KeyError, UnicodeDecodeError) as e:
        raise CubinError(f"{path}: malformed ELF ({type(e).__name__}: {e}): truncated or not a cubin") from None
    if sm is not None and not cubin.runs_on(sm):
        raise CubinError(f"{path}: built for {cubin.arch}, which cannot run on an sm_{sm} GPU (compute capability "
                         f"{sm // 10}.{sm % 10}); compile for sm_{sm} (nvdrv.nvrtc.compile_cuda(..., arch='sm_{sm}'))")
    return cubin


def _read(path, elf, sections, sm_, vsm, specific, abi) -> Cubin:
    symtab = elf.get_section_by_name(".symtab")
    if symtab is None:
        raise CubinError(f"{path}: no .symtab: a cubin names its kernels there")
    symbols = list(symtab.iter_symbols())
    module_attrs = parse_attributes(sections[".nv.info"][1].data(), path) if ".nv.info" in sections else []
    per_symbol: dict[tuple[int, int], int] = {}
    for a in module_attrs:
        if a.attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE) and a.fmt == EIFMT_SVAL:
            sym, value = _u32s(path, f".nv.info {a.name}", a.value)[:2]
            per_symbol[(a.attr, sym)] = value
    texts = [n[len(".text."):] for n in sections if n.startswith(".text.")]
    infos = [n[len(".nv.info."):] for n in sections if n.startswith(".nv.info.")]
    if texts and not infos:
        raise CubinError(f"{path}: .text.{texts[0]} but no .nv.info.<kernel> section: the parameter records "
                         "(EIATTR_KPARAM_INFO) every kernel needs are missing")
    kernels = {}
    for name in infos:
        if f".text.{name}" not in sections:
            raise CubinError(f"{path}: .nv.info.{name} describes a kernel with no .text.{name} section (no code)")
        kernels[name] = _kernel(path, name, sections, symbols, per_symbol)
    module, relocs = {}, {}
    for n, (_, s) in sections.items():
        if n.startswith((".rela", ".rel.")) and not n.endswith(".debug_frame") and s["sh_size"]:
            relocs[n] = s["sh_size"] // max(s["sh_entsize"], 1)
        if (n.startswith(".nv.constant") and not n.startswith(".nv.constant0.")) or n.startswith(".nv.global"):
            module[n] = s["sh_size"]
    return Cubin(path, sm_, vsm, specific, abi, kernels, module, relocs)


def _kernel(path, name, sections, symbols, per_symbol) -> CubinKernel:
    tindex, text = sections[f".text.{name}"]
    sym_index = next((i for i, s in enumerate(symbols) if s.name == name and s["st_info"]["type"] == "STT_FUNC"
                      and s["st_shndx"] == tindex), None)
    if sym_index is None:
        raise CubinError(f"{path}: kernel {name}: no function symbol {name!r} in .symtab for .text.{name}")
    where = f".nv.info.{name}"
    attrs = parse_attributes(sections[where][1].data(), path, where)
    one: dict[int, Attribute] = {}
    params = []
    for a in attrs:
        if a.attr == EIATTR_KPARAM_INFO:
            if a.fmt != EIFMT_SVAL or len(a.value) != 12:
                raise CubinError(f"{path}: {where}: EIATTR_KPARAM_INFO of {len(a.value) if a.fmt == EIFMT_SVAL else 0}"
                                 " bytes; the record is 12 (index, ordinal, offset, flags)")
            _, ordinal, offset, flags = struct.unpack("<IHHI", a.value)
            if flags & _KPARAM_NOT_CBANK:
                raise CubinError(f"{path}: {where}: parameter {ordinal} is not passed in the constant bank "
                                 "(EIATTR_KPARAM_INFO flags); this loader passes parameters in constant bank 0 only")
            params.append(Param(ordinal, offset, flags >> 18, flags & 0xFF))
        else:
            one.setdefault(a.attr, a)
    params.sort(key=lambda p: p.ordinal)
    if [p.ordinal for p in params] != list(range(len(params))):
        raise CubinError(f"{path}: {where}: EIATTR_KPARAM_INFO ordinals {[p.ordinal for p in params]} are not "
                         f"0..{len(params) - 1} once each")
    param_size = _hval(path, where, one.get(EIATTR_CBANK_PARAM_SIZE), 0)
    param_base = 0
    if EIATTR_PARAM_CBANK in one:
        a = one[EIATTR_PARAM_CBANK]
        if a.fmt != EIFMT_SVAL or len(a.value) != 8:
            raise CubinError(f"{path}: {where}: EIATTR_PARAM_CBANK is not 8 bytes (symbol, offset, size)")
        _, param_base, cbank_size = struct.unpack("<IHH", a.value)
        if EIATTR_CBANK_PARAM_SIZE in one and cbank_size != param_size:
            raise CubinError(f"{path}: {where}: EIATTR_PARAM_CBANK says {cbank_size} bytes of parameters, "
                             f"EIATTR_CBANK_PARAM_SIZE {param_size}")
        param_size = cbank_size
    elif params:
        raise CubinError(f"{path}: {where}: {len(params)} parameters but no EIATTR_PARAM_CBANK (where in constant "
                         "bank 0 they go)")
    at = 0
    for p in sorted(params, key=lambda p: p.offset):
        if p.size == 0 or p.offset < at or p.offset + p.size > param_size:
            raise CubinError(f"{path}: {where}: EIATTR_KPARAM_INFO parameter {p.ordinal} (offset {p.offset}, size "
                             f"{p.size}) overlaps another or lies outside the {param_size}-byte parameter block")
        at = p.offset + p.size
    c0 = sections.get(f".nv.constant0.{name}")
    const0 = c0[1].data() if c0 else b""
    if param_size and param_base + param_size > len(const0):
        raise CubinError(f"{path}: kernel {name}: parameters at constant bank 0 bytes {param_base}..{param_base + param_size}"
                         f" but .nv.constant0.{name} has {len(const0)} bytes")
    sh = sections.get(f".nv.shared.{name}")
    regs = per_symbol.get((EIATTR_REGCOUNT, sym_index), text["sh_info"] >> 24)
    return CubinKernel(
        name=name, code=text.data(), registers=regs, barriers=(text["sh_flags"] >> 20) & 0x7F,
        shared_size=sh[1]["sh_size"] if sh else 0, const0_size=len(const0), const0=const0,
        param_base=param_base, param_size=param_size, params=tuple(params),
        max_threads=_dim3(path, where, one.get(EIATTR_MAX_THREADS)), reqntid=_dim3(path, where, one.get(EIATTR_REQNTID)),
        max_reg_count=_hval(path, where, one.get(EIATTR_MAXREG_COUNT), None),
        frame_size=per_symbol.get((EIATTR_FRAME_SIZE, sym_index), 0),
        min_stack_size=per_symbol.get((EIATTR_MIN_STACK_SIZE, sym_index), 0),
        exit_offsets=_offsets(path, where, one.get(EIATTR_EXIT_INSTR_OFFSETS)),
        s2rctaid_offsets=_offsets(path, where, one.get(EIATTR_S2RCTAID_INSTR_OFFSETS)),
        cuda_api_version=(_u32s(path, where, one[EIATTR_CUDA_API_VERSION].value)[0]
                          if EIATTR_CUDA_API_VERSION in one and one[EIATTR_CUDA_API_VERSION].fmt == EIFMT_SVAL else None),
        attributes=tuple(attrs))


def _hval(path, where, a, default):
    if a is None:
        return default
    if a.fmt != EIFMT_HVAL:
        raise CubinError(f"{path}: {where}: {a.name} has format {a.fmt}, expected EIFMT_HVAL (3)")
    return a.value


def _dim3(path, where, a):
    if a is None:
        return None
    if a.fmt != EIFMT_SVAL or len(a.value) != 12:
        raise CubinError(f"{path}: {where}: {a.name} is not three 32-bit values")
    return tuple(_u32s(path, where, a.value))


def _offsets(path, where, a):
    if a is None:
        return ()
    if a.fmt != EIFMT_SVAL:
        raise CubinError(f"{path}: {where}: {a.name} has format {a.fmt}, expected EIFMT_SVAL (4)")
    return _u32s(path, f"{where} {a.name}", a.value)


def describe(c: Cubin) -> str:
    """A cubin's kernels as text: what `python -m nvdrv.cubin FILE` prints."""
    lines = [f"{c.path}: {c.arch} (ELF ABI {c.abi_version}), {len(c.kernels)} kernel(s)"]
    if c.module_sections:
        lines.append("  module data: " + ", ".join(f"{n} {s} B" for n, s in sorted(c.module_sections.items())))
    if c.relocations:
        lines.append("  relocations: " + ", ".join(f"{n} ({k})" for n, k in sorted(c.relocations.items())))
    for k in c.kernels.values():
        bounds = f", launch bounds {k.max_threads}" if k.max_threads else ""
        lines.append(f"  {k.name}: {len(k.code)} B code, {k.registers} registers, {k.barriers} barriers, "
                     f"{k.shared_size} B shared, {k.frame_size} B stack{bounds}")
        lines.append(f"    constant bank 0: {k.const0_size} B, parameters at 0x{k.param_base:x} ({k.param_size} B): "
                     + (", ".join(f"#{p.ordinal} @{p.offset}+{p.size}" for p in k.params) or "none"))
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m nvdrv.cubin", description="Show a cubin's kernels: code size, "
                                 "registers, shared memory, constant bank 0 and parameter layout.")
    ap.add_argument("files", nargs="+", help="cubin files (NVRTC or ptxas output)")
    ap.add_argument("--sm", type=int, help="the GPU's SM (e.g. 90): refuse a cubin that cannot run there")
    args = ap.parse_args(argv)
    rc = 0
    for f in args.files:
        try:
            with open(f, "rb") as fh:
                print(describe(parse_cubin(fh.read(), f, args.sm)))
        except (OSError, CubinError) as e:
            print(f"error: {e}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
