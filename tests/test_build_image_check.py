"""scripts/build_image.sh checks, before building anything, that podman can build and run the image here, and says in
one line what is missing and how to get it: `podman run -p` needs netavark and aardvark-dns (in podman's helper
directories) and iptables and ip6tables (on PATH), and Debian's podman package pulls in none of them.

Run through `--check` (no root, nothing built) with a PATH made here of stand-ins, so that what this machine has
installed does not matter."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "build_image.sh"
ON_PATH = ("podman", "runc", "conmon", "debootstrap", "iptables", "ip6tables")
HELPERS = ("netavark", "aardvark-dns")


def stand_ins(directory: Path, names: tuple[str, ...]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\nexit 0\n")
        (directory / name).chmod(0o755)
    return directory


def check(tmp_path: Path, on_path: tuple[str, ...], helpers: tuple[str, ...],
          helpers_on_path: bool = False) -> subprocess.CompletedProcess:
    bin_dir = stand_ins(tmp_path / "bin", on_path + (helpers if helpers_on_path else ()))
    helper_dir = stand_ins(tmp_path / "podman-helpers", () if helpers_on_path else helpers)
    dirname = shutil.which("dirname")  # the one outside command the script runs before its check
    assert dirname is not None
    (bin_dir / "dirname").symlink_to(dirname)
    env = {"PATH": str(bin_dir), "PODMAN_HELPER_DIRS": str(helper_dir), "HOME": os.environ.get("HOME", "/")}
    bash = shutil.which("bash")
    assert bash is not None
    return subprocess.run([bash, str(SCRIPT), "--check"], env=env, capture_output=True, text=True, timeout=60)


def test_everything_present_passes(tmp_path):
    p = check(tmp_path, ON_PATH, HELPERS)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""


@pytest.mark.parametrize("absent", ["iptables", "ip6tables"])
def test_without_iptables_it_stops_in_one_line_naming_the_package(tmp_path, absent):
    p = check(tmp_path, tuple(c for c in ON_PATH if c != absent), HELPERS)
    assert p.returncode == 1
    assert p.stdout == ""
    assert p.stderr.count("\n") == 1, p.stderr
    assert p.stderr == (f"build_image: podman cannot build and run the image here: missing {absent} "
                        "(apt-get install iptables, or scripts/build_image.sh --install-deps)\n")


def test_each_missing_command_is_named_once_with_its_package(tmp_path):
    p = check(tmp_path, ("podman", "runc", "conmon", "debootstrap"), ("netavark",))
    assert p.returncode == 1
    assert p.stderr == ("build_image: podman cannot build and run the image here: missing aardvark-dns, iptables, "
                        "ip6tables (apt-get install aardvark-dns iptables, or scripts/build_image.sh --install-deps)\n")


def test_netavark_on_path_only_is_missing_for_podman(tmp_path):
    """podman looks for netavark and aardvark-dns in its helper directories, not on PATH."""
    p = check(tmp_path, ON_PATH, HELPERS, helpers_on_path=True)
    assert p.returncode == 1
    assert "missing netavark, aardvark-dns (apt-get install netavark aardvark-dns," in p.stderr
