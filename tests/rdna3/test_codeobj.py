"""AMDHSA code objects: what we read equals what LLVM's tools see; what we write, they accept."""
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from rdna3.codeobj import (CodeObject, CodeObjectError, KernelArg, KernelSpec, register_usage,
                               write_code_object)
from rdna3.wave import dispatch, pack_kernargs
from rdna3.wave_memory import FlatMemory

needs_llvm = pytest.mark.skipif(not shutil.which("llvm-readelf-15"), reason="llvm-15 tools not installed")


def tool(*cmd) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}: {r.stderr}"
    assert "warning" not in r.stderr.lower() and "error" not in r.stderr.lower(), r.stderr
    return r.stdout


def parse_yaml(text: str):
    """The YAML subset llvm-readelf prints for AMDGPU metadata: block maps, block lists, scalars."""
    lines = [(len(l) - len(l.lstrip(" ")), l.strip()) for l in text.splitlines()
             if l.strip() and l.strip() not in ("---", "...")]

    def scalar(s):
        if s.startswith("'") and s.endswith("'"):
            return s[1:-1]
        if s in ("true", "false"):
            return s == "true"
        return int(s) if re.fullmatch(r"-?\d+", s) else s

    def block(i, indent):
        if lines[i][1].startswith("- "):
            out = []
            while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
                item = lines[i][1][2:]
                if ":" in item and not item.startswith("'"):
                    # a map whose first key shares the dash's line
                    lines[i] = (indent + 2, item)
                    val, i = block(i, indent + 2)
                else:
                    val, i = scalar(item), i + 1
                out.append(val)
            return out, i
        out = {}
        while i < len(lines) and lines[i][0] == indent and not lines[i][1].startswith("- "):
            key, _, rest = lines[i][1].partition(":")
            rest = rest.strip()
            if rest:
                out[key], i = scalar(rest), i + 1
            else:
                out[key], i = block(i + 1, lines[i + 1][0])
        return out, i

    return block(0, lines[0][0])[0]


def readelf_metadata(path):
    text = tool("llvm-readelf-15", "--notes", str(path))
    return parse_yaml(text.split("AMDGPU Metadata:", 1)[1])


def readelf_symbols(path):
    syms = {}
    for line in tool("llvm-readelf-15", "-s", str(path)).splitlines():
        f = line.split()
        if len(f) == 8 and f[0].endswith(":") and f[3] in ("FUNC", "OBJECT"):
            syms[f[7]] = (int(f[1], 16), int(f[2]), f[3])
    return syms


def objdump_section(path, section):
    """{address: bytes} of a section's hex dump."""
    out = bytearray()
    start = None
    for line in tool("llvm-objdump-15", "-s", "-j", section, str(path)).splitlines():
        m = re.match(r"^ ([0-9a-f]+) ((?:[0-9a-f]{2,8} ?)+)", line)
        if m:
            start = int(m.group(1), 16) if start is None else start
            out += bytes.fromhex(m.group(2).replace(" ", "")[:32])
    return start, bytes(out)


def objdump_instructions(path, symbol):
    text = tool("llvm-objdump-15", "-d", "--no-show-raw-insn", f"--disassemble-symbols={symbol}", str(path))
    return [re.sub(r"\s+", " ", l.split("//")[0]).strip() for l in text.splitlines()
            if l.startswith("\t") and "s_code_end" not in l]


# ------------------------------------------------------------------------------------------------
# reading


