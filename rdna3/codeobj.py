"""AMDHSA code objects: read the ones clang/lld make, and write our own.

A code object is an ELF64 shared object (EM_AMDGPU, OS/ABI AMDGPU_HSA) holding, per kernel, a
function symbol `name` in .text, a 64-byte kernel descriptor `name.kd` in .rodata, and one
NT_AMDGPU_METADATA note whose payload is a msgpack map (`amdhsa.kernels`, `amdhsa.target`, ...).
Field layouts follow LLVM's AMDGPUUsage ("Kernel Descriptor", "Code Object V3+ Metadata").
"""
from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field

import msgpack
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
ELFABIVERSION_AMDGPU_HSA_V4 = 2
NT_AMDGPU_METADATA = 32
KD_SIZE = 64
S_CODE_END = bytes([0x00, 0x00, 0x9F, 0xBF])

# e_flags EF_AMDGPU_MACH values of the targets we handle.
MACH = {"gfx1100": 0x041, "gfx1101": 0x046, "gfx1102": 0x047}
MACH_NAME = {v: k for k, v in MACH.items()}
EF_AMDGPU_MACH = 0x0FF


class CodeObjectError(ValueError):
    """A file that is not a usable AMDHSA code object, or a kernel it does not contain."""


def _fields(table, value):
    return {name: (value >> lo) & ((1 << width) - 1) for name, lo, width in table}


def _pack(table, fields, what):
    value = 0
    for name, lo, width in table:
        v = int(fields.get(name, 0))
        if not 0 <= v < (1 << width):
            raise ValueError(f"{what}.{name}={v} does not fit in {width} bits")
        value |= v << lo
    unknown = set(fields) - {name for name, _, _ in table}
    if unknown:
        raise ValueError(f"{what}: unknown fields {sorted(unknown)}")
    return value


# (field, low bit, width), gfx10+/gfx11 meaning of each bit range.
RSRC1 = (
    ("granulated_workitem_vgpr_count", 0, 6),
    ("granulated_wavefront_sgpr_count", 6, 4),
    ("priority", 10, 2),
    ("float_round_mode_32", 12, 2),
    ("float_round_mode_16_64", 14, 2),
    ("float_denorm_mode_32", 16, 2),
    ("float_denorm_mode_16_64", 18, 2),
    ("priv", 20, 1),
    ("enable_dx10_clamp", 21, 1),
    ("debug_mode", 22, 1),
    ("enable_ieee_mode", 23, 1),
    ("bulky", 24, 1),
    ("cdbg_user", 25, 1),
    ("fp16_ovfl", 26, 1),
    ("wgp_mode", 29, 1),
    ("mem_ordered", 30, 1),
    ("fwd_progress", 31, 1),
)
RSRC2 = (
    ("enable_private_segment", 0, 1),
    ("user_sgpr_count", 1, 5),
    ("enable_trap_handler", 6, 1),
    ("enable_sgpr_workgroup_id_x", 7, 1),
    ("enable_sgpr_workgroup_id_y", 8, 1),
    ("enable_sgpr_workgroup_id_z", 9, 1),
    ("enable_sgpr_workgroup_info", 10, 1),
    ("enable_vgpr_workitem_id", 11, 2),
    ("enable_exception_address_watch", 13, 1),
    ("enable_exception_memory", 14, 1),
    ("granulated_lds_size", 15, 9),
    ("enable_exception_ieee_754_fp_invalid_operation", 24, 1),
    ("enable_exception_fp_denormal_source", 25, 1),
    ("enable_exception_ieee_754_fp_division_by_zero", 26, 1),
    ("enable_exception_ieee_754_fp_overflow", 27, 1),
    ("enable_exception_ieee_754_fp_underflow", 28, 1),
    ("enable_exception_ieee_754_fp_inexact", 29, 1),
    ("enable_exception_int_divide_by_zero", 30, 1),
)
RSRC3 = (
    ("shared_vgpr_count", 0, 4),
    ("inst_pref_size", 4, 6),
    ("trap_on_start", 10, 1),
    ("trap_on_end", 11, 1),
    ("image_op", 31, 1),
)
# kernel_code_properties: the user SGPRs the kernel expects, in this (load) order, and their sizes.
USER_SGPRS = (
    ("enable_sgpr_private_segment_buffer", 0, 4),
    ("enable_sgpr_dispatch_ptr", 1, 2),
    ("enable_sgpr_queue_ptr", 2, 2),
    ("enable_sgpr_kernarg_segment_ptr", 3, 2),
    ("enable_sgpr_dispatch_id", 4, 2),
    ("enable_sgpr_flat_scratch_init", 5, 2),
    ("enable_sgpr_private_segment_size", 6, 1),
)
CODE_PROPERTIES = tuple((name, bit, 1) for name, bit, _ in USER_SGPRS) + (
    ("enable_wavefront_size32", 10, 1),
    ("uses_dynamic_stack", 11, 1),
)


