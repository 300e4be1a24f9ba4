"""Running ``ip``, ``tc``, ``nft`` and friends: in batches where the tool allows it, always with
the failing command and its stderr in the error."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Sequence

from c4.errors import C4Error

log = logging.getLogger(__name__)


class LabError(C4Error):
    """The lab could not do what was asked; the message says what to do."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, tc, nftables, cgroups): "
                       "run it with sudo")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise LabError(f"{tool!r} is not installed: apt-get install iproute2")


def run(args: Sequence[str], *, stdin: str | None = None, check: bool = True,
        timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    log.debug("run %s%s", " ".join(args), f" <<{len(stdin.splitlines())} lines" if stdin else "")
    proc = subprocess.run(list(args), input=stdin, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise LabError(f"command failed ({proc.returncode}): {' '.join(args)}\n"
                       f"{proc.stderr.strip()}"
                       + (f"\ninput:\n{stdin[:2000]}" if stdin else ""))
    return proc


def ip_batch(lines: Sequence[str], ns: str | None = None, *, force: bool = False) -> None:
    """``ip [-n NS] -batch -``; with ``force``, keep going past failing lines (teardown)."""
    if not lines:
        return
    args = ["ip", *(["-n", ns] if ns else []), *(["-force"] if force else []), "-batch", "-"]
    run(args, stdin="\n".join(lines) + "\n", check=not force)


def tc_batch(lines: Sequence[str], ns: str | None = None) -> None:
    if lines:
        run(["tc", *(["-n", ns] if ns else []), "-batch", "-"], stdin="\n".join(lines) + "\n")


def in_ns(ns: str, args: Sequence[str], **kw) -> subprocess.CompletedProcess[str]:
    return run(["ip", "netns", "exec", ns, *args], **kw)


def nft(ns: str, script: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if shutil.which("nft") is None:
        raise LabError("nft is not installed: apt-get install nftables "
                       "(scripts/system-deps.sh does it)")
    return in_ns(ns, ["nft", "-f", "-"], stdin=script, check=check)


def netns_list() -> list[str]:
    out = run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def netns_pids(ns: str) -> list[int]:
    out = run(["ip", "netns", "pids", ns], check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def root_links() -> list[str]:
    """Interface names in the root namespace."""
    out = run(["ip", "-o", "link", "show"]).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def tbf(rate_mbit: float, dev: str) -> str:
    """A ``tc`` line setting ``dev``'s egress to ``rate_mbit``. The burst must hold a 64 KB GSO
    packet (veths carry them), and a few ms of traffic at high rates."""
    burst = max(128 * 1024, int(rate_mbit * 1e6 / 8 * 0.004))
    return f"qdisc replace dev {dev} root tbf rate {rate_mbit}mbit burst {burst} latency 50ms"
