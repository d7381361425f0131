"""Generates amdrv/autogen's struct and constant modules from the upstream amdgpu headers.

Each module is data only. Its layout, for a module built from one or more headers:

  NAME = value            every #define that is an integer constant expression, and every enumerator
  ENUMS                   {enum name: (enumerator names, in order)}; values are the module constants
  STRUCTS                 {name: (size, align, "struct"|"union", fields)}, a field being
                            (name, offset, fmt)                      a scalar (struct-module code)
                            (name, offset, type, dims)               an array; dims () scalar, 0 flexible
                            (name, offset, fmt, (), (shift, width, nbytes))  a bitfield, read as an
                                                                   nbytes little-endian int at offset
                          type is a struct-module code (one character) or another STRUCTS key
  ALIASES                 {typedef name: STRUCTS key}
  FIELDS                  {function-like macro: (shift,) or (shift, width)}: ((x) << shift), masked
                          to width bits when the macro masks its argument
  MACROS                  {function-like macro: (constant, ((param, shift, width or None), ...))}
                          for macros of several arguments: constant | (param & mask) << shift | ...
  EXTRACTORS              {one-argument macro: (shift, width)} for ((x) >> shift) & mask getters
  UNEXPRESSED             {macro: why}: #defines that are not integer constants or bit fields
  SKIPPED                 {struct: why}: structs with no device layout (pointers, kernel types)

amdrv/structs.py is the codec over STRUCTS.
"""
from __future__ import annotations

import re
from pathlib import Path

from tools.gentables.cparse import CError, Header, Record, Scalar

_TABLE_NAMES = {"ENUMS", "STRUCTS", "ALIASES", "FIELDS", "MACROS", "EXTRACTORS", "UNEXPRESSED", "SKIPPED", "SOURCES"}


def _num(v: int, hex_hint: bool | None = None) -> str:
    if v < 0:
        return str(v)
    if hex_hint is None:
        hex_hint = v >= 0x100 or (v >= 16 and v & (v - 1) == 0)
    return f"0x{v:X}" if hex_hint and v >= 10 else str(v)


def _hex_literal(body: list) -> bool | None:
    toks = [t for t in body if t not in ("(", ")")]
    if len(toks) == 1 and isinstance(toks[0], str) and toks[0][:1].isdigit():
        return toks[0].lower().startswith("0x")
    return None