@needs_llvm
def test_corpus_metadata_and_symbols_match_llvm(kernel_corpus):
    def llvm_view(path):
        return readelf_metadata(path), readelf_symbols(path), objdump_section(path, ".rodata")

    with ThreadPoolExecutor(max_workers=8) as pool:
        views = dict(zip(kernel_corpus, pool.map(llvm_view, kernel_corpus.values())))
    for name, path in kernel_corpus.items():
        co = CodeObject.load(path)
        assert co.arch == "gfx1100" and co.abi_version == 2
        meta, syms, (start, rodata) = views[name]
        assert co.metadata["amdhsa.target"] == meta["amdhsa.target"] == "amdgcn-amd-amdhsa--gfx1100"
        (km,) = meta["amdhsa.kernels"]
        k = co.kernel(name)
        for key in (".kernarg_segment_size", ".group_segment_fixed_size", ".private_segment_fixed_size",
                    ".sgpr_count", ".vgpr_count", ".wavefront_size", ".max_flat_workgroup_size", ".symbol"):
            assert k.metadata[key] == km[key], (name, key)
        assert [(a.offset, a.size, a.value_kind, a.address_space) for a in k.args] == \
               [(a[".offset"], a[".size"], a[".value_kind"], a.get(".address_space")) for a in km[".args"]]
        assert syms[name][0] == k.code_address and syms[name][1] == len(k.code)
        assert syms[name + ".kd"] == (k.descriptor_address, 64, "OBJECT")
        kd_bytes = rodata[k.descriptor_address - start:][:64]
        assert k.descriptor.to_bytes() == kd_bytes
        # the descriptor agrees with the metadata LLVM wrote next to it
        d = k.descriptor
        assert d.group_segment_fixed_size == km[".group_segment_fixed_size"]
        assert d.kernarg_size == km[".kernarg_segment_size"]
        assert d.wave32 and d.vgpr_count >= km[".vgpr_count"] > d.vgpr_count - 8
        assert d.properties["enable_sgpr_kernarg_segment_ptr"] == 1
        assert register_usage(k.code) == (km[".vgpr_count"], km[".sgpr_count"]), name


@needs_llvm
def test_descriptor_fields_from_amdhsa_directives(tmp_path):
    """llvm-mc builds a descriptor from .amdhsa_* directives; every field decodes back."""
    fields = {
        "next_free_vgpr": 37, "next_free_sgpr": 20, "group_segment_fixed_size": 1234,
        "private_segment_fixed_size": 48, "kernarg_size": 72, "user_sgpr_dispatch_ptr": 1,
        "user_sgpr_queue_ptr": 1, "user_sgpr_kernarg_segment_ptr": 1, "user_sgpr_dispatch_id": 1,
        "user_sgpr_private_segment_size": 1, "wavefront_size32": 1, "uses_dynamic_stack": 1,
        "enable_private_segment": 1, "system_sgpr_workgroup_id_x": 1, "system_sgpr_workgroup_id_y": 1,
        "system_sgpr_workgroup_id_z": 0, "system_sgpr_workgroup_info": 1, "system_vgpr_workitem_id": 2,
        "float_round_mode_32": 1, "float_round_mode_16_64": 2, "float_denorm_mode_32": 1,
        "float_denorm_mode_16_64": 2, "dx10_clamp": 0, "ieee_mode": 0, "fp16_overflow": 1,
        "workgroup_processor_mode": 0, "memory_ordered": 1, "forward_progress": 1,
        "exception_fp_ieee_invalid_op": 1, "exception_fp_ieee_div_zero": 1,
        "exception_fp_ieee_underflow": 1, "exception_int_div_zero": 1,
    }
    src = ".amdgcn_target \"amdgcn-amd-amdhsa--gfx1100\"\n.text\n.globl probe\n.p2align 8\n" \
          ".type probe,@function\nprobe:\n  s_endpgm\n.rodata\n.p2align 6\n.amdhsa_kernel probe\n" + \
          "".join(f"  .amdhsa_{k} {v}\n" for k, v in fields.items()) + ".end_amdhsa_kernel\n"
    (tmp_path / "p.s").write_text(src)
    tool("llvm-mc-15", "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-filetype=obj",
         str(tmp_path / "p.s"), "-o", str(tmp_path / "p.o"))
    tool("ld.lld-15", "-shared", str(tmp_path / "p.o"), "-o", str(tmp_path / "p.so"))
    k = CodeObject.load(tmp_path / "p.so").kernel("probe")
    d = k.descriptor
    assert (d.group_segment_fixed_size, d.private_segment_fixed_size, d.kernarg_size) == (1234, 48, 72)
    assert k.descriptor_address + d.kernel_code_entry_byte_offset == k.code_address
    assert d.vgpr_count == 40                       # 37 rounded up to the wave32 granule of 8
    r1, r2, p = d.rsrc1, d.rsrc2, d.properties
    assert (r1["float_round_mode_32"], r1["float_round_mode_16_64"]) == (1, 2)
    assert (r1["float_denorm_mode_32"], r1["float_denorm_mode_16_64"]) == (1, 2)
    assert (r1["enable_dx10_clamp"], r1["enable_ieee_mode"], r1["fp16_ovfl"]) == (0, 0, 1)
    assert (r1["wgp_mode"], r1["mem_ordered"], r1["fwd_progress"]) == (0, 1, 1)
    assert r2["enable_private_segment"] == 1 and r2["user_sgpr_count"] == 9
    assert (r2["enable_sgpr_workgroup_id_x"], r2["enable_sgpr_workgroup_id_y"], r2["enable_sgpr_workgroup_id_z"]) == (1, 1, 0)
    assert r2["enable_sgpr_workgroup_info"] == 1 and r2["enable_vgpr_workitem_id"] == 2
    assert (r2["enable_exception_ieee_754_fp_invalid_operation"], r2["enable_exception_fp_denormal_source"],
            r2["enable_exception_ieee_754_fp_division_by_zero"], r2["enable_exception_ieee_754_fp_overflow"],
            r2["enable_exception_ieee_754_fp_underflow"], r2["enable_exception_ieee_754_fp_inexact"],
            r2["enable_exception_int_divide_by_zero"]) == (1, 0, 1, 0, 1, 0, 1)
    assert p["uses_dynamic_stack"] == 1 and p["enable_wavefront_size32"] == 1
    assert d.user_sgpr_layout() == [("dispatch_ptr", 0, 2), ("queue_ptr", 2, 2), ("kernarg_segment_ptr", 4, 2),
                                    ("dispatch_id", 6, 2), ("private_segment_size", 8, 1)]