@dataclass
class KernelDescriptor:
    """The 64-byte kernel descriptor; the packed registers are also available decoded."""

    group_segment_fixed_size: int = 0
    private_segment_fixed_size: int = 0
    kernarg_size: int = 0
    kernel_code_entry_byte_offset: int = 0
    compute_pgm_rsrc1: int = 0
    compute_pgm_rsrc2: int = 0
    compute_pgm_rsrc3: int = 0
    kernel_code_properties: int = 0

    _FMT = "<IIIIq20sIIIH6s"

    @classmethod
    def from_bytes(cls, data: bytes) -> "KernelDescriptor":
        if len(data) < KD_SIZE:
            raise CodeObjectError(f"kernel descriptor is {len(data)} bytes, needs {KD_SIZE}")
        g, p, ka, _, entry, _, r3, r1, r2, props, _ = struct.unpack(cls._FMT, bytes(data[:KD_SIZE]))
        return cls(g, p, ka, entry, r1, r2, r3, props)

    def to_bytes(self) -> bytes:
        return struct.pack(self._FMT, self.group_segment_fixed_size, self.private_segment_fixed_size,
                           self.kernarg_size, 0, self.kernel_code_entry_byte_offset, b"",
                           self.compute_pgm_rsrc3, self.compute_pgm_rsrc1, self.compute_pgm_rsrc2,
                           self.kernel_code_properties, b"")

    @property
    def rsrc1(self) -> dict:
        return _fields(RSRC1, self.compute_pgm_rsrc1)

    @property
    def rsrc2(self) -> dict:
        return _fields(RSRC2, self.compute_pgm_rsrc2)

    @property
    def rsrc3(self) -> dict:
        return _fields(RSRC3, self.compute_pgm_rsrc3)

    @property
    def properties(self) -> dict:
        return _fields(CODE_PROPERTIES, self.kernel_code_properties)

    @property
    def wave32(self) -> bool:
        return bool(self.properties["enable_wavefront_size32"])

    def user_sgpr_layout(self) -> list[tuple[str, int, int]]:
        """[(name without the enable_sgpr_ prefix, first SGPR, count)] as the hardware loads them."""
        props, out, at = self.properties, [], 0
        for name, _, count in USER_SGPRS:
            if props[name]:
                out.append((name[len("enable_sgpr_"):], at, count))
                at += count
        return out

    @property
    def vgpr_count(self) -> int:
        """VGPRs allocated per work-item (granule 8 in wave32, 4 in wave64 on gfx10+)."""
        granule = 8 if self.wave32 else 4
        return (self.rsrc1["granulated_workitem_vgpr_count"] + 1) * granule


@dataclass
class KernelArg:
    offset: int
    size: int
    value_kind: str
    address_space: str | None = None
    name: str | None = None