class ModuleWriter:
    """Collects one generated module's tables from a Header and writes it deterministically."""

    def __init__(self, name: str, doc: str, origin: str, headers: list[str]):
        self.name = name
        self.doc = doc
        self.origin = origin
        self.headers = headers
        self.sections: list[tuple[str, list[tuple[str, str]]]] = []   # (comment, [(name, literal)])
        self.values: dict[str, int] = {}
        self.enums: dict[str, tuple] = {}
        self.structs: dict[str, tuple] = {}
        self.aliases: dict[str, str] = {}
        self.fields: dict[str, tuple] = {}
        self.macros: dict[str, tuple] = {}
        self.extractors: dict[str, tuple] = {}
        self.unexpressed: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        self.extra: list[tuple[str, str, object]] = []     # (comment, NAME, python value)

    # ---- collection
    def const(self, section: list, name: str, value: int, hex_hint=None) -> None:
        if name in _TABLE_NAMES or not name.isidentifier():
            self.unexpressed[name] = "name clashes with a table of this module"
            return
        if name in self.values:
            if self.values[name] != value:
                raise CError(f"{self.name}: {name} defined twice with different values "
                             f"({self.values[name]} and {value})")
            return
        self.values[name] = value
        section.append((name, _num(value, hex_hint)))

    def add_header(self, hdr: Header, source: str, *, defines=True, enums=True, records=True,
                   exclude=lambda name: False) -> None:
        section: list = []
        self.sections.append((f"{source}: #define", section))
        for kind, name, src in hdr.order:
            if src != source or exclude(name):
                continue
            if kind == "macro" and defines:
                m = hdr.macros.get(name)
                if not records and m is not None and m.params is not None and name[:1].islower():
                    continue  # a kernel-internal header's code wrapper (psp_ring_init(psp) ...)
                self._macro(hdr, name, section)
            elif kind == "enum" and enums:
                members = hdr.enums[name]
                esec: list = []
                self.sections.append((f"{source}: enum {name}", esec))
                for k, v in members.items():
                    self.const(esec, k, v)
                self.enums[name] = tuple(members)
                section = []
                self.sections.append((f"{source}: #define", section))
            elif kind == "record" and records:
                self._record(hdr, hdr.records[name])
            elif kind == "typedef" and records:
                t = hdr.typedefs[name]
                if isinstance(t, Record) and t.name != name:
                    self.aliases[name] = t.name
                    if t.name not in self.structs and t.name not in self.skipped:
                        self._record(hdr, t)

    def _macro(self, hdr: Header, name: str, section: list) -> None:
        m = hdr.macros.get(name)
        if m is None or not m.body:
            return
        if m.params is None:
            try:
                self.const(section, name, hdr.value(name), _hex_literal(m.body))
            except (CError, IndexError, KeyError, TypeError, RecursionError) as e:
                self.unexpressed[name] = _why(m, e)
            return
        try:
            spec = hdr.macro_field(name)
        except (CError, IndexError, KeyError, TypeError, RecursionError) as e:
            try:
                self.extractors[name] = hdr.macro_extractor(name)
            except (CError, IndexError, KeyError, TypeError, RecursionError):
                self.unexpressed[name] = _why(m, e)
            return
        if isinstance(spec[-1], tuple):
            self.macros[name] = spec
        else:
            self.fields[name] = spec

    def _record(self, hdr: Header, rec: Record) -> None:
        if rec.name in self.structs:
            return
        try:
            size, align, fields = rec.layout(hdr)
        except CError as e:
            self.skipped[rec.name] = str(e)
            return
        out = []
        for f in fields:
            if isinstance(f.type, Record):
                self._record(hdr, f.type)
                t = f.type.name
            else:
                t = f.type.fmt
            if f.bits is not None:
                out.append((f.name, f.offset, t, (), f.bits))
            elif f.dims:
                out.append((f.name, f.offset, t, f.dims))
            else:
                out.append((f.name, f.offset, t))
        self.structs[rec.name] = (size, align, rec.kind, tuple(out))

    # ---- output
    def render(self) -> str:
        srcs = ", ".join(self.headers)
        lines = [
            f"# GENERATED by tools/gentables/structs.py from {self.origin}: {srcs}",
            "# Do not edit: change the generator and run `python -m tools.gentables`.",
            f'"""{self.doc}"""',
            "",
            f"SOURCES = {tuple(self.headers)!r}",
        ]
        for comment, section in self.sections:
            if section:
                lines.append("")
                lines.append(f"# {comment}")
                lines.extend(f"{n} = {v}" for n, v in section)
        for comment, name, value, *inline in self.extra:
            lines.append("")
            lines.append(f"# {comment}")
            lines.append(f"{name} = {_pyrepr(value, 0, inline[0] if inline else None)}")
        lines.append("")
        lines.append(f"ENUMS = {_pyrepr(self.enums, 0)}")
        lines.append("")
        lines.append("STRUCTS = {" if self.structs else "STRUCTS = {}")
        for sname, (size, align, kind, fields) in self.structs.items():
            lines.append(f"    {sname!r}: ({size}, {align}, {kind!r}, (")
            lines.extend(f"        {_pyrepr(f, 2)}," for f in fields)
            lines.append("    )),")
        if self.structs:
            lines.append("}")
        for tname, table in (("ALIASES", self.aliases), ("FIELDS", self.fields),
                             ("MACROS", self.macros),
                             ("EXTRACTORS", self.extractors), ("UNEXPRESSED", self.unexpressed),
                             ("SKIPPED", self.skipped)):
            lines.append("")
            lines.append(f"{tname} = {_pyrepr(table, 0)}")
        return "\n".join(lines) + "\n"

    def write(self, outdir: Path) -> Path:
        path = Path(outdir) / f"{self.name}.py"
        text = self.render()
        compile(text, str(path), "exec")
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
        return path


def _why(m, e: Exception) -> str:
    """A short reason why a macro is not an integer constant or bit field."""
    body = [t for t in m.body if isinstance(t, str)]
    if "->" in body or "." in body:
        return "uses driver state (->)"
    if any(t[:1] in "\"'" for t in body):
        return "not an integer (string or character)"
    msg = str(e) or type(e).__name__
    return msg.split(" in ")[0].replace(f"{m.name}: ", "")


