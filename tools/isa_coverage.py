"""Which instructions clang-15 emits for gfx1100 on the project's corpus, and whether the wave executor runs each.

    python -m tools.isa_coverage [O0 O3 ...] [--jobs N] [--list] [--no-objdump]

The corpus: the OpenCL C kernels of the ISA tests (tests/rdna3/kernels) and of the hcq tests
(tests/hcq/kernels), and the kernels the compiler's LLVM path generates (compiler_bridge.codegen.llvm) for
its samples (codegen_samples) and for a set of tensor programs (movement, matmul, reductions, casts,
integer division). Each is compiled with clang-15 at every level asked (default -O0 -O1 -O2 -O3; compiles
go through rdna3.opencl's cache, in parallel), every instruction of every code object's
.text is decoded with rdna3 and compiled by the executor (rdna3.wave_compile.compile_instruction),
which refuses what it does not model. llvm-objdump-15's mnemonics are compared with the decoder's as a
cross-check. Exit status 1 when an instruction is not executable or the two disassemblers disagree.
"""
from __future__ import annotations

import argparse
import io
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CL_DIRS = (ROOT / "tests" / "rdna3" / "kernels", ROOT / "tests" / "hcq" / "kernels")
LEVELS = ("-O0", "-O1", "-O2", "-O3")


def _inline_includes(path: Path) -> str:
    """The source with its local #include "x.h" lines replaced by the header (so the compile cache's
    key covers the header too)."""
    out = []
    for line in path.read_text().splitlines():
        m = re.match(r'\s*#include\s+"([^"]+)"', line)
        if m and (path.parent / m.group(1)).is_file():
            out.append(_inline_includes(path.parent / m.group(1)))
        elif not m or m.group(1) != "driverless_cl.h":   # the shipped header: compile_opencl force-includes it
            out.append(line)
    return "\n".join(out) + "\n"


def tensor_programs():
    """(name, fn(T) -> Tensor) for the tensor programs whose kernels join the corpus."""
    import numpy as np
    rng = np.random.default_rng(0)
    f = lambda *s: rng.uniform(-2, 2, s).astype(np.float32)  # noqa: E731
    i = lambda *s: rng.integers(-50, 50, s).astype(np.int32)  # noqa: E731
    return [
        ("transpose", lambda T: T(f(4, 6, 5)).permute(2, 0, 1)),
        ("transpose_add", lambda T: T(f(4, 6, 5)).transpose(0, 1) + 1),
        ("flip_slice", lambda T: T(f(4, 6, 5))[1:4:2, ::-1, 3]),
        ("pad", lambda T: T(f(4, 6, 5)).pad(((1, 0), (0, 2), (3, 1)), value=-1.5)),
        ("cat", lambda T: type(T(f(1))).cat([T(f(4, 6, 5)), T(f(4, 2, 5))], axis=1)),
        ("matmul", lambda T: T(f(7, 13)) @ T(f(13, 5))),
        ("mlp_softmax", lambda T: ((T(f(9, 10)) @ T(f(10, 17)) + T(f(17))).relu() @ T(f(17, 3))).softmax(-1)),
        ("reduce_axes", lambda T: T(f(3, 5, 7)).mean((0, 2))),
        ("int_ops", lambda T: (T(i(3, 7)) * T(i(7)) - 3).max(axis=1)),
        ("int_div", lambda T: T(i(3, 7)) / (T(i(7)) + 60)),
        ("compare_where", lambda T: (T(f(6, 5)) > T(f(5))).where(T(f(6, 5)), 2.0)),
        ("casts", lambda T: T(f(9)).cast("int32").cast("float32") + T(f(9)).cast("bool").cast("float32")),
        ("unary", lambda T: T(f(7, 13)).exp().log().sqrt().tanh().sigmoid()),
    ]


def corpus() -> dict[str, str]:
    """{name: OpenCL C source}."""
    from compiler_bridge import schedule
    from compiler_bridge.codegen import llvm as codegen_llvm, samples as codegen_samples
    from compiler_bridge.tensor import Tensor
    out = {}
    for d in CL_DIRS:
        for p in sorted(d.glob("*.cl")):
            out[f"{d.parent.name}/{p.stem}"] = _inline_includes(p)
    for name, s in codegen_samples.samples().items():
        out[f"llvm/{name}"] = codegen_llvm.opencl_source(s.kernel)
    T = lambda a: Tensor(a, device="c")  # noqa: E731   scheduled only, never run
    for name, prog in tensor_programs():
        for k, item in enumerate(schedule.schedule([prog(T).node])):
            out[f"tensor/{name}.{k}"] = codegen_llvm.opencl_source(item.kernel)
    return out


def compile_corpus(levels=LEVELS, jobs: int = 8, sources: dict | None = None) -> dict[tuple[str, str], bytes]:
    """{(name, level): code object} for every corpus source at every level, through the compile cache."""
    from rdna3.opencl import compile_opencl
    sources = corpus() if sources is None else sources
    todo = [(n, lv) for lv in levels for n in sources]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        objs = pool.map(lambda t: compile_opencl(sources[t[0]], opt=t[1]), todo)
        return dict(zip(todo, objs))