@dataclass
class Kernel:
    name: str
    descriptor: KernelDescriptor
    descriptor_address: int
    code_address: int       # virtual address of the first instruction
    code: bytes             # the kernel's function symbol (padding after s_endpgm included)
    metadata: dict          # this kernel's entry of amdhsa.kernels, keys as in the note

    @property
    def args(self) -> list[KernelArg]:
        return [KernelArg(a[".offset"], a[".size"], a[".value_kind"], a.get(".address_space"),
                          a.get(".name")) for a in self.metadata.get(".args", [])]

    @property
    def kernarg_size(self) -> int:
        return self.metadata.get(".kernarg_segment_size", self.descriptor.kernarg_size)


class CodeObject:
    """A loaded AMDHSA code object: its kernels and its loadable image by virtual address."""

    def __init__(self, data: bytes, source: str = "<bytes>"):
        self.data = bytes(data)
        self.source = source
        try:
            elf = ELFFile(io.BytesIO(self.data))
            self._read(elf)
        except (ELFError, struct.error, EOFError) as e:
            raise CodeObjectError(f"{source}: not a readable ELF code object ({e}); "
                                  "truncated or not an ELF file") from e

    @classmethod
    def load(cls, path) -> "CodeObject":
        with open(path, "rb") as f:
            return cls(f.read(), str(path))

    def _read(self, elf: ELFFile):
        h = elf.header
        if h["e_machine"] != "EM_AMDGPU" and h["e_machine"] != EM_AMDGPU:
            raise CodeObjectError(f"{self.source}: ELF machine is {h['e_machine']}, not EM_AMDGPU; "
                                  "compile with -target amdgcn-amd-amdhsa")
        # pyelftools names OS/ABI 64 after ARM, so read the byte itself.
        if self.data[7] != ELFOSABI_AMDGPU_HSA:
            raise CodeObjectError(f"{self.source}: OS/ABI {self.data[7]} is not AMDGPU_HSA (64)")
        self.abi_version = h["e_ident"]["EI_ABIVERSION"]
        self.arch = MACH_NAME.get(h["e_flags"] & EF_AMDGPU_MACH, f"mach{h['e_flags'] & EF_AMDGPU_MACH:#x}")
        end = max((seg["p_offset"] + seg["p_filesz"] for seg in elf.iter_segments()), default=0)
        end = max([end] + [s["sh_offset"] + s["sh_size"] for s in elf.iter_sections()
                           if s["sh_type"] != "SHT_NOBITS"])
        if end > len(self.data):
            raise CodeObjectError(f"{self.source}: truncated: contents reach byte {end} "
                                  f"but the file has {len(self.data)}")
        self.segments = [(seg["p_vaddr"], seg["p_offset"], seg["p_filesz"], seg["p_memsz"])
                         for seg in elf.iter_segments() if seg["p_type"] == "PT_LOAD"]
        self.metadata = {}
        for sec in elf.iter_sections():
            if sec["sh_type"] != "SHT_NOTE":
                continue
            for note in sec.iter_notes():
                if note["n_name"] == "AMDGPU" and note["n_type"] in (NT_AMDGPU_METADATA, "NT_AMDGPU_METADATA"):
                    desc = note["n_desc"]
                    raw = desc if isinstance(desc, bytes) else bytes(desc, "latin-1")
                    self.metadata = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        symtab = elf.get_section_by_name(".symtab") or elf.get_section_by_name(".dynsym")
        if symtab is None:
            raise CodeObjectError(f"{self.source}: no symbol table, cannot find kernels")
        syms = {s.name: s for s in symtab.iter_symbols() if s.name}
        meta_by_name = {k[".name"]: k for k in self.metadata.get("amdhsa.kernels", [])}
        self.kernels: dict[str, Kernel] = {}
        for name, sym in syms.items():
            if not name.endswith(".kd") or sym["st_info"]["type"] != "STT_OBJECT":
                continue
            kname = name[:-3]
            kd_addr = sym["st_value"]
            kd = KernelDescriptor.from_bytes(self.read(kd_addr, KD_SIZE))
            entry = kd_addr + kd.kernel_code_entry_byte_offset
            fsym = syms.get(kname)
            size = fsym["st_size"] if fsym is not None and fsym["st_size"] else self._segment_end(entry) - entry
            self.kernels[kname] = Kernel(kname, kd, kd_addr, entry, self.read(entry, size),
                                         meta_by_name.get(kname, {}))

    def _segment_end(self, vaddr):
        for va, _, filesz, _ in self.segments:
            if va <= vaddr < va + filesz:
                return va + filesz
        raise CodeObjectError(f"{self.source}: address {vaddr:#x} is in no loadable segment")

    def read(self, vaddr: int, size: int) -> bytes:
        """Bytes of the loaded image at a virtual address."""
        for va, off, filesz, _ in self.segments:
            if va <= vaddr and vaddr + size <= va + filesz:
                return self.data[off + vaddr - va: off + vaddr - va + size]
        raise CodeObjectError(f"{self.source}: [{vaddr:#x}, {vaddr + size:#x}) is not inside one loadable segment")

    def kernel(self, name: str | None = None) -> Kernel:
        if name is None:
            if len(self.kernels) != 1:
                raise CodeObjectError(f"{self.source}: holds kernels {sorted(self.kernels)}; name one")
            return next(iter(self.kernels.values()))
        try:
            return self.kernels[name]
        except KeyError:
            raise CodeObjectError(f"{self.source}: no kernel named {name!r}; it has {sorted(self.kernels)}") from None


