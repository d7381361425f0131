"""tools/fuzz/firmware: a short run finds nothing unexpected, and its oracle does flag what it must."""
import struct

import pytest

from tools.fuzz import firmware as fz


@pytest.fixture(autouse=True)
def _firmware(monkeypatch, debian_firmware):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))


def test_a_short_run_has_only_expected_outcomes():
    parsed, booted = fz.run(seed=0, budget=600, boots=12)
    assert parsed.findings == [] and booted.findings == [], parsed.table() + "\n" + booted.table()
    outcomes = {o for _, o in parsed.counts} | {o for _, o in booted.counts}
    # every defence took part: the parser, the pin (override directory) and the simulated PSP
    assert {"FirmwareError", "accepted: to the PSP", "pin refused", "PSP refused"} <= outcomes, outcomes
    assert parsed.cases == 600 and booted.cases == 12


def test_cases_are_reproducible_from_seed_and_index():
    files = fz.load_pinned()
    a, b = (fz.make_case(7, 123, files, sorted(files)) for _ in range(2))
    assert (a.label, a.data) == (b.label, b.data)
    assert fz.make_case(8, 123, files, sorted(files)).label != a.label or \
        fz.make_case(8, 123, files, sorted(files)).data != a.data


def test_a_raw_exception_in_the_parser_is_a_finding(monkeypatch):
    def broken(name, data):
        raise IndexError("index out of range")
    monkeypatch.setattr(fz, "parse", broken)
    files = fz.load_pinned()
    case = fz.make_case(0, 0, files, sorted(files))
    outcome, detail, bad = fz.parse_outcome(case, {}, 2.0)
    assert bad and outcome == "raw IndexError" and "index out of range" in detail


def test_a_parser_that_hangs_is_a_finding(monkeypatch):
    def forever(name, data):
        while True:
            pass
    monkeypatch.setattr(fz, "parse", forever)
    files = fz.load_pinned()
    outcome, _, bad = fz.parse_outcome(fz.make_case(0, 0, files, sorted(files)), {}, 0.2)
    assert bad and outcome == "hang"


def _mec_with_flipped_code(files):
    data = bytearray(files["gc_11_0_0_mec.bin"])
    data[struct.unpack_from("<I", data, 24)[0] + 100] ^= 1   # a byte of the RS64_MEC code
    return fz.Case(0, "gc_11_0_0_mec.bin", "bitflip", "code byte", bytes(data))


def test_the_psp_refuses_a_flipped_code_byte():
    files = fz.load_pinned()
    reference = {n: fz.received(fz.parse(n, b)) for n, b in files.items()}
    outcome, detail, bad = fz.boot_outcome(_mec_with_flipped_code(files), files, reference, "am:sim", False, 60)
    assert (outcome, bad) == ("PSP refused", False) and "gc_11_0_0_mec.bin RS64_MEC" in detail


def test_a_psp_that_accepts_anything_is_caught(monkeypatch):
    # The oracle's negative: with the simulated PSP's payload check removed, the same case boots, and the
    # fuzzer must call that a boot with corrupt firmware.
    from gpusim import psp
    monkeypatch.setattr(psp.PSP, "_payload", lambda self, what, addr, size, want: psp.TEE_SUCCESS)
    files = fz.load_pinned()
    reference = {n: fz.received(fz.parse(n, b)) for n, b in files.items()}
    outcome, detail, bad = fz.boot_outcome(_mec_with_flipped_code(files), files, reference, "am:sim", False, 60)
    assert bad and outcome == "booted with corrupt firmware" and "gc_11_0_0_mec.bin" in detail