@dataclass
class Finding:
    mnemonic: str           # op + encoding suffix, as LLVM prints it
    where: list = field(default_factory=list)     # (source, level, function+offset, text)
    why: str = ""


def text_functions(co: bytes):
    """[(function name, its bytes)] of a code object's .text (kernels and called functions)."""
    from elftools.elf.elffile import ELFFile
    elf = ELFFile(io.BytesIO(co))
    text = elf.get_section_by_name(".text")
    base, data = text["sh_addr"], text.data()
    syms = sorted((s["st_value"], s["st_size"], s.name) for s in elf.get_section_by_name(".symtab").iter_symbols()
                  if s["st_info"]["type"] == "STT_FUNC" and s["st_size"])
    return [(name, base + (va - base), data[va - base:va - base + size]) for va, size, name in syms]


class _Prog:
    nv = 256
    name = "coverage"

    def where(self, pc):
        return f"{pc:#x}"


def executor_gaps(co: bytes, source: str = "", level: str = "") -> tuple[dict, dict]:
    """({mnemonic: Finding} of instructions the executor refuses, {mnemonic: count} of all)."""
    from rdna3 import decode
    from rdna3.wave_compile import Unsupported, compile_instruction
    gaps, seen = {}, defaultdict(int)
    prog = _Prog()
    for fname, va, code in text_functions(co):
        off = 0
        while off < len(code):
            inst = decode(code, off)
            mn = inst.op + inst.enc_suffix
            seen[mn] += 1
            if inst.op != "s_code_end":
                try:
                    compile_instruction(inst, va + off, prog)
                except (Unsupported, KeyError, ValueError, IndexError) as e:
                    g = gaps.setdefault(mn, Finding(mn, why=f"{type(e).__name__}: {e}"))
                    g.where.append((source, level, f"{fname}+{off:#x}", str(inst)))
            off += inst.size
    return gaps, seen


def objdump_mnemonics(co: bytes) -> set[str]:
    """Mnemonics of the .text as llvm-objdump-15 prints them."""
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(co)
        f.flush()
        r = subprocess.run(["llvm-objdump-15", "-d", "--mcpu=gfx1100", f.name], capture_output=True, text=True,
                           check=True)
    out = set()
    for line in r.stdout.splitlines():
        m = re.match(r"\s+([a-z_0-9]+)\b.*//\s*[0-9A-F]+:", line)
        if m:
            out.add(m.group(1))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("levels", nargs="*", default=list(LEVELS), help="clang optimisation levels (O0 O3 or -O0 ...)")
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--list", action="store_true", help="list every mnemonic with its count")
    ap.add_argument("--no-objdump", action="store_true", help="skip the llvm-objdump-15 cross-check")
    argv = sys.argv[1:] if argv is None else list(argv)
    a = ap.parse_args([x.lstrip("-") if re.fullmatch(r"-O[0-3s]", x) else x for x in argv])
    a.levels = ["-" + x.lstrip("-") for x in a.levels]
    objs = compile_corpus(a.levels, a.jobs)
    gaps, counts, ours, theirs = {}, defaultdict(int), set(), set()
    for (name, level), co in sorted(objs.items()):
        g, seen = executor_gaps(co, name, level)
        for mn, f in g.items():
            gaps.setdefault(mn, Finding(mn, why=f.why)).where.extend(f.where)
        for mn, n in seen.items():
            counts[mn] += n
        ours |= {m.replace("_e32", "").replace("_e64", "") for m in seen} | {"s_code_end"}
        if not a.no_objdump and shutil.which("llvm-objdump-15"):
            theirs |= {m.replace("_e32", "").replace("_e64", "") for m in objdump_mnemonics(co)} | {"s_code_end"}
    print(f"{len(objs)} code objects ({len(objs) // max(1, len(a.levels))} sources x {' '.join(a.levels)}), "
          f"{sum(counts.values())} instructions, {len(counts)} distinct mnemonics")
    if a.list:
        for mn in sorted(counts):
            print(f"  {counts[mn]:7d}  {mn}{'   NOT EXECUTABLE' if mn in gaps else ''}")
    rc = 0
    for mn, f in sorted(gaps.items()):
        rc = 1
        src, level, where, text = f.where[0]
        print(f"not executable: {mn} ({len(f.where)} times; first {src} {level} {where}: {text}): {f.why}")
    if theirs and ours != theirs:
        rc = 1
        print(f"disassemblers disagree: only llvm-objdump-15: {sorted(theirs - ours)}; "
              f"only rdna3: {sorted(ours - theirs)}")
    if rc == 0:
        print("every instruction is executable")
    return rc


if __name__ == "__main__":
    sys.exit(main())
