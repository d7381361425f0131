"""A mode1 reset through the USB bridge: the reset GPU refuses reads (its BARs are unassigned until the
config space is restored) and over USB that refusal is an Unsupported Request completion, an error, where a
root complex would complete with all ones. The SMU's mailbox poll and the memsize wait after the reset
take it as the GPU gone or not back yet: a forced cold boot (and every recovery after a dead AM run, which
resets through the SMU) works over USB."""
import hcq


def test_forced_cold_boot_over_usb_resets_and_runs(debian_firmware, monkeypatch):
    monkeypatch.setenv("DRIVERLESS_FIRMWARE_DIR", str(debian_firmware))
    hcq.open("am:sim:usb").close()
    dev = hcq.open("am:sim:usb", cold=True)     # the SMU runs: mode1 reset first
    try:
        assert dev.gpu.boot_report.mode1_reset, dev.gpu.boot_report
        buf = dev.alloc(4096)
        dev.copyin(buf, bytes(range(256)) * 16)
        assert dev.copyout(buf) == bytes(range(256)) * 16
    finally:
        dev.close()