def test_a_corrupt_mec_entry_point_stops_the_boot_naming_the_file():
    # Found by the fuzzer (seed 0): ucode_start_addr_hi overflowed; the boot stopped with "the MEC did not
    # come up" and nothing pointed at the firmware file.
    files = fz.load_pinned()
    data = bytearray(files["gc_11_0_0_mec.bin"])
    struct.pack_into("<I", data, 56, 0x63621)   # gfx_firmware_header_v2_0.ucode_start_addr_hi
    case = fz.Case(0, "gc_11_0_0_mec.bin", "overflow", "ucode_start_addr_hi", bytes(data))
    reference = {n: fz.received(fz.parse(n, b)) for n, b in files.items()}
    outcome, detail, bad = fz.boot_outcome(case, files, reference, "am:sim", False, 60)
    assert (outcome, bad) == ("boot stopped naming the file", False)
    assert "gc_11_0_0_mec.bin, ucode_start_addr_lo/hi" in detail and "0x63621" in detail


def test_the_command_prints_a_table_and_exits_0(capsys):
    assert fz.main(["--budget", "50", "--boots", "2", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "firmware parse: 50 cases, 0 unexpected" in out and "firmware boot: 2 cases, 0 unexpected" in out


def _boot(file, data):
    files = fz.load_pinned()
    reference = {n: fz.received(fz.parse(n, b)) for n, b in files.items()}
    return fz.boot_outcome(fz.Case(0, file, "regression", "", data), files, reference, "am:sim", False, 60)


def test_a_ta_file_in_place_of_the_sos_package_is_a_firmware_error():
    # Found by the 100,000-case run (seed 1, case 100868): the TA file parses as a PSP v2.0 package whose
    # descriptors read as SOS, TOC and SPL; the bootloader step then raised a raw KeyError 'KDB' (as AMError).
    files = fz.load_pinned()
    outcome, detail, bad = _boot("psp_13_0_0_sos.bin", files["psp_13_0_7_ta.bin"])
    assert (outcome, bad) == ("FirmwareError", False)
    assert "psp_13_0_0_sos.bin: the package has no KDB component, which LOAD_TOS_SPL_TABLE stages" in detail


def test_an_rlc_file_with_a_v2_0_header_is_refused_at_autoload_naming_the_files():
    # Found by the 100,000-case run (seed 1, case 100424): an RLC header v2.0 is valid upstream (only RLC_G),
    # so the RLC pieces the autoload needs are never loaded; the refusal named no file.
    files = fz.load_pinned()
    data = bytearray(files["gc_11_0_0_rlc.bin"])
    struct.pack_into("<H", data, 10, 0)   # header_version_minor
    outcome, detail, bad = _boot("gc_11_0_0_rlc.bin", bytes(data))
    assert (outcome, bad) == ("PSP refused", False)
    assert "AUTOLOAD_RLC of the RLC, after the components of" in detail and "gc_11_0_0_rlc.bin" in detail


def test_the_smu_files_soft_pptables_are_not_loads():
    # Found by the 100,000-case run (seed 1, case 100960): a changed pptable_count was called a boot with
    # corrupt firmware, but no soft PPTable is sent anywhere (SCPM: the PSP owns it).
    files = fz.load_pinned()
    data = bytearray(files["smu_13_0_0.bin"])
    struct.pack_into("<I", data, 36, 5)   # smc_firmware_header_v2_1.pptable_count, 6 in the file
    assert _boot("smu_13_0_0.bin", bytes(data))[:1] == ("booted: loads unchanged",)


def test_a_byte_of_the_spl_component_is_not_a_load():
    # The sos package's SPL is never staged on MP0 13 (TOS_SPL_TABLE stages the KDB): a flip in it boots,
    # and what was staged is still pinned bytes. The oracle compares what the driver staged, not the parse.
    files = fz.load_pinned()
    spl = fz.parse("psp_13_0_0_sos.bin", files["psp_13_0_0_sos.bin"]).component("SPL")
    data = bytearray(files["psp_13_0_0_sos.bin"])
    data[spl.offset + spl.size // 2] ^= 0x10
    assert _boot("psp_13_0_0_sos.bin", bytes(data))[:1] == ("booted: loads unchanged",)
