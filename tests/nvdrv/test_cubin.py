"""Cubins read with pyelftools (nvdrv.cubin): kernels, parameters from EIATTR_KPARAM_INFO, constant bank 0,
shared memory, registers, launch bounds, the SM from e_flags; damaged or foreign files are clear errors
naming the file and the field. The cubins are NVRTC's (the tests skip without it)."""
import io
import struct

import pytest
from elftools.elf.elffile import ELFFile

from nvdrv import cubin, nvrtc
from nvdrv.cubin import CubinError, parse_attributes, parse_cubin

NO_NVRTC = f"NVRTC is not installed (pip install {nvrtc.PIP_PACKAGE}; `make test` installs it)"
needs_nvrtc = pytest.mark.skipif(not nvrtc.available(), reason=NO_NVRTC)

SOURCE = r'''
extern "C" __global__ void saxpy(float *out, const float *x, const float *y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
extern "C" __global__ void __launch_bounds__(128) block_sum(float *out, const float *x, char c, double d) {
  __shared__ float s[128];
  s[threadIdx.x] = x[blockIdx.x * 128 + threadIdx.x] + c + d;
  __syncthreads();
  for (int k = 64; k > 0; k >>= 1) { if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k]; __syncthreads(); }
  if (threadIdx.x == 0) atomicAdd(out, s[0]);
}
struct Big { int a[40]; };
extern "C" __global__ void by_value(Big b, int *o) { o[threadIdx.x] = b.a[threadIdx.x % 40]; }
extern "C" __global__ void no_params() { }
'''


@pytest.fixture(scope="module")
def sm90():
    if not nvrtc.available():
        pytest.skip(NO_NVRTC)
    return nvrtc.compile_cuda(SOURCE, "sample.cu", "sm_90")


def test_kernels_and_header(sm90):
    c = parse_cubin(sm90, "sample.cubin", sm=90)
    assert (c.sm, c.arch, c.virtual_sm, c.arch_specific, c.abi_version) == (90, "sm_90", 90, False, 7)
    assert sorted(c.kernels) == ["block_sum", "by_value", "no_params", "saxpy"]
    assert c.relocations == {} and c.module_sections == {}


def test_parameters_from_kparam_info(sm90):
    c = parse_cubin(sm90)
    saxpy = c.kernel("saxpy")
    assert saxpy.arg_entries() == [(0, 8, "untyped"), (8, 8, "untyped"), (16, 8, "untyped"), (24, 4, "untyped"),
                                   (28, 4, "untyped")]
    # a char is 1 byte, a double aligned to 8 after it
    assert [(p.offset, p.size) for p in c.kernel("block_sum").params] == [(0, 8), (8, 8), (16, 1), (24, 8)]
    # a 160-byte struct by value, then a pointer
    assert [(p.offset, p.size) for p in c.kernel("by_value").params] == [(0, 160), (160, 8)]
    assert c.kernel("no_params").params == () and c.kernel("no_params").param_size == 0
    # the parameters live in constant bank 0 at EIATTR_PARAM_CBANK's offset (0x210 on sm_90), inside the bank
    assert (saxpy.param_base, saxpy.param_size) == (0x210, 32)
    assert saxpy.const0_size == 0x210 + 32 == len(saxpy.const0)
    assert c.kernel("by_value").param_size == 168


def test_resources(sm90):
    c = parse_cubin(sm90)
    s, b = c.kernel("saxpy"), c.kernel("block_sum")
    assert 4 <= s.registers <= 32 and 4 <= b.registers <= 64
    assert s.code and len(s.code) % 16 == 0                 # sm_90 instructions are 128-bit
    assert b.max_threads == (128, 1, 1) and s.max_threads is None
    assert b.shared_size == 512 + 1024                      # the kernel's 512 bytes after the 1 KiB reserved
    assert b.barriers == 1 and s.barriers == 0
    assert s.exit_offsets and all(o < len(s.code) and o % 16 == 0 for o in s.exit_offsets)
    assert s.cuda_api_version and s.max_reg_count == 255


def test_launch_bounds_are_checked(sm90):
    k = parse_cubin(sm90).kernel("block_sum")
    k.check_block((128, 1, 1))
    k.check_block((64, 2, 1))
    with pytest.raises(CubinError, match=r"block_sum: block \(256, 1, 1\) has 256 threads, more than its "
                                         r"__launch_bounds__ allow \(128"):
        k.check_block((256, 1, 1))