# ------------------------------------------------------------------------------------------------
# writing


def _respec(k, **kw):
    """A KernelSpec for an existing kernel's code, with the layout the code was compiled for."""
    r2 = k.descriptor.rsrc2
    return KernelSpec(k.name, k.code, args=k.args, group_segment_size=k.descriptor.group_segment_fixed_size,
                      user_sgprs=tuple(n for n, _, _ in k.descriptor.user_sgpr_layout()),
                      user_sgpr_count=r2["user_sgpr_count"],
                      workgroup_ids=sum(r2[f"enable_sgpr_workgroup_id_{a}"] for a in "xyz"),
                      workitem_ids=r2["enable_vgpr_workitem_id"] + 1, **kw)


@needs_llvm
def test_written_code_object_is_read_by_llvm(kernel_corpus, tmp_path):
    names = ["add_f32", "matmul_tiled", "reduce_sum", "grid3d"]
    kernels = [CodeObject.load(kernel_corpus[n]).kernel(n) for n in names]
    path = tmp_path / "ours.so"
    path.write_bytes(write_code_object([_respec(k) for k in kernels]))
    tool("llvm-readelf-15", "-a", str(path))            # no warnings, no errors
    meta = readelf_metadata(path)
    assert meta["amdhsa.target"] == "amdgcn-amd-amdhsa--gfx1100"
    by_name = {k[".name"]: k for k in meta["amdhsa.kernels"]}
    syms = readelf_symbols(path)
    ours = CodeObject.load(path)
    for k in kernels:
        m = by_name[k.name]
        for key in (".vgpr_count", ".sgpr_count", ".group_segment_fixed_size", ".kernarg_segment_size",
                    ".wavefront_size"):
            assert m[key] == k.metadata[key], (k.name, key)
        assert [(a[".offset"], a[".size"], a[".value_kind"]) for a in m[".args"]] == \
               [(a.offset, a.size, a.value_kind) for a in k.args]
        assert syms[k.name + ".kd"][1:] == (64, "OBJECT") and syms[k.name][2] == "FUNC"
        # llvm-objdump disassembles our .text to the same instructions as clang's
        assert objdump_instructions(path, k.name) == objdump_instructions(kernel_corpus[k.name], k.name)
        # and the descriptor fields survive: everything but the entry offset is the program's
        o = ours.kernel(k.name)
        assert o.code == k.code
        assert o.descriptor.rsrc2 == k.descriptor.rsrc2
        assert o.descriptor.properties == k.descriptor.properties
        assert o.descriptor.vgpr_count == k.descriptor.vgpr_count
        assert o.descriptor.group_segment_fixed_size == k.descriptor.group_segment_fixed_size
        start, rodata = objdump_section(path, ".rodata")
        assert rodata[o.descriptor_address - start:][:64] == o.descriptor.to_bytes()


