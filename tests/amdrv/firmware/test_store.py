"""Pinned firmware: verification, override directory, cache, fetching over HTTP, clear errors."""
import http.server
import shutil
import threading
from pathlib import Path

import pytest

from amdrv import chips
from amdrv.firmware import FirmwareError, FirmwareStore, PINS, files_for
from amdrv.firmware.__main__ import main as fw_main

MEC = "gc_11_0_0_mec.bin"


def test_pins_cover_both_chips_and_match_debian_files(debian_firmware):
    assert set(files_for(chips.NAVI31)) | set(files_for(chips.NAVI33)) == set(PINS)
    store = FirmwareStore(override=debian_firmware)
    for name in PINS:
        assert len(store.read(name)) == PINS[name].size


def test_verify_command_passes_on_debian_files(debian_firmware, capsys):
    assert fw_main(["verify", "--dir", str(debian_firmware)]) == 0
    assert f"{len(PINS)}/{len(PINS)} pinned files verified" in capsys.readouterr().out


def _copy(debian_firmware, dest: Path, names) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(debian_firmware / n, dest / n)
    return dest


def test_flipped_byte_names_file_and_hash(debian_firmware, tmp_path):
    d = _copy(debian_firmware, tmp_path / "fw", [MEC])
    data = bytearray((d / MEC).read_bytes())
    data[1000] ^= 0x40
    (d / MEC).write_bytes(data)
    with pytest.raises(FirmwareError, match=rf"{MEC} from .*sha256 .* the pin says {PINS[MEC].sha256}"):
        FirmwareStore(override=d).read(MEC)
    assert fw_main(["verify", "--dir", str(d)]) == 1


def test_truncated_file_names_sizes(debian_firmware, tmp_path):
    d = _copy(debian_firmware, tmp_path / "fw", [MEC])
    (d / MEC).write_bytes((d / MEC).read_bytes()[:4096])
    with pytest.raises(FirmwareError, match=rf"{MEC} from .* is 4096 bytes, the pin says {PINS[MEC].size}"):
        FirmwareStore(override=d).read(MEC)


def test_offline_with_nothing_cached_lists_every_missing_file_once(debian_firmware):
    # /lib/firmware holds the files, but nobody named it: no silent fallback.
    names = files_for(chips.NAVI31)
    with pytest.raises(FirmwareError) as e:
        FirmwareStore().read_all(names)
    msg = str(e.value)
    assert all(n in msg for n in names)
    assert "DRIVERLESS_FIRMWARE_DIR" in msg and "seed" in msg and "DRIVERLESS_FIRMWARE_URL" in msg


def test_unknown_name_is_an_error():
    with pytest.raises(FirmwareError, match="not a pinned file"):
        FirmwareStore().read("gc_9_9_9_mec.bin")


def test_override_layout_with_amdgpu_subdir(debian_firmware, tmp_path):
    _copy(debian_firmware, tmp_path / "linux-firmware" / "amdgpu", [MEC])
    store = FirmwareStore(override=tmp_path / "linux-firmware")
    assert store.path(MEC) == tmp_path / "linux-firmware" / "amdgpu" / MEC


def test_seed_then_status(debian_firmware, capsys):
    assert fw_main(["seed", str(debian_firmware)]) == 0
    assert fw_main(["status"]) == 0
    assert f"{len(PINS)}/{len(PINS)} pinned files verified" in capsys.readouterr().out
    assert FirmwareStore().read(MEC) == (debian_firmware / MEC).read_bytes()


def test_corrupt_cache_entry_is_reported_not_used(debian_firmware):
    store = FirmwareStore()
    path = store.store(MEC, (debian_firmware / MEC).read_bytes())
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(FirmwareError, match="cache; delete it to fetch again"):
        store.read(MEC)
    assert fw_main(["status"]) == 1


class _Server:
    """A loopback HTTP server serving a directory, with a switch to serve wrong bytes."""

    def __init__(self, root: Path):
        self.requests = []
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **k):
                super().__init__(*a, directory=str(root), **k)

            def log_message(self, *a):
                outer.requests.append(self.path)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/{{name}}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def served(debian_firmware, tmp_path):
    root = _copy(debian_firmware, tmp_path / "web", files_for(chips.NAVI31))
    srv = _Server(root)
    yield srv, root
    srv.close()


def test_fetch_into_cache_with_progress(served, capsys):
    srv, _ = served
    store = FirmwareStore(urls=(srv.url,), offline=False)
    got = store.read_all(files_for(chips.NAVI31))
    assert {n: len(b) for n, b in got.items()} == {n: PINS[n].size for n in files_for(chips.NAVI31)}
    assert "firmware: fetching gc_11_0_0_mec.bin (407072 bytes)" in capsys.readouterr().err
    n_requests = len(srv.requests)
    srv.close()  # now offline: everything must come from the verified cache
    assert FirmwareStore(offline=True).read(MEC) == got[MEC]
    assert n_requests == len(files_for(chips.NAVI31))