@needs_nvrtc
def test_registers_from_sh_info_on_older_cubins():
    # sm_80 cubins keep the register count in bits 24-31 of the .text section's sh_info, not in EIATTR_REGCOUNT
    data = nvrtc.compile_cuda(SOURCE, "sample.cu", "sm_80")
    c = parse_cubin(data, sm=86)
    assert c.arch == "sm_80" and c.kernel("block_sum").params[2].size == 1
    text = next(s for s in ELFFile(io.BytesIO(data)).iter_sections() if s.name == ".text.saxpy")
    assert c.kernel("saxpy").registers == text["sh_info"] >> 24 > 0


def test_sm_compatibility(sm90):
    c = parse_cubin(sm90)
    assert c.runs_on(90) and c.runs_on(91) and not c.runs_on(89) and not c.runs_on(100)
    with pytest.raises(CubinError, match=r"h100.cubin: built for sm_90, which cannot run on an sm_80 GPU .*"
                                         r"compile for sm_80"):
        parse_cubin(sm90, "h100.cubin", sm=80)
    a = parse_cubin(nvrtc.compile_cuda(SOURCE, arch="sm_90a"))
    assert a.arch == "sm_90a" and a.runs_on(90) and not a.runs_on(91)
    new = parse_cubin(nvrtc.compile_cuda(SOURCE, arch="sm_100"))
    assert (new.sm, new.abi_version) == (100, 8) and new.kernel("saxpy").param_size == 32
    with pytest.raises(CubinError, match="built for sm_100, which cannot run on an sm_90 GPU"):
        parse_cubin(nvrtc.compile_cuda(SOURCE, arch="sm_100"), sm=90)


@needs_nvrtc
def test_module_data_and_relocations_are_reported():
    src = ('__constant__ float table[4] = {1, 2, 3, 4};\n__device__ int counter;\n'
           'extern "C" __global__ void k(float *o) { o[threadIdx.x] = table[threadIdx.x & 3]; atomicAdd(&counter, 1); }\n')
    c = parse_cubin(nvrtc.compile_cuda(src))
    assert c.module_sections.get(".nv.constant3") == 16 and c.module_sections.get(".nv.global") == 4
    assert c.relocations            # the address of `counter` is patched in by a loader


# ----------------------------------------------------------------------------------------- damaged input
def _section(data, name):
    return next(s for s in ELFFile(io.BytesIO(data)).iter_sections() if s.name == name)


def test_not_elf():
    with pytest.raises(CubinError, match=r"x.bin: not an ELF file .*not a cubin"):
        parse_cubin(b"hello, world", "x.bin")


@pytest.mark.parametrize("keep", [16, 64, 1000, -100])
def test_truncated(sm90, keep):
    with pytest.raises(CubinError, match=r"cut.cubin: .*(truncated|not a cubin)"):
        parse_cubin(sm90[:keep], "cut.cubin")


def test_not_a_cuda_elf(sm90):
    data = bytearray(sm90)
    struct.pack_into("<H", data, 18, 224)                    # e_machine: EM_AMDGPU
    with pytest.raises(CubinError, match=r"amd.co: ELF e_machine .*not EM_CUDA"):
        parse_cubin(bytes(data), "amd.co")


def test_unknown_abi_version(sm90):
    data = bytearray(sm90)
    data[8] = 9                                              # EI_ABIVERSION
    with pytest.raises(CubinError, match=r"future.cubin: ELF EI_ABIVERSION 9 .*not a cubin ABI this loader knows"):
        parse_cubin(bytes(data), "future.cubin")


def test_missing_nv_info(sm90):
    data = sm90
    for k in ("saxpy", "block_sum", "by_value", "no_params"):
        data = data.replace(f".nv.info.{k}\0".encode(), f".nv.xxxx.{k}\0".encode())
    with pytest.raises(CubinError, match=r"stripped.cubin: .text.\w+ but no .nv.info.<kernel> section: the "
                                         r"parameter records \(EIATTR_KPARAM_INFO\)"):
        parse_cubin(data, "stripped.cubin")


