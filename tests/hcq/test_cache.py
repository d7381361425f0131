"""One cache root (issue 12): every cache of the project is a subfolder of $DRIVERLESS_CACHE."""
import pytest

from hcq import cache


def test_every_cache_is_a_subfolder_of_the_one_root(tmp_path, monkeypatch):
    from amdrv import device_spec, discovery
    from amdrv.firmware import store
    from rdna3 import opencl
    from compiler_bridge.codegen import c as backend_c
    from nvdrv import nvrtc
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    assert cache.root() == tmp_path
    dirs = {"firmware": store.cache_dir(), "discovery": discovery.default_cache_dir(),
            "sim": device_spec.sim_state_path().parent, "kernels": opencl.cache_dir(),
            "c": backend_c._cache_dir(), "nvrtc": nvrtc.cache_dir()}
    for sub, d in dirs.items():
        assert d.relative_to(tmp_path).parts[0] == sub, (sub, d)


def test_default_root_follows_xdg_then_home(tmp_path, monkeypatch):
    monkeypatch.delenv("DRIVERLESS_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.root() == tmp_path / "xdg" / "driverless"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.root() == tmp_path / "home" / ".cache" / "driverless"


@pytest.mark.parametrize("old,sub", sorted(cache.RETIRED.items()))
def test_a_retired_variable_is_ignored_with_one_line_naming_the_new_one(old, sub, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cache, "_warned", set())
    monkeypatch.setenv("DRIVERLESS_CACHE", str(tmp_path))
    monkeypatch.setenv(old, str(tmp_path / "elsewhere"))
    assert cache.subdir(sub) == tmp_path / sub          # not the retired variable's directory
    cache.subdir(sub)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and old in err[0] and "DRIVERLESS_CACHE" in err[0] and f"{sub}/" in err[0]