def test_fetch_rejects_wrong_bytes_and_caches_nothing(served):
    srv, root = served
    (root / MEC).write_bytes(b"\0" * PINS[MEC].size)
    store = FirmwareStore(urls=(srv.url,), offline=False)
    with pytest.raises(FirmwareError, match=rf"{MEC} from http://127.0.0.1.*sha256"):
        store.read(MEC)
    assert not (store.cache / MEC).exists()


def test_fetch_stops_at_more_bytes_than_pinned(served):
    srv, root = served
    (root / MEC).write_bytes(b"\0" * (PINS[MEC].size + 100_000))
    with pytest.raises(FirmwareError, match="more than the pinned"):
        FirmwareStore(urls=(srv.url,), offline=False).read(MEC)


def test_fetch_404_lists_missing_and_remedies(served):
    srv, root = served
    (root / MEC).unlink()
    with pytest.raises(FirmwareError, match=rf"missing and not fetched: {MEC}(.|\n)*404(.|\n)*DRIVERLESS_FIRMWARE_DIR"):
        FirmwareStore(urls=(srv.url,), offline=False).read(MEC)


def test_seed_skips_foreign_files_in_one_line_and_exits_0(debian_firmware, tmp_path, capsys):
    # A newer or compressed linux-firmware (Ubuntu 24.04, Fedora, Arch ship .zst) must not stop `make demo`.
    d = _copy(debian_firmware, tmp_path / "fw", ["sdma_6_0_0.bin"])
    (d / MEC).write_bytes(b"\0" * 1000)                          # another release: wrong size
    (d / "gc_11_0_0_me.bin.zst").write_bytes(b"\x28\xb5\x2f\xfd")  # compressed
    (d / "gc_11_0_0_notpinned.bin").write_bytes(b"x")             # not ours: ignored
    assert fw_main(["seed", str(d)]) == 0
    out = capsys.readouterr().out
    skipped = [ln for ln in out.splitlines() if "skipped" in ln]
    assert len(skipped) == 1, out
    assert "2 file(s)" in skipped[0] and MEC in skipped[0] and "gc_11_0_0_me.bin.zst (compressed)" in skipped[0]
    assert "notpinned" not in out
    store = FirmwareStore()
    assert (store.cache / "sdma_6_0_0.bin").is_file() and not (store.cache / MEC).exists()
    # Only foreign files, or nothing at all: still exit 0 (the download or the offline error takes over).
    (d / "sdma_6_0_0.bin").unlink()
    assert fw_main(["seed", str(d)]) == 0
    assert fw_main(["seed", str(tmp_path / "absent")]) == 0
    with pytest.raises(FirmwareError, match=MEC):
        store.read(MEC)


def test_origin_says_where_a_file_would_come_from(debian_firmware, tmp_path):
    assert FirmwareStore(offline=False).origin(MEC) == "downloaded now"
    assert FirmwareStore(offline=True).origin(MEC) == "not available (offline)"
    FirmwareStore().store(MEC, (debian_firmware / MEC).read_bytes())
    assert FirmwareStore().origin(MEC).startswith("from the cache")
    assert FirmwareStore(override=debian_firmware).origin(MEC) == f"from {debian_firmware} (DRIVERLESS_FIRMWARE_DIR)"


def test_a_huge_file_in_the_override_directory_is_refused_unread(tmp_path, monkeypatch, capsys):
    # issue 13 item 8: a 3 GiB file named like a pinned one was read whole before the size check.
    d = tmp_path / "fw"
    d.mkdir()
    with open(d / MEC, "wb") as f:
        f.truncate(3 << 30)   # sparse: no disk or memory used
    reads = []
    real_open = Path.open
    monkeypatch.setattr(Path, "open", lambda self, *a, **kw: reads.append(self) or real_open(self, *a, **kw))
    with pytest.raises(FirmwareError, match=rf"{MEC} from .* is {3 << 30} bytes, the pin says {PINS[MEC].size}"):
        FirmwareStore(override=d).read(MEC)
    assert reads == []
    assert fw_main(["verify", "--dir", str(d)]) == 1
    assert fw_main(["inspect", str(d / MEC)]) == 2
    assert "no amdgpu firmware file is larger than 16 MiB" in capsys.readouterr().err
    assert reads == []


def test_an_unreadable_file_is_a_firmware_error_naming_it(debian_firmware, tmp_path, monkeypatch):
    d = _copy(debian_firmware, tmp_path / "fw", [MEC])

    def denied(self, *a, **kw):
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(Path, "open", denied)
    with pytest.raises(FirmwareError, match=rf"{MEC} from {d / MEC} cannot be read: Permission denied"):
        FirmwareStore(override=d).read(MEC)