# ---------------------------------------------------------------------------------------------
# Writing


@dataclass
class KernelSpec:
    """What the writer needs to know about one kernel beyond its machine code.

    The register counts default to what the code uses (`register_usage`); LDS size and the user
    SGPRs the code expects (in the order of USER_SGPRS) are the author's to state.
    """

    name: str
    code: bytes
    vgpr_count: int | None = None     # None: counted from the code (register_usage)
    sgpr_count: int | None = None
    args: list[KernelArg] = field(default_factory=list)
    group_segment_size: int = 0
    private_segment_size: int = 0
    user_sgprs: tuple[str, ...] = ("kernarg_segment_ptr",)   # names as in USER_SGPRS, without enable_sgpr_
    workgroup_ids: int = 1      # how many of x, y, z workgroup ids to put in SGPRs
    workitem_ids: int = 1       # how many of x, y, z work-item ids to put in v0
    max_flat_workgroup_size: int = 256
    kernarg_align: int = 8
    user_sgpr_count: int | None = None   # where the workgroup ids start; default right after the user SGPRs

    def __post_init__(self):
        if self.vgpr_count is None or self.sgpr_count is None:
            v, s = register_usage(self.code)
            self.vgpr_count = v if self.vgpr_count is None else self.vgpr_count
            self.sgpr_count = s if self.sgpr_count is None else self.sgpr_count

    def descriptor(self) -> KernelDescriptor:
        known = {n[len("enable_sgpr_"):] for n, _, _ in USER_SGPRS}
        bad = set(self.user_sgprs) - known
        if bad:
            raise ValueError(f"kernel {self.name}: unknown user SGPRs {sorted(bad)}; known: {sorted(known)}")
        props = {f"enable_sgpr_{n}": 1 for n in self.user_sgprs}
        props["enable_wavefront_size32"] = 1
        n_user = sum(c for n, _, c in USER_SGPRS if props.get(n))
        if self.user_sgpr_count is not None:
            if not n_user <= self.user_sgpr_count <= 16:
                raise ValueError(f"kernel {self.name}: user_sgpr_count {self.user_sgpr_count} must be "
                                 f"{n_user}..16 for user SGPRs {self.user_sgprs}")
            n_user = self.user_sgpr_count
        if not 1 <= self.workitem_ids <= 3 or not 0 <= self.workgroup_ids <= 3:
            raise ValueError(f"kernel {self.name}: workitem_ids must be 1..3 and workgroup_ids 0..3")
        if self.vgpr_count > 256 or self.sgpr_count > 106:
            raise ValueError(f"kernel {self.name}: {self.vgpr_count} VGPRs / {self.sgpr_count} SGPRs "
                             "exceeds gfx11 limits (256 / 106)")
        if self.group_segment_size > 65536:
            raise ValueError(f"kernel {self.name}: LDS {self.group_segment_size} bytes exceeds 64 KiB")
        rsrc1 = _pack(RSRC1, {
            "granulated_workitem_vgpr_count": max(0, (max(self.vgpr_count, 1) + 7) // 8 - 1),
            "float_denorm_mode_32": 3, "float_denorm_mode_16_64": 3,
            "enable_dx10_clamp": 1, "enable_ieee_mode": 1, "wgp_mode": 1, "mem_ordered": 1,
        }, "COMPUTE_PGM_RSRC1")
        rsrc2 = _pack(RSRC2, {
            "enable_private_segment": int(self.private_segment_size > 0),
            "user_sgpr_count": n_user,
            "enable_sgpr_workgroup_id_x": int(self.workgroup_ids >= 1),
            "enable_sgpr_workgroup_id_y": int(self.workgroup_ids >= 2),
            "enable_sgpr_workgroup_id_z": int(self.workgroup_ids >= 3),
            "enable_vgpr_workitem_id": self.workitem_ids - 1,
            # granulated_lds_size stays 0 as LLVM leaves it: the packet's group segment size rules.
        }, "COMPUTE_PGM_RSRC2")
        kernarg = max([a.offset + a.size for a in self.args], default=0)
        return KernelDescriptor(self.group_segment_size, self.private_segment_size, kernarg, 0,
                                rsrc1, rsrc2, 0, _pack(CODE_PROPERTIES, props, "kernel_code_properties"))

    def metadata(self) -> dict:
        args = []
        for a in self.args:
            d = {".offset": a.offset, ".size": a.size, ".value_kind": a.value_kind}
            if a.address_space:
                d[".address_space"] = a.address_space
            if a.name:
                d[".name"] = a.name
            args.append(d)
        kernarg = max([a.offset + a.size for a in self.args], default=0)
        return {
            ".args": args, ".name": self.name, ".symbol": self.name + ".kd",
            ".group_segment_fixed_size": self.group_segment_size,
            ".private_segment_fixed_size": self.private_segment_size,
            ".kernarg_segment_size": kernarg, ".kernarg_segment_align": self.kernarg_align,
            ".max_flat_workgroup_size": self.max_flat_workgroup_size,
            ".sgpr_count": self.sgpr_count, ".vgpr_count": self.vgpr_count,
            ".sgpr_spill_count": 0, ".vgpr_spill_count": 0,
            ".wavefront_size": 32, ".uses_dynamic_stack": False,
        }


def _align(x, a):
    return (x + a - 1) // a * a


class _Strtab:
    def __init__(self):
        self.data = bytearray(b"\0")
        self.index = {"": 0}

    def add(self, s: str) -> int:
        if s not in self.index:
            self.index[s] = len(self.data)
            self.data += s.encode() + b"\0"
        return self.index[s]


def write_code_object(kernels: list[KernelSpec], arch: str = "gfx1100") -> bytes:
    """An ELF64 AMDHSA code object (V4 ABI, like clang-15's) holding the given kernels."""
    if arch not in MACH:
        raise ValueError(f"unknown target {arch!r}; known: {sorted(MACH)}")
    names = [k.name for k in kernels]
    if len(set(names)) != len(names) or not kernels:
        raise ValueError(f"kernel names must be unique and non-empty: {names}")

    meta = {"amdhsa.version": [1, 1], "amdhsa.target": f"amdgcn-amd-amdhsa--{arch}",
            "amdhsa.kernels": [k.metadata() for k in kernels]}
    desc = msgpack.packb(meta)
    name = b"AMDGPU\0"
    note = struct.pack("<III", len(name), len(desc), NT_AMDGPU_METADATA) + name.ljust(8, b"\0") \
        + desc.ljust(_align(len(desc), 4), b"\0")

    dynstr = _Strtab()
    sym_names = [n for k in kernels for n in (k.name, k.name + ".kd")]
    for n in sym_names:
        dynstr.add(n)
    nsyms = 1 + len(sym_names)
    # SysV hash with one bucket: the chain walks every symbol.
    hash_ = struct.pack(f"<II{1 + nsyms}I", 1, nsyms, nsyms - 1, 0, *range(0, nsyms - 1))

    # Layout: [ehdr phdrs] .note .dynsym .hash .dynstr .rodata | .text | .dynamic, each section
    # at the file offset equal to its address so every segment maps 1:1.
    PH_NUM = 6
    off = 64 + 56 * PH_NUM
    layout = {}

    def place(sec, size, align):
        nonlocal off
        off = _align(off, align)
        layout[sec] = (off, size)
        off += size

    place(".note", len(note), 4)
    place(".dynsym", 24 * nsyms, 8)
    place(".hash", len(hash_), 4)
    place(".dynstr", len(dynstr.data), 1)
    place(".rodata", KD_SIZE * len(kernels), 64)
    ro_end = off
    off = _align(off, 0x1000)
    text = bytearray()
    code_offsets = []
    for k in kernels:
        # pad with s_code_end as LLVM does, so disassemblers see instructions between kernels
        text += S_CODE_END * ((_align(len(text), 256) - len(text)) // 4)
        code_offsets.append(len(text))
        if len(k.code) % 4:
            raise ValueError(f"kernel {k.name}: code is {len(k.code)} bytes, not whole dwords")
        text += k.code
    place(".text", len(text), 256)
    text_end = off
    off = _align(off, 0x1000)
    dyn_entries = [(6, layout[".dynsym"][0]), (11, 24), (5, layout[".dynstr"][0]),
                   (10, len(dynstr.data)), (4, layout[".hash"][0]), (0, 0)]
    dynamic = b"".join(struct.pack("<qQ", t, v) for t, v in dyn_entries)
    place(".dynamic", len(dynamic), 8)

    text_addr, rodata_addr = layout[".text"][0], layout[".rodata"][0]
    rodata = bytearray()
    for i, k in enumerate(kernels):
        kd = k.descriptor()
        kd.kernel_code_entry_byte_offset = text_addr + code_offsets[i] - (rodata_addr + KD_SIZE * i)
        rodata += kd.to_bytes()

    def sym(name_off, info, other, shndx, value, size):
        return struct.pack("<IBBHQQ", name_off, info, other, shndx, value, size)

    STB_GLOBAL, STT_FUNC, STT_OBJECT, STV_PROTECTED = 1, 2, 1, 3
    sec_names = [".note", ".dynsym", ".hash", ".dynstr", ".rodata", ".text", ".dynamic",
                 ".symtab", ".strtab", ".shstrtab"]
    shndx = {n: i + 1 for i, n in enumerate(sec_names)}

    def symbols(strtab):
        out = sym(0, 0, 0, 0, 0, 0)
        for i, k in enumerate(kernels):
            out += sym(strtab.add(k.name), STB_GLOBAL << 4 | STT_FUNC, STV_PROTECTED, shndx[".text"],
                       text_addr + code_offsets[i], len(k.code))
            out += sym(strtab.add(k.name + ".kd"), STB_GLOBAL << 4 | STT_OBJECT, STV_PROTECTED,
                       shndx[".rodata"], rodata_addr + KD_SIZE * i, KD_SIZE)
        return out

    dynsym = symbols(dynstr)
    strtab = _Strtab()
    symtab = symbols(strtab)
    shstrtab = _Strtab()
    for n in sec_names:
        shstrtab.add(n)
    contents = {".note": note, ".dynsym": dynsym, ".hash": hash_, ".dynstr": bytes(dynstr.data),
                ".rodata": bytes(rodata), ".text": bytes(text), ".dynamic": dynamic}
    place(".symtab", len(symtab), 8)
    place(".strtab", len(strtab.data), 1)
    place(".shstrtab", len(shstrtab.data), 1)
    contents.update({".symtab": symtab, ".strtab": bytes(strtab.data), ".shstrtab": bytes(shstrtab.data)})
    shoff = _align(off, 8)

    out = bytearray(shoff + 64 * (1 + len(sec_names)))
    for n, data in contents.items():
        o, size = layout[n]
        out[o:o + size] = data

    ident = b"\x7fELF" + bytes([2, 1, 1, ELFOSABI_AMDGPU_HSA, ELFABIVERSION_AMDGPU_HSA_V4]) + b"\0" * 7
    out[0:64] = ident + struct.pack("<HHIQQQIHHHHHH", 3, EM_AMDGPU, 1, 0, 64, shoff, MACH[arch],
                                    64, 56, PH_NUM, 64, 1 + len(sec_names), shndx[".shstrtab"])
    PT_LOAD, PT_DYNAMIC, PT_NOTE, PT_PHDR = 1, 2, 4, 6
    PF_X, PF_W, PF_R = 1, 2, 4
    dyn_off = layout[".dynamic"][0]
    phdrs = [
        (PT_PHDR, PF_R, 64, 56 * PH_NUM, 8),
        (PT_LOAD, PF_R, 0, ro_end, 0x1000),
        (PT_LOAD, PF_R | PF_X, text_addr, text_end - text_addr, 0x1000),
        (PT_LOAD, PF_R | PF_W, dyn_off, len(dynamic), 0x1000),
        (PT_DYNAMIC, PF_R | PF_W, dyn_off, len(dynamic), 8),
        (PT_NOTE, PF_R, layout[".note"][0], len(note), 4),
    ]
    for i, (typ, flags, o, size, align) in enumerate(phdrs):
        struct.pack_into("<IIQQQQQQ", out, 64 + 56 * i, typ, flags, o, o, o, size, size, align)

    SHT = {".note": 7, ".dynsym": 11, ".hash": 5, ".dynstr": 3, ".rodata": 1, ".text": 1,
           ".dynamic": 6, ".symtab": 2, ".strtab": 3, ".shstrtab": 3}
    SHF_WRITE, SHF_ALLOC, SHF_EXEC = 1, 2, 4
    alloc = {".note", ".dynsym", ".hash", ".dynstr", ".rodata", ".text", ".dynamic"}
    for i, n in enumerate(sec_names):
        o, size = layout[n]
        flags = (SHF_ALLOC if n in alloc else 0) | (SHF_EXEC if n == ".text" else 0) \
            | (SHF_WRITE if n == ".dynamic" else 0)
        link = {".dynsym": shndx[".dynstr"], ".hash": shndx[".dynsym"], ".dynamic": shndx[".dynstr"],
                ".symtab": shndx[".strtab"]}.get(n, 0)
        info = 1 if n in (".dynsym", ".symtab") else 0
        entsize = {".dynsym": 24, ".symtab": 24, ".hash": 4, ".dynamic": 16}.get(n, 0)
        align = {".text": 256, ".rodata": 64, ".dynsym": 8, ".symtab": 8, ".dynamic": 8,
                 ".note": 4, ".hash": 4}.get(n, 1)
        struct.pack_into("<IIQQQQIIQQ", out, shoff + 64 * (i + 1), shstrtab.index[n], SHT[n], flags,
                         o if n in alloc else 0, o, size, link, info, align, entsize)
    return bytes(out)


def register_usage(code: bytes) -> tuple[int, int]:
    """(VGPRs, SGPRs) a kernel's code needs, counted as LLVM counts them for .vgpr_count and
    .sgpr_count: highest register used plus one, and two more SGPRs when the code touches VCC."""
    from rdna3 import decode
    from rdna3 import instruction as ins

    vgprs, sgprs, vcc, off = 0, 0, False, 0
    while off < len(code):
        inst = decode(code, off)
        off += inst.size
        halves = (inst, inst.vopd_y) if inst.vopd_y is not None else (inst,)
        for h in halves:
            for o in h.operands:
                if o.kind == ins.VGPR:
                    vgprs = max(vgprs, o.index + o.count)
                elif o.kind == ins.SGPR:
                    sgprs = max(sgprs, o.index + o.count)
                elif o.kind == ins.SPECIAL and o.reg.startswith("vcc"):
                    vcc = True
    return vgprs, sgprs + (2 if vcc else 0)