def _pyrepr(v, indent: int, inline_at: int | None = None) -> str:
    """Deterministic repr: dicts one entry per line down to depth inline_at, everything else inline."""
    if isinstance(v, dict):
        if not v:
            return "{}"
        if inline_at is not None and indent >= inline_at:
            return "{" + ", ".join(f"{k!r}: {_pyrepr(x, indent + 1, inline_at)}" for k, x in v.items()) + "}"
        pad = "    " * (indent + 1)
        body = "".join(f"{pad}{k!r}: {_pyrepr(x, indent + 1, inline_at)},\n" for k, x in v.items())
        return "{\n" + body + "    " * indent + "}"
    if isinstance(v, tuple):
        inner = ", ".join(_pyrepr(x, indent, inline_at) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return repr(v)
    if isinstance(v, int):
        return _num(v, v >= 0x100)
    return repr(v)


def _header(tree, files: list[str], records=True) -> Header:
    h = Header()
    for f in files:
        h.read(tree.read(f), f, records=records)
    return h


# ---------------------------------------------------------------- the modules

def gen_ucode(tree, outdir: Path) -> Path:
    files = ["amdgpu/amdgpu_socbb.h", "amdgpu/amdgpu_ucode.h"]
    w = ModuleWriter("ucode", "Firmware file headers (amdgpu_ucode.h): header structs per firmware "
                     "type and version, psp/ta fw types, AMDGPU_UCODE_ID.", tree.origin, files)
    h = _header(tree, files)
    for f in files:
        w.add_header(h, f)
    return w.write(outdir)


def gen_discovery(tree, outdir: Path) -> Path:
    files = ["include/discovery.h", "include/soc15_hw_ip.h", "amdgpu/amdgpu.h", "amdgpu/amdgpu_discovery.c"]
    w = ModuleWriter("discovery", "IP discovery binary (discovery.h), hardware ids (soc15_hw_ip.h), the "
                     "driver's HWIP block enum and HWIP_MAX_INSTANCE (amdgpu.h; only these), and from "
                     "amdgpu_discovery.c its hw_id_map (HWIP_TO_HWID) and hw_id_names (HWID_NAMES).",
                     tree.origin, files)
    h = _header(tree, files[:2])
    for f in files[:2]:
        w.add_header(h, f)
    # amdgpu.h is the whole driver's header: read only the HWIP enum and the limits next to it
    amdgpu_h = tree.read(files[2])
    parts = [re.search(r"enum amd_hw_ip_block_type\s*\{.*?\};", amdgpu_h, re.S)]
    parts += [re.search(rf"^#define\s+{n}\b.*$", amdgpu_h, re.M) for n in ("HWIP_MAX_INSTANCE", "HW_ID_MAX")]
    if not all(parts):
        raise CError("discovery: amd_hw_ip_block_type / HWIP_MAX_INSTANCE not found in amdgpu.h")
    h.read("\n".join(p.group() for p in parts), files[2])
    w.add_header(h, files[2])
    src = tree.read(files[3])
    # hw_id_map[MAX_HWIP] = { [GC_HWIP] = GC_HWID, ... }: amdgpu's ip block -> discovery hardware id
    m = re.search(r"hw_id_map\s*\[\s*MAX_HWIP\s*\]\s*=\s*\{(.*?)\};", src, re.S)
    if not m:
        raise CError("discovery: hw_id_map not found in amdgpu_discovery.c")
    pairs = re.findall(r"\[\s*(\w+)\s*\]\s*=\s*(\w+)", m.group(1))
    w.extra.append(("amdgpu_discovery.c hw_id_map: amdgpu HWIP block -> discovery hw_id",
                    "HWIP_TO_HWID", {k: h.value(v) for k, v in pairs}))
    # hw_id_names[HW_ID_MAX] = { [MP1_HWID] = "MP1", ... }
    m = re.search(r"hw_id_names\s*\[\s*HW_ID_MAX\s*\]\s*=\s*\{(.*?)\};", src, re.S)
    if not m:
        raise CError("discovery: hw_id_names not found in amdgpu_discovery.c")
    names = {h.value(k): v for k, v in re.findall(r"\[\s*(\w+)\s*\]\s*=\s*\"(\w+)\"", m.group(1))}
    w.extra.append(("amdgpu_discovery.c hw_id_names: discovery hw_id -> name", "HWID_NAMES",
                    dict(sorted(names.items())), 0))
    return w.write(outdir)


def gen_psp(tree, outdir: Path) -> Path:
    files = ["amdgpu/psp_gfx_if.h", "amdgpu/amdgpu_psp.h"]
    w = ModuleWriter("psp", "PSP GFX interface (psp_gfx_if.h): ring/command structs, command ids, fw types; "
                     "bootloader commands and ring types from amdgpu_psp.h (enums and constants, and the PSP runtime "
                     "DB records only).",
                     tree.origin, files)
    h = _header(tree, files[:1])
    w.add_header(h, files[0])
    h2 = Header()
    text = tree.read(files[1])
    h2.read(text, files[1], records=False)
    w.add_header(h2, files[1], records=False)
    # the PSP runtime database's records (what the boot firmware leaves at the top of VRAM; psp_sw_init reads
    # its SCPM and boot-config entries): only that part of the kernel-internal header is plain data
    start = text.find("/** PSP runtime DB **/")
    end = text.find("struct psp_context", start)
    if start < 0 or end < start:
        raise CError("psp: the PSP runtime DB section of amdgpu_psp.h was not found")
    h3 = Header()
    h3.read(text[start:end], files[1])
    w.add_header(h3, files[1], defines=False, enums=False)
    return w.write(outdir)


def gen_pm4(tree, outdir: Path) -> Path:
    files = ["amdgpu/nvd.h", "amdgpu/soc15d.h"]
    w = ModuleWriter("pm4", "PM4 packets for Navi/gfx11 (nvd.h): PACKET3 opcodes, packet field macros as "
                     "FIELDS (shift[, width]), header layout in MACROS['PACKET3']. soc15d.h names that "
                     "nvd.h lacks are in SOC15D.", tree.origin, files)
    h = _header(tree, files[:1])
    w.add_header(h, files[0])
    h2 = _header(tree, files[1:])
    extra = {}
    for kind, name, _ in h2.order:
        if kind == "macro" and name not in h.macros:
            m = h2.macros[name]
            if m.params is None and m.body:
                try:
                    extra[name] = h2.value(name)
                except CError:
                    pass
    w.extra.append(("soc15d.h constants that nvd.h does not define", "SOC15D", extra))
    return w.write(outdir)


_SDMA_FIELD = re.compile(r"(SDMA_(?:AQL_)?PKT_\w+?)_([a-z]\w*)_(offset|mask|shift)$")


def gen_sdma6(tree, outdir: Path) -> Path:
    files = ["amdgpu/sdma_v6_0_0_pkt_open.h"]
    w = ModuleWriter("sdma6", "SDMA v6 packets (sdma_v6_0_0_pkt_open.h): opcodes and sub-opcodes as "
                     "constants; PACKETS = {packet: {dword: {field: (shift, mask)}}} with the unshifted mask "
                     "(packet names without SDMA_PKT_, AQL ones as AQL_*); "
                     "WORDS = {packet: {word name: dword}}.", tree.origin, files)
    text = tree.read(files[0])
    h = Header()
    h.read(text, files[0])
    packets = re.findall(r"Definitions for (SDMA_(?:AQL_)?PKT_\w+) packet", text)
    by_len = sorted(packets, key=len, reverse=True)
    triples: dict = {}
    for kind, name, _ in h.order:
        m = _SDMA_FIELD.match(name)
        if kind != "macro" or not m:
            continue
        full = m.group(1)
        pkt = next((p for p in by_len if full.startswith(p + "_")), None)
        if pkt is None:
            raise CError(f"sdma6: {name} belongs to no packet")
        word = full[len(pkt) + 1:]
        key = (pkt.replace("SDMA_PKT_", "").replace("SDMA_AQL_PKT_", "AQL_"), word, m.group(2))
        triples.setdefault(key, {})[m.group(3)] = h.value(name)
    pk: dict = {}
    words: dict = {}
    for (pkt, word, fld), t in triples.items():
        if set(t) != {"offset", "mask", "shift"}:
            raise CError(f"sdma6: incomplete field {pkt}.{word}.{fld}: {t}")
        dw = t["offset"]
        pk.setdefault(pkt, {}).setdefault(dw, {})[fld] = (t["shift"], t["mask"])
        wd = words.setdefault(pkt, {})
        if wd.get(word, dw) != dw:
            raise CError(f"sdma6: word {pkt}.{word} at two dword offsets")
        wd[word] = dw

    def generated_field(name):
        return bool(_SDMA_FIELD.match(name)) or any(name.startswith(p + "_") for p in packets)

    w.add_header(h, files[0], exclude=generated_field)
    w.extra.append(("packet -> dword index -> field -> (shift, mask)", "PACKETS",
                    {p: {d: dict(f) for d, f in sorted(v.items())} for p, v in pk.items()}, 2))
    w.extra.append(("packet -> word name -> dword index", "WORDS", words, 1))
    return w.write(outdir)


def gen_smu(tree, outdir: Path) -> Path:
    files = ["pm/swsmu/inc/pmfw_if/smu_v13_0_0_ppsmc.h", "pm/swsmu/inc/pmfw_if/smu13_driver_if_v13_0_0.h"]
    w = ModuleWriter("smu_13_0_0", "SMU 13.0.0 (Navi31/33) firmware interface: PPSMC message ids and results, "
                     "driver_if clocks, features, table ids and table layouts (SmuMetrics_t, PPTable_t, ...).",
                     tree.origin, files)
    h = _header(tree, files)
    for f in files:
        w.add_header(h, f)
    return w.write(outdir)


def gen_ih(tree, outdir: Path) -> Path:
    files = ["include/soc15_ih_clientid.h", "include/ivsrcid/gfx/irqsrcs_gfx_11_0_0.h",
             "include/ivsrcid/vmc/irqsrcs_vmc_1_0.h"]
    w = ModuleWriter("ih", "Interrupt handler ids: SOC15 and SOC21 IH client ids (soc21 has its own enum, "
                     "SOC21_IH_CLIENTID_*), gfx11 source ids (GFX_11_0_0__SRCID__*, which include SDMA v6 "
                     "traps) and VMC/UTCL2 fault source ids.", tree.origin, files)
    h = _header(tree, files)
    for f in files:
        w.add_header(h, f)
    return w.write(outdir)


def gen_gmc(tree, outdir: Path) -> Path:
    files = ["amdgpu/amdgpu_vm.h"]
    w = ModuleWriter("gmc", "GPU page tables (amdgpu_vm.h): PTE/PDE bits as constants, their function-like "
                     "macros (FRAG, MTYPE, BFS) as FIELDS (shift[, width]), the page-table levels.",
                     tree.origin, files)
    h = Header()
    h.read(tree.read(files[0]), files[0], records=False)
    w.add_header(h, files[0], records=False)
    return w.write(outdir)


def gen_mqd(tree, outdir: Path) -> Path:
    files = ["include/v11_structs.h"]
    w = ModuleWriter("mqd_v11", "Memory queue descriptors of gfx11 (v11_structs.h): v11_compute_mqd (the MEC's "
                     "HQD image at CP_MQD_BASE_ADDR), v11_gfx_mqd, v11_sdma_mqd.", tree.origin, files)
    h = _header(tree, files)
    w.add_header(h, files[0])
    return w.write(outdir)


# the ATOM ROM tables a driver walks to the firmware-reserved VRAM size (amdgpu_atom_parse,
# amdgpu_atomfirmware_get_fw_reserved_fb_size); the rest of atomfirmware.h (display, power tables) is left out
ATOM_RECORDS = ("atom_common_table_header", "atom_rom_header_v2_2", "atom_master_data_table_v2_1",
                "atom_master_list_of_data_tables_v2_1", "atom_firmware_info_v3_4")


def gen_atom(tree, outdir: Path) -> Path:
    files = ["include/atomfirmware.h", "amdgpu/atom.h"]
    w = ModuleWriter("atomfirmware", "VBIOS ATOM ROM layout (atomfirmware.h: the ROM header, the master data table "
                     "and firmwareinfo v3.4; pack(1) as the header declares); the fixed offsets of the image from "
                     "atom.h (ATOM_ROM_TABLE_PTR, ATOM_ATI_MAGIC_PTR ..., constants only).", tree.origin, files)
    h = _header(tree, files[:1])
    w.add_header(h, files[0], defines=False, enums=False, exclude=lambda name: name not in ATOM_RECORDS)
    h2 = Header()
    h2.read(tree.read(files[1]), files[1], records=False)
    w.add_header(h2, files[1], records=False, enums=False)
    return w.write(outdir)


GENERATORS = [gen_ucode, gen_discovery, gen_psp, gen_pm4, gen_sdma6, gen_smu, gen_ih, gen_gmc, gen_mqd, gen_atom]


def generate(tree, outdir: Path) -> list[Path]:
    """Writes every struct/constant module into outdir; returns their paths."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    return [g(tree, outdir) for g in GENERATORS]