def _kparam_offsets(data, kernel):
    """File offsets of the flags word of each EIATTR_KPARAM_INFO record of `kernel`."""
    s = _section(data, f".nv.info.{kernel}")
    raw, at, out = s.data(), 0, []
    while at < len(raw):
        fmt, attr, v = struct.unpack_from("<BBH", raw, at)
        if fmt == 4 and attr == cubin.EIATTR_KPARAM_INFO:
            out.append(s["sh_offset"] + at + 4 + 8)
        at += 4 + (v if fmt == 4 else 0)
    return out


def test_kparam_outside_the_parameter_block(sm90):
    data = bytearray(sm90)
    flags_at = _kparam_offsets(sm90, "saxpy")[0]
    flags = struct.unpack_from("<I", data, flags_at)[0]
    struct.pack_into("<I", data, flags_at, (flags & 0x3FFFF) | (64 << 18))     # size 64 > the 32-byte block
    with pytest.raises(CubinError, match=r"bad.cubin: .nv.info.saxpy: EIATTR_KPARAM_INFO parameter \d \(offset \d+, "
                                         r"size 64\) overlaps another or lies outside the 32-byte parameter block"):
        parse_cubin(bytes(data), "bad.cubin")


def test_kparam_not_in_the_constant_bank(sm90):
    data = bytearray(sm90)
    flags_at = _kparam_offsets(sm90, "saxpy")[0]
    struct.pack_into("<I", data, flags_at, struct.unpack_from("<I", data, flags_at)[0] | (1 << 17))
    with pytest.raises(CubinError, match=r".nv.info.saxpy: parameter \d is not passed in the constant bank"):
        parse_cubin(bytes(data), "bad.cubin")


def test_duplicate_ordinals(sm90):
    data = bytearray(sm90)
    for at in _kparam_offsets(sm90, "saxpy"):
        struct.pack_into("<H", data, at - 4, 0)                                # every ordinal 0
    with pytest.raises(CubinError, match=r"EIATTR_KPARAM_INFO ordinals \[0, 0, 0, 0, 0\] are not 0..4 once each"):
        parse_cubin(bytes(data), "bad.cubin")


def test_attribute_records():
    recs = parse_attributes(bytes([3, 0x19, 0x20, 0, 4, 0x1c, 8, 0]) + struct.pack("<II", 0x70, 0x140) + bytes([1, 0x50, 0, 0]))
    assert [(r.name, r.value) for r in recs] == [("EIATTR_CBANK_PARAM_SIZE", 0x20),
                                                  ("EIATTR_EXIT_INSTR_OFFSETS", struct.pack("<II", 0x70, 0x140)),
                                                  ("EIATTR_0x50", 0)]
    with pytest.raises(CubinError, match=r"k.cubin: .nv.info.f: EIATTR_KPARAM_INFO at byte 0 says 12 bytes but the "
                                         r"section ends 1 bytes later"):
        parse_attributes(bytes([4, 0x17, 12, 0, 0]), "k.cubin", ".nv.info.f")
    with pytest.raises(CubinError, match=r"record at byte 4 has format 7, not an EIFMT"):
        parse_attributes(bytes([1, 0x50, 0, 0, 7, 0x17, 0, 0]), "k.cubin")
    with pytest.raises(CubinError, match=r"record at byte 0 is cut short \(2 bytes left\)"):
        parse_attributes(bytes([3, 0x19]), "k.cubin")


def test_command_line(sm90, tmp_path, capsys):
    good, bad = tmp_path / "sample.cubin", tmp_path / "bad.cubin"
    good.write_bytes(sm90)
    bad.write_bytes(sm90[:200])
    assert cubin.main([str(good), "--sm", "90"]) == 0
    out = capsys.readouterr().out
    assert f"{good}: sm_90 (ELF ABI 7), 4 kernel(s)" in out
    assert "block_sum: " in out and "launch bounds (128, 1, 1)" in out
    assert "parameters at 0x210 (32 B): #0 @0+8, #1 @8+8, #2 @16+8, #3 @24+4, #4 @28+4" in out
    assert cubin.main([str(good), str(bad)]) == 1
    assert f"error: {bad}: " in capsys.readouterr().err
    assert cubin.main([str(good), "--sm", "80"]) == 1
    assert "cannot run on an sm_80 GPU" in capsys.readouterr().err