def test_written_code_object_runs(kernel_corpus, tmp_path):
    k = CodeObject.load(kernel_corpus["add_f32"]).kernel()
    co = CodeObject(write_code_object([_respec(k)]))
    n = 77
    mem = FlatMemory()
    a, b = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    pa, pb, po = mem.upload(a), mem.upload(b), mem.alloc(4 * n)
    dispatch(co, "add_f32", mem, (n,), (32,), pack_kernargs(co.kernel(), [po, pa, pb, np.uint32(n)]))
    assert np.array_equal(mem.array(po, np.float32, n), a + b)


def test_descriptor_follows_program():
    # v_mov_b32 v7, s9 ; s_endpgm  -- uses v7 and s9, no VCC
    code = bytes([0x09, 0x02, 0x0e, 0x7e, 0x00, 0x00, 0xb0, 0xbf])
    spec = KernelSpec("k", code, args=[KernelArg(0, 8, "global_buffer", "global"), KernelArg(8, 4, "by_value")],
                      group_segment_size=3000, user_sgprs=("dispatch_ptr", "kernarg_segment_ptr"),
                      workgroup_ids=2, workitem_ids=3)
    assert (spec.vgpr_count, spec.sgpr_count) == (8, 10)
    k = CodeObject(write_code_object([spec])).kernel()
    d = k.descriptor
    assert d.vgpr_count == 8 and d.group_segment_fixed_size == 3000 and d.kernarg_size == 12
    assert d.user_sgpr_layout() == [("dispatch_ptr", 0, 2), ("kernarg_segment_ptr", 2, 2)]
    assert d.rsrc2["user_sgpr_count"] == 4 and d.rsrc2["enable_vgpr_workitem_id"] == 2
    assert (d.rsrc2["enable_sgpr_workgroup_id_y"], d.rsrc2["enable_sgpr_workgroup_id_z"]) == (1, 0)
    assert k.metadata[".vgpr_count"] == 8 and k.metadata[".sgpr_count"] == 10
    assert k.code == code


# ------------------------------------------------------------------------------------------------
# errors


def test_non_amdgpu_elf_is_rejected(tmp_path):
    host = tmp_path / "host.o"
    if shutil.which("clang-15"):
        (tmp_path / "h.c").write_text("int f(void) { return 1; }\n")
        subprocess.run(["clang-15", "-c", str(tmp_path / "h.c"), "-o", str(host)], check=True)
    else:
        host.write_bytes(open("/bin/true", "rb").read())
    with pytest.raises(CodeObjectError, match="not EM_AMDGPU"):
        CodeObject.load(host)


def test_truncated_and_garbage_files_are_rejected(kernel_corpus, tmp_path):
    data = open(kernel_corpus["add_f32"], "rb").read()
    for cut in (len(data) // 2, len(data) - 100, 40):
        with pytest.raises(CodeObjectError, match="truncated|not a readable ELF"):
            CodeObject(data[:cut], "cut.so")
    with pytest.raises(CodeObjectError, match="not EM_AMDGPU"):
        CodeObject(b"\x7fELF" + b"\x02\x01\x01" + bytes(100))
    with pytest.raises(CodeObjectError, match="not a readable ELF"):
        CodeObject(b"hello, world" * 10)


def test_missing_kernel_is_named(kernel_corpus):
    co = CodeObject.load(kernel_corpus["add_f32"])
    with pytest.raises(CodeObjectError, match=r"no kernel named 'mul_f32'; it has \['add_f32'\]"):
        co.kernel("mul_f32")


def test_writer_rejects_bad_specs():
    code = bytes([0x00, 0x00, 0xb0, 0xbf])
    with pytest.raises(ValueError, match="unknown user SGPRs"):
        write_code_object([KernelSpec("k", code, user_sgprs=("kernarg_ptr",))])
    with pytest.raises(ValueError, match="exceeds gfx11 limits"):
        write_code_object([KernelSpec("k", code, vgpr_count=300)])
    with pytest.raises(ValueError, match="unique"):
        write_code_object([KernelSpec("k", code), KernelSpec("k", code)])
    with pytest.raises(ValueError, match="unknown target"):
        write_code_object([KernelSpec("k", code)], arch="gfx90a")
