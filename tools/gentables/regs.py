"""Register tables: include/asic_reg/<ip>/<block>_offset.h + _sh_mask.h -> amdrv/autogen/regs_<block>.py.

One module per register block, holding only string constants: a module with tuples and dicts of
~10k entries costs 60-115 ms to compile where no .pyc can be written (PYTHONDONTWRITEBYTECODE, as in
this project's environments) and 4-8 ms to unmarshal; a few long strings cost ~5 ms and ~1 ms. Each
table is a string of whitespace-separated rows that amdrv.regs splits once; field layouts stay packed
until a register using one is looked up:

    BLOCK     "gc_11_0_0"
    LAYOUTS   line n is layout n: "FIELD:shift:width FIELD:shift:width ..." (first-seen order)
    REGS      a line per MMIO register: "GRBM_STATUS da4 0 111": name, dword offset (hex), base index,
              layout
    SPACES    ("ix:sqind", ...): the address spaces other than the MMIO BAR
    NON_MMIO  a line per register in one of them: "SQ_WAVE_STATUS 3 102 2115": name, space, address
              (hex), layout

Many registers share one layout (per-instance and per-VF copies: SDMA0/SDMA1, nbio's 16 VFs), so a
layout is stored once; that is what keeps nbio (~35k fields) small.

Decisions about what the headers contain (6.1 headers; the generator raises on anything else new):
- `regNAME` + `regNAME_BASE_IDX` pairs go to REGS. A `regNAME` without `_BASE_IDX` (gc_11_0_0 has
  one, GFX_IMU_FUSESTRAP) takes the base index every other register of its addressBlock shares; if that
  block is not uniform the generator raises.
- `ixNAME` (gc: the SQ wave, GC/SE CAC and RTAVFS index spaces, reached through an *_IND_INDEX/DATA
  pair) and `cfgNAME` (nbio: PCI configuration space of the GPU's functions and its upstream switch,
  and SMN aliases) are not BAR offsets, so they go to NON_MMIO with their addressBlock as the space
  ("ix:sqind", "cfg:nbio_pcie0_pswuscfg0_cfgdecp"). The same NAME may be in REGS and NON_MMIO (827
  nbio registers are visible both ways); fields are shared since sh_mask names them once. Any other
  prefix (e.g. older headers' `mm`/`sm`) raises.
- Fields come from `REG__FIELD__SHIFT` / `REG__FIELD_MASK` and are grouped by the define's name, not
  the `//REG` comment above it: gc's CP_INT_STAT_DEBUG fields sit under //CP_ROQ_DB_STAT.
- Registers with fields but no offset (gc: CP_INT_STAT_DEBUG, CP_ME1/ME2_INT_STAT_DEBUG; nbio: 313
  PCIe capability registers whose cfg offsets are absent) cannot be addressed and are left out; each
  module lists them in a comment so a search for the name finds why.
- A field with a SHIFT but no MASK (gc: SQ_CONFIG DISABLE_SGPR_RD_KILL, WCLK_HYSTERESIS_CNT) has no
  known width and is left out (listed in a comment). A MASK with no SHIFT (nbio: a stray
  PCIE_LC_RXRECOVER_RXSTANDBY_CNTL LC_RX_L0S_STANDBY_EN at the end of the file) takes its shift from
  the mask's lowest set bit.
- Every field must satisfy mask == ((1 << width) - 1) << shift with the mask within 32 bits, and fields
  of one register must not overlap; otherwise the generator raises, except for the upstream errata
  listed in FIELD_ERRATA (gc: GL1C_UTCL0_CNTL1 FORCE_IN_ORDER says shift 27 but mask 0x06000000, which
  overlaps FORCE_MISS at bit 26; bit 27 is the free bit and where every other UTCL0_CNTL1 puts it).
  An erratum whose header text changed raises too, so the list cannot go stale.
- Duplicate defines raise. Registers sharing an offset (gc has 57 such offsets) are all kept, and
  registers with no fields in sh_mask (gc 18, nbio 195) get the empty layout.
- Power-on values: where upstream ships `<block>_default.h` (of these blocks only gc_11_0_0), DEFAULTS
  holds "NAME value" for each MMIO register whose `regNAME_DEFAULT` is not 0 (absent: 0). Defaults of
  the ix spaces are not kept (counted in a comment); a default naming no register of the offset header
  (gc: four GDFLL_*EDC_HYSTERESIS_*) and a register with no default (gc: TCP_CNTL, GL1C_UTCL0_CNTL1)
  are listed in comments. Blocks without the header have DEFAULTS = None: nothing is known.
"""
import re
from pathlib import Path

