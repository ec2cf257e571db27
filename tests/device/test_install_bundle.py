"""device/install.sh --bundle refuses a bundle it cannot install with one line naming the problem,
before it installs anything (or asks for root).

A whole install from a real bundle, with the device's network off, is tests/device/test_arm64.py's.
These bundles are small folders and tar files written here, for this machine's architecture and
Python unless a test says otherwise, so that every check but the broken one would pass.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "device" / "install.sh"
# install.sh checks the bundle with the system's `python3`, as a device would.
SYSTEM_PYTHON = subprocess.run(
    ["python3", "-c", "import sys; print(f'{sys.version_info.major}.{sys.version_info.minor}')"],
    capture_output=True,
    text=True,
    check=True,
).stdout.strip()


def _bundle(folder: Path, **manifest_changes: object) -> Path:
    """A bundle folder that install.sh would accept on this machine, with ``manifest_changes``."""
    wheels = folder / "wheels"
    wheels.mkdir(parents=True)
    wheel = wheels / "edgefd-0.1.0-cp311-cp311-linux_aarch64.whl"
    wheel.write_bytes(b"not really a wheel, but its digest is right")
    manifest: dict[str, object] = {
        "format": 1,
        "edgefd": "0.1.0",
        "arch": platform.machine(),
        "python": SYSTEM_PYTHON,
        "wheels": {wheel.name: hashlib.sha256(wheel.read_bytes()).hexdigest()},
    }
    manifest.update(manifest_changes)
    (folder / "bundle.json").write_text(json.dumps(manifest))
    return folder


def _install(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(INSTALL), *map(str, args)], capture_output=True, text=True, timeout=60)


def _refused(done: subprocess.CompletedProcess[str], message: str) -> None:
    assert done.returncode != 0, done.stdout
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert "apt-get" not in done.stdout and "pip install" not in done.stdout


def test_a_bundle_for_another_architecture_is_refused(tmp_path: Path):
    bundle = _bundle(tmp_path / "b", arch="riscv64")
    _refused(_install("--bundle", bundle), f"this bundle is for riscv64 devices; this one is {platform.machine()}")


def test_a_bundle_for_another_python_is_refused(tmp_path: Path):
    bundle = _bundle(tmp_path / "b", python="3.9")
    _refused(_install("--bundle", bundle), f"this bundle is for Python 3.9; this device has Python {SYSTEM_PYTHON}")


def test_a_damaged_wheel_is_refused(tmp_path: Path):
    bundle = _bundle(tmp_path / "b")
    wheel = next((bundle / "wheels").glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes()[:-3])  # a copy cut short
    _refused(_install("--bundle", bundle), f"wheels/{wheel.name} is damaged")


def test_a_damaged_debian_package_is_refused(tmp_path: Path):
    bundle = _bundle(tmp_path / "b")
    (bundle / "debs").mkdir()
    (bundle / "debs" / "libgomp1_12_arm64.deb").write_bytes(b"half a package")
    manifest = json.loads((bundle / "bundle.json").read_text())
    manifest["debs"] = {"libgomp1_12_arm64.deb": hashlib.sha256(b"a whole package").hexdigest()}
    (bundle / "bundle.json").write_text(json.dumps(manifest))
    _refused(_install("--bundle", bundle), "debs/libgomp1_12_arm64.deb is damaged")


def test_a_missing_wheel_is_refused(tmp_path: Path):
    bundle = _bundle(tmp_path / "b")
    next((bundle / "wheels").glob("*.whl")).unlink()
    _refused(_install("--bundle", bundle), "the bundle lacks wheels/edgefd-0.1.0")


def test_a_broken_manifest_is_refused(tmp_path: Path):
    bundle = _bundle(tmp_path / "b")
    (bundle / "bundle.json").write_text('{"arch": "aarch64"')
    _refused(_install("--bundle", bundle), "is not a bundle manifest")


def test_a_tar_without_a_manifest_is_refused(tmp_path: Path):
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "README").write_text("hello")
    archive = tmp_path / "stuff.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tmp_path / "stuff", arcname="stuff")
    _refused(_install("--bundle", archive), "holds no bundle.json: not a bundle made by device/bundle.sh")


def test_a_truncated_tar_is_refused(tmp_path: Path):
    bundle = _bundle(tmp_path / "edgefd-device")
    archive = tmp_path / "edgefd-device.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(bundle, arcname=bundle.name)
    archive.write_bytes(archive.read_bytes()[:700])
    done = _install("--bundle", archive)
    assert done.returncode != 0
    assert "edgefd-device.tar is not a readable bundle (tar failed): copy it again" in done.stderr


def test_a_bundle_and_a_source_together_are_refused(tmp_path: Path):
    _refused(_install("--bundle", _bundle(tmp_path / "b"), "--source", REPO), "--bundle and --source name two sources")


def test_cuda_kernels_cannot_come_from_a_bundle(tmp_path: Path):
    _refused(_install("--bundle", _bundle(tmp_path / "b"), "--cuda"), "the bundle's kernels are CPU builds")


def test_no_such_bundle(tmp_path: Path):
    _refused(_install("--bundle", tmp_path / "nothing.tar"), "nothing.tar: no such file or folder")


def test_the_bundle_maker_checks_its_options_first(tmp_path: Path):
    done = subprocess.run(
        ["bash", str(REPO / "device" / "bundle.sh"), "--out", str(tmp_path / "b.tar.gz")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "the bundle is a .tar file" in done.stderr