from tools.gentables.source import HeaderTree

BLOCKS = {  # module block name -> directory under include/asic_reg
    "gc_11_0_0": "gc",
    "mp_13_0_0": "mp",
    "mmhub_3_0_0": "mmhub",
    "mmhub_3_0_2": "mmhub",
    "nbio_4_3_0": "nbio",
    "osssys_6_0_0": "oss",
    "hdp_6_0_0": "hdp",
    "thm_13_0_2": "thm",
    "smuio_13_0_6": "smuio",   # smuio_v13_0_6.c: ROM_INDEX/ROM_DATA, the VBIOS ROM (amdgpu_soc15_read_bios_from_rom)   # smu_v13_0.c's thermal interrupt registers (THM_THERMAL_INT_CTRL/ENA)
}

# (block, register, field) -> (mask the header says, shift, width we keep). See the module docstring.
FIELD_ERRATA = {
    ("gc_11_0_0", "GL1C_UTCL0_CNTL1", "FORCE_IN_ORDER"): (0x06000000, 27, 1),
}

_DEFINE = re.compile(r"#define\s+(\w+)\s+(\S+)\s*$")
_BLOCK = re.compile(r"//\s*addressBlock:\s*(\S+)")
_NUMBER = re.compile(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*$")


class HeaderError(ValueError):
    """Something in an upstream header the generator has no rule for."""


def _number(text: str, where: str) -> int:
    m = _NUMBER.match(text)
    if not m:
        raise HeaderError(f"{where}: value {text!r} is not a number")
    return int(m.group(1), 0)


def _defines(text: str, rel: str):
    """Yields (name, value, addressBlock) for each numeric #define, skipping the include guard."""
    block = None
    seen = set()
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _BLOCK.match(line)
        if m:
            block = m.group(1)
            continue
        if not line.startswith("#define"):
            continue
        m = _DEFINE.match(line)
        if not m:
            if line.split()[1].endswith("_HEADER") and len(line.split()) == 2:
                continue  # include guard
            raise HeaderError(f"{rel}:{lineno}: cannot parse {line!r}")
        name = m.group(1)
        if name in seen:
            raise HeaderError(f"{rel}:{lineno}: {name} defined twice")
        seen.add(name)
        yield name, _number(m.group(2), f"{rel}:{lineno}"), block


def _parse_offsets(text: str, rel: str):
    """-> (regs {name: [offset, base_idx or None, addressBlock]}, non_mmio {name: (space, address)})."""
    regs: dict[str, list] = {}
    non_mmio: dict[str, tuple[str, int]] = {}
    for name, value, block in _defines(text, rel):
        if name.startswith("reg"):
            if name.endswith("_BASE_IDX") and name[3:-9] in regs:
                regs[name[3:-9]][1] = value
            else:
                regs[name[3:]] = [value, None, block]
        elif name.startswith("ix") or name.startswith("cfg"):
            prefix = "ix" if name.startswith("ix") else "cfg"
            non_mmio[name[len(prefix):]] = (f"{prefix}:{block}", value)
        else:
            raise HeaderError(f"{rel}: {name} has no known prefix (reg, ix, cfg)")
    for name, entry in regs.items():
        if entry[1] is None:
            same_block = {e[1] for e in regs.values() if e[2] == entry[2] and e[1] is not None}
            if len(same_block) != 1:
                raise HeaderError(f"{rel}: reg{name} has no _BASE_IDX and addressBlock {entry[2]} "
                                  f"has base indices {sorted(same_block)}")
            entry[1] = same_block.pop()
    return regs, non_mmio


def _parse_fields(text: str, rel: str, block: str):
    """-> ({register: [(field, shift, width)] in header order}, [dropped 'REG.FIELD' without a mask])."""
    shifts: dict[tuple[str, str], int] = {}
    masks: dict[tuple[str, str], int] = {}
    for name, value, _ in _defines(text, rel):
        if name.endswith("__SHIFT"):
            reg, _, field = name[:-7].partition("__")
            shifts[(reg, field)] = value
        elif name.endswith("_MASK") and "__" in name:
            reg, _, field = name[:-5].partition("__")
            masks[(reg, field)] = value
        else:
            raise HeaderError(f"{rel}: {name} is neither REG__FIELD__SHIFT nor REG__FIELD_MASK")
    fields: dict[str, list[tuple[str, int, int]]] = {}
    dropped = sorted(f"{r}.{f}" for r, f in shifts if (r, f) not in masks)
    unused_errata = {k for k in FIELD_ERRATA if k[0] == block}
    # Shift defines come first in each header group; order fields by them, then lone masks.
    for key in list(shifts) + [k for k in masks if k not in shifts]:
        if key not in masks:
            continue
        reg, field = key
        mask = masks[key]
        if mask == 0 or mask >> 32:
            raise HeaderError(f"{rel}: {reg}.{field} mask {mask:#x} is empty or wider than 32 bits")
        shift = shifts.get(key, (mask & -mask).bit_length() - 1)
        width = (mask >> shift).bit_length()
        erratum = FIELD_ERRATA.get((block, reg, field))
        if erratum:
            if erratum[:2] != (mask, shift):
                raise HeaderError(f"{rel}: erratum for {reg}.{field} no longer matches the header "
                                  f"(mask {mask:#x}, shift {shift}); update FIELD_ERRATA")
            unused_errata.discard((block, reg, field))
            shift, width = erratum[1:]
        elif ((1 << width) - 1) << shift != mask:
            raise HeaderError(f"{rel}: {reg}.{field} mask {mask:#010x} is not a contiguous field at "
                              f"shift {shift}; add it to FIELD_ERRATA if the header is wrong")
        fields.setdefault(reg, []).append((field, shift, width))
    if unused_errata:
        raise HeaderError(f"{rel}: FIELD_ERRATA entries not found in the header: {sorted(unused_errata)}")
    for reg, fl in fields.items():
        used = 0
        for field, shift, width in fl:
            bits = ((1 << width) - 1) << shift
            if used & bits:
                raise HeaderError(f"{rel}: {reg}.{field} overlaps another field of {reg}")
            used |= bits
    return fields, dropped


def _parse_defaults(text: str, rel: str, regs: dict):
    """-> (rows "NAME hex" of the non-zero MMIO defaults, defaults naming no register, registers with no
    default, count of ix-space defaults left out)."""
    values: dict[str, int] = {}
    ix = 0
    for name, value, _ in _defines(text, rel):
        if name.startswith("ix") and name.endswith("_DEFAULT"):
            ix += 1
        elif name.startswith("reg") and name.endswith("_DEFAULT"):
            values[name[3:-8]] = value
        else:
            raise HeaderError(f"{rel}: {name} is neither regNAME_DEFAULT nor ixNAME_DEFAULT")
    if any(v >> 32 for v in values.values()):
        raise HeaderError(f"{rel}: a default wider than 32 bits")
    rows = [f"{n} {v:x}" for n, v in values.items() if v and n in regs]
    return rows, sorted(set(values) - set(regs)), sorted(set(regs) - set(values)), ix


def _wrapped_comment(title: str, names: list[str]) -> list[str]:
    if not names:
        return []
    lines, line = [f"# {title}:"], "#"
    for n in names:
        if len(line) + len(n) + 1 > 100:
            lines.append(line)
            line = "#"
        line += " " + n
    return lines + [line]


def render(block: str, tree: HeaderTree) -> str:
    """The text of regs_<block>.py."""
    base = f"include/asic_reg/{BLOCKS[block]}/{block}"
    off_rel, sh_rel = f"{base}_offset.h", f"{base}_sh_mask.h"
    regs, non_mmio = _parse_offsets(tree.read(off_rel), off_rel)
    fields, dropped_fields = _parse_fields(tree.read(sh_rel), sh_rel, block)
    unplaced = sorted(set(fields) - set(regs) - set(non_mmio))

    layouts: dict[str, int] = {}

    def layout(name: str) -> int:
        packed = " ".join(f"{f}:{s}:{w}" for f, s, w in fields.get(name, ()))
        return layouts.setdefault(packed, len(layouts))

    reg_lines = [f"{n} {o:x} {i} {layout(n)}" for n, (o, i, _) in regs.items()]
    spaces: dict[str, int] = {}
    nm_lines = [f"{n} {spaces.setdefault(s, len(spaces))} {a:x} {layout(n)}"
                for n, (s, a) in non_mmio.items()]

    out = [
        f"# GENERATED by tools/gentables from {tree.origin}/{off_rel}",
        f"# and {tree.origin}/{sh_rel}.",
        "# Do not edit: change tools/gentables/regs.py and regenerate (docs/tables.md says how).",
        f"# {len(regs)} MMIO registers with {sum(len(fields.get(n, ())) for n in regs)} fields; "
        f"{len(non_mmio)} registers in other address spaces.",
    ]
    out += _wrapped_comment(f"in {sh_rel} without an offset, left out", unplaced)
    out += _wrapped_comment(f"fields in {sh_rel} with a shift but no mask, left out", dropped_fields)
    def_rel = f"{base}_default.h"
    try:
        def_text = tree.read(def_rel)
    except FileNotFoundError:
        def_text = None
    if def_text is None:
        defaults = ["# no _default.h upstream for this block: power-on values unknown", "DEFAULTS = None"]
    else:
        rows, orphans, absent, ix = _parse_defaults(def_text, def_rel, regs)
        defaults = [f"# Power-on values from {tree.origin}/{def_rel}: {len(rows)} non-zero MMIO defaults "
                    f"(the rest are 0); {ix} defaults of index spaces left out."]
        defaults += _wrapped_comment(f"in {def_rel} but not in {off_rel}, left out", orphans)
        defaults += _wrapped_comment(f"registers with no default in {def_rel} (taken as 0)", absent)
        defaults += ["# One line per register whose power-on value is not 0: name, value (hex).",
                     'DEFAULTS = """\\', *rows, '"""']
    out += [
        f'BLOCK = "{block}"',
        "# Line n is layout n: 'FIELD:shift:width' separated by spaces (an empty line: no fields).",
        'LAYOUTS = """\\', *layouts, '"""',
        "# One line per MMIO register: name, dword offset (hex), base index, layout.",
        'REGS = """\\', *reg_lines, '"""',
        "# One line per register outside the MMIO BAR: name, SPACES index, address (hex), layout.",
        "SPACES = (" + "".join(f'"{s}", ' for s in spaces).rstrip() + ")",
        'NON_MMIO = """\\', *nm_lines, '"""',
        *defaults,
    ]
    return "\n".join(out) + "\n"


def generate(tree: HeaderTree, outdir: Path) -> list[Path]:
    """Writes regs_<block>.py for every block into outdir; returns the paths."""
    paths = []
    for block in BLOCKS:
        path = Path(outdir) / f"regs_{block}.py"
        path.write_text(render(block, tree))
        paths.append(path)
    return paths
