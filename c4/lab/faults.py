"""Injecting faults into a running lab and undoing them. Every fault is recorded in the lab
state with the topology components it affects and its times: the ground truth.

Network faults act on the veth pairs (both ends) of a link id, a NIC's cable or a switch's
links: ``slow-link`` (tbf rate), ``lossy-link`` (nftables ``numgen random`` drop on ingress),
``dead-link`` (link down; with ``reroute`` the other leaves stop sending through it, as a
routing protocol would make them).
Compute faults act on rank processes found by host, GPU, rank or pid: ``slow-gpu`` (cgroup v1
cpu quota), ``hang`` (cgroup freezer), ``crash`` (SIGKILL), ``cpu-contention`` (busy-loop
processes pinned with the ranks to one core under one cgroup v1 cpu quota, as a noisy
neighbour would take the host's cores; the ranks and the burners also go into the host's
cgroup v2 group, whose PSI the host's sidecar reads, so the contention shows as that host's
CPU pressure), ``memory-pressure``
(the host's ranks in a cgroup v1 memory group limited to their resident size plus ``--mb``,
with a process that keeps reading a file four times that size through the page cache: the
group reclaims all the time, which the host's v2 group shows as memory pressure)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from c4 import lab_state as state
from c4.lab import fabric, system
from c4.lab.layout import PREFIX, LabLink, Layout
from c4.lab.procs import (
    LabProc,
    alive,
    cgroup_of,
    freeze_wait,
    host_psi_group,
    lab_processes,
    make_cgroup,
    move,
    remove_cgroup,
)
from c4.lab.system import LabError
from c4.topology import link_id

log = logging.getLogger(__name__)

LINK_FAULTS = ("slow-link", "lossy-link", "dead-link")
PROC_FAULTS = ("slow-gpu", "hang", "crash", "cpu-contention", "memory-pressure")
KINDS = LINK_FAULTS + PROC_FAULTS


def _links(lay: Layout, target: str) -> tuple[list[LabLink], list[str]]:
    """The lab links a network fault acts on, and the topology components that names: a link
    id, a NIC (its cable to the leaf) or a switch (every link of it)."""
    topo = lay.topology
    if "~" in target:
        a, _, b = target.partition("~")
        lid = link_id(a, b)
    elif target in topo.graph and topo.kind(target) == "nic":
        lid = link_id(target, lay.leaf_of[topo.host_of(target)])
    elif target in topo.graph and topo.kind(target) == "switch":
        return [lay.links[lk] for lk in sorted(topo.links_of(target))], [target]
    else:
        raise LabError(f"{target!r} is not a link id, NIC or switch; links of this lab: "
                       f"{', '.join(sorted(lay.links))}")
    if lid in lay.links:
        return [lay.links[lid]], [lid]
    if lid in topo.links():
        raise LabError(f"{lid!r} is the PCIe link between a GPU and its NIC, which the lab does "
                       "not model as a network link; inject slow-gpu on the GPU instead")
    raise LabError(f"link {lid!r} is not in the lab; links: {', '.join(sorted(lay.links))}")


def _procs(lay: Layout, lab_dir: Path, target: str) -> tuple[list[LabProc], list[str]]:
    """The processes a compute fault acts on, and the topology components that names."""
    topo = lay.topology
    ranks = [p for p in lab_processes(str(lab_dir)) if p.is_rank]
    if target.startswith("pid:"):
        pid = int(target[4:])
        found = [p for p in lab_processes(str(lab_dir)) if p.pid == pid]
        if not found:
            raise LabError(f"pid {pid} is not a process of this lab")
        return found, [found[0].gpu or found[0].host]
    rank_str = target.removeprefix("rank:").removeprefix("rank")
    if rank_str.isdigit():
        chosen = [p for p in ranks if p.rank == int(rank_str)]
        what = f"rank {rank_str}"
        comps = sorted({p.gpu for p in chosen})
    elif target in topo.graph and topo.kind(target) in ("host", "gpu"):
        key = "host" if topo.kind(target) == "host" else "gpu"
        chosen = [p for p in ranks if getattr(p, key) == target]
        what, comps = f"{key} {target}", [target]
    else:
        raise LabError(f"{target!r} is not a host id, gpu id, rank (rank:N) or pid (pid:N) of "
                       "this lab")
    if not chosen:
        raise LabError(f"no running rank on {what}: start a job with `c4 lab run` first")
    return chosen, comps


def inject(lab_dir: Path, kind: str, target: str, *, duration: float | None = None,
           rate_mbit: float | None = None, loss_pct: int = 30, cpu_pct: int = 20,
           reroute: bool = False, burners: int = 2, memory_mb: int = 64) -> dict[str, Any]:
    """Inject a fault; return its record (also appended to the lab state)."""
    if kind not in KINDS:
        raise LabError(f"unknown fault {kind!r}; one of: {', '.join(KINDS)}")
    system.require_root()
    with state.locked(lab_dir):
        st = state.read(lab_dir)
        if st is None:
            raise LabError("no lab is up: run `c4 lab up` first")
        from c4.lab.lab import layout_of

        lay = layout_of(st)
        fid = len(st["faults"]) + 1
        rec: dict[str, Any] = {"id": fid, "kind": kind, "target": target, "params": {},
                               "injected_at": None, "cleared_at": None, "until": None}
        if kind in LINK_FAULTS:
            links, rec["components"] = _links(lay, target)
            rec["undo"] = {"links": [lk.id for lk in links]}
            ends = [e for lk in links for e in (lk.a, lk.b)]
            if kind == "slow-link":
                capacity = min(lk.mbit for lk in links)
                rate = rate_mbit or max(1.0, capacity / 10)
                rec["params"] = {"rate_mbit": rate, "capacity_mbit": capacity}
                for e in ends:
                    system.tc_batch([system.tbf(rate, e.ifname)], e.ns)
            elif kind == "lossy-link":
                if not 0 < loss_pct <= 100:
                    raise LabError("--loss must be a percentage between 1 and 100")
                rec["params"] = {"loss_pct": loss_pct}
                for ns in {e.ns for e in ends}:
                    system.nft(ns, _loss_table(fid, [e.ifname for e in ends if e.ns == ns],
                                               loss_pct))
            else:
                for e in ends:
                    system.ip_batch([f"link set {e.ifname} down"], e.ns)
                if reroute:
                    rec["params"] = {"reroute": True}
                    rec["undo"]["routes"] = _reroute(lay, {lk.id for lk in links})
        else:
            procs, comps = _procs(lay, lab_dir, target)
            rec["components"] = comps
            rec["pids"] = [p.pid for p in procs]
            rec["ranks"] = sorted(p.rank for p in procs if p.rank is not None)
            if kind == "slow-gpu":
                if not 1 <= cpu_pct <= 100:
                    raise LabError("--cpu must be a percentage of one core between 1 and 100")
                rec["params"] = {"cpu_pct": cpu_pct}
                rec["undo"] = {"cgroup": ["cpu", f"{PREFIX}f{fid}"],
                               "back": {str(p.pid): cgroup_of(p.pid, "cpu") for p in procs}}
                cg = make_cgroup("cpu", f"{PREFIX}f{fid}", {"cpu.cfs_period_us": "100000",
                                                           "cpu.cfs_quota_us":
                                                               str(cpu_pct * 1000)})
                for p in procs:
                    move(p.pid, cg)
            elif kind == "cpu-contention":
                rec.update(_contend(fid, procs, target, cpu_pct, burners))
            elif kind == "memory-pressure":
                rec.update(_squeeze(fid, procs, target, memory_mb, lab_dir))
            elif kind == "hang":
                rec["undo"] = {"cgroup": ["freezer", f"{PREFIX}f{fid}"],
                               "back": {str(p.pid): cgroup_of(p.pid, "freezer") for p in procs}}
                cg = make_cgroup("freezer", f"{PREFIX}f{fid}", {})
                for p in procs:
                    move(p.pid, cg)
                freeze_wait(cg)
            else:
                for p in procs:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p.pid, signal.SIGKILL)
        rec["injected_at"] = time.time()
        if duration is not None:
            rec["until"] = rec["injected_at"] + duration
            rec["timer_pid"] = _start_timer(lab_dir, fid, duration)
        st["faults"].append(rec)
        state.write(lab_dir, st)
    log.info("injected fault %d: %s on %s", fid, kind, target)
    return rec


def _contend(fid: int, procs: list[LabProc], target: str, cpu_pct: int,
             burners: int) -> dict[str, Any]:
    """Start ``burners`` busy loops on the core of one host's ranks and share ``cpu_pct`` % of
    that core between them and the ranks; put them all in the host's v2 group (its PSI).

    The ranks and the burners are pinned to one core, as neighbours on the same cores are: a
    rank waits for the core (what PSI counts) but is never stopped for long, so its steps slow
    down while its transfers keep pace. A quota alone stops the whole group for the rest of
    each period once it is spent, which stalls the ranks' sockets too and looks like a slow
    network."""
    hosts = {p.host for p in procs}
    if len(hosts) != 1:
        raise LabError(f"cpu-contention strikes one host; {target!r} has ranks on "
                       f"{', '.join(sorted(hosts)) or 'no host'}")
    if not 1 <= cpu_pct <= 100 or burners < 1:
        raise LabError("--cpu must be a percentage of one core between 1 and 100 (the ranks and "
                       "the burners share one core) and --burners at least 1")
    (host,) = hosts
    back = {str(p.pid): cgroup_of(p.pid, "cpu") for p in procs}
    affinity = {str(p.pid): sorted(os.sched_getaffinity(p.pid)) for p in procs}
    core = {max(os.sched_getaffinity(procs[0].pid))}
    cg = make_cgroup("cpu", f"{PREFIX}f{fid}", {"cpu.cfs_period_us": "100000",
                                               "cpu.cfs_quota_us": str(cpu_pct * 1000)})
    psi = host_psi_group(host)
    psi.mkdir(exist_ok=True)
    pids = []
    for _ in range(burners):
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                  start_new_session=True, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        pids.append(burner.pid)
    for pid in [p.pid for p in procs] + pids:
        _pin(pid, core)
        move(pid, cg)
        move(pid, psi)
    return {"params": {"cpu_pct": cpu_pct, "burners": burners, "host": host,
                       "core": min(core)},
            "undo": {"cgroup": ["cpu", f"{PREFIX}f{fid}"], "back": back, "burners": pids,
                     "affinity": affinity}}


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` on ``cpus`` (threads started later inherit it)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return                  # gone
    for tid in tids:
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(tid, cpus)


_THRASH = """
import os, sys
path, size = sys.argv[1], int(sys.argv[2])
with open(path, "wb") as f:
    for _ in range(size):
        f.write(os.urandom(1 << 20))
while True:
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass
"""


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _squeeze(fid: int, procs: list[LabProc], target: str, mb: int,
             lab_dir: Path) -> dict[str, Any]:
    """Limit one host's ranks to their resident memory plus ``mb`` MiB and thrash the page
    cache inside that limit; all of it in the host's v2 group (its PSI)."""
    hosts = {p.host for p in procs}
    if len(hosts) != 1:
        raise LabError(f"memory-pressure strikes one host; {target!r} has ranks on "
                       f"{', '.join(sorted(hosts)) or 'no host'}")
    if mb < 16:
        raise LabError("--mb must be at least 16 (MiB of headroom over the ranks' memory)")
    (host,) = hosts
    limit = sum(_rss_bytes(p.pid) for p in procs) + (mb << 20)
    back = {str(p.pid): cgroup_of(p.pid, "memory") for p in procs}
    cg = make_cgroup("memory", f"{PREFIX}f{fid}", {"memory.limit_in_bytes": str(limit)})
    psi = host_psi_group(host)
    psi.mkdir(exist_ok=True)
    path = lab_dir / f"f{fid}.thrash"
    for p in procs:
        move(p.pid, cg)
        move(p.pid, psi)
    # the hog starts in the group (its own page cache is charged there), through a shell
    # that moves itself in before it runs python
    hog = subprocess.Popen(["sh", "-c", f"echo $$ > {cg / 'cgroup.procs'} && "
                            f"echo $$ > {psi / 'cgroup.procs'} && exec \"$0\" -c \"$1\" "
                            f"{path} {4 * mb}", sys.executable, _THRASH],
                           start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    return {"params": {"memory_mb": mb, "limit_bytes": limit, "host": host},
            "undo": {"cgroup": ["memory", f"{PREFIX}f{fid}"], "back": back,
                     "burners": [hog.pid], "files": [str(path)]}}


def _reroute(lay: Layout, dead: set[str]) -> dict[str, list[str]]:
    """Routes in each leaf to each other leaf's hosts over the spines still joined to both;
    returns namespace -> prefixes added (to delete on clear)."""
    added: dict[str, list[str]] = {}
    for src in lay.leaves:
        for dst in lay.leaves:
            if src == dst:
                continue
            alive = [s for s in lay.spines if link_id(src, s) not in dead
                     and link_id(dst, s) not in dead]
            if len(alive) == len(lay.spines) or not alive:
                continue
            hops = " ".join(f"nexthop via {lay.uplink(src, s).b.addr} dev "
                            f"{lay.uplink(src, s).a.ifname} weight 1" for s in alive)
            system.ip_batch([f"route replace {lay.leaf_block(dst)} {hops}"], lay.ns(src))
            added.setdefault(lay.ns(src), []).append(lay.leaf_block(dst))
    return added


def _loss_table(fid: int, ifnames: list[str], pct: int) -> str:
    chains = "".join(
        f" chain loss{i} {{ type filter hook ingress device \"{ifname}\" priority 0; policy "
        f"accept; numgen random mod 100 < {pct} counter drop; }}\n"
        for i, ifname in enumerate(ifnames))
    return f"table netdev {PREFIX}f{fid} {{\n{chains}}}\n"


def _start_timer(lab_dir: Path, fid: int, seconds: float) -> int:
    env = {**os.environ, state.MARKER: str(lab_dir)}
    with open(lab_dir / "timers.log", "ab") as log_fh:
        proc = subprocess.Popen([sys.executable, "-m", "c4.lab.timer", str(lab_dir), str(fid),
                                 str(seconds)], env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=log_fh)
    return proc.pid


def _undo(lay: Layout, rec: dict[str, Any]) -> None:
    kind = rec["kind"]
    if kind in LINK_FAULTS:
        links = [lay.links[lid] for lid in rec["undo"]["links"]]
        ends = [(lk, e) for lk in links for e in (lk.a, lk.b)]
        if kind == "slow-link":
            for lk, e in ends:
                system.tc_batch([system.tbf(lk.mbit, e.ifname)], e.ns)
        elif kind == "lossy-link":
            for ns in {e.ns for _, e in ends}:
                system.nft(ns, f"delete table netdev {PREFIX}f{rec['id']}\n", check=False)
        else:
            for _, e in ends:
                system.ip_batch([f"link set {e.ifname} up"], e.ns)
            for ns, prefixes in rec["undo"].get("routes", {}).items():
                system.ip_batch([f"route del {p}" for p in prefixes], ns, force=True)
            fabric.reapply_routes(lay, {e.ns for _, e in ends})
    elif kind in ("slow-gpu", "hang", "cpu-contention", "memory-pressure"):
        burners = rec["undo"].get("burners", [])
        for pid in burners:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # a burner out of its quota dies only when it next runs (up to a period later)
        deadline = time.monotonic() + 5.0
        while any(alive(pid) for pid in burners) and time.monotonic() < deadline:
            time.sleep(0.02)
        for path in rec["undo"].get("files", []):
            with contextlib.suppress(OSError):
                os.unlink(path)
        for pid, cpus in rec["undo"].get("affinity", {}).items():
            _pin(int(pid), set(cpus))
        controller, name = rec["undo"]["cgroup"]
        remove_cgroup(controller, name, {int(k): v for k, v in rec["undo"]["back"].items()})


def clear(lab_dir: Path, fault_id: int | None = None, *, from_timer: bool = False
          ) -> list[dict[str, Any]]:
    """Undo the active faults (or one); return the records cleared."""
    system.require_root()
    cleared = []
    with state.locked(lab_dir):
        st = state.read(lab_dir)
        if st is None:
            raise LabError("no lab is up: nothing to clear")
        from c4.lab.lab import layout_of

        lay = layout_of(st)
        for rec in reversed(st["faults"]):
            if rec["cleared_at"] is not None or (fault_id is not None and rec["id"] != fault_id):
                continue
            _undo(lay, rec)
            rec["cleared_at"] = time.time()
            timer = rec.get("timer_pid")
            if timer and not from_timer and alive(timer):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(timer, signal.SIGTERM)
            cleared.append(rec)
        state.write(lab_dir, st)
    return cleared


def active(st: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in st.get("faults", []) if r["cleared_at"] is None]


def loss_counter(ns: str, fid: int) -> int:
    """Packets the lossy-link rule of fault ``fid`` dropped at this end."""
    import json

    out = system.in_ns(ns, ["nft", "-j", "list", "table", "netdev", f"{PREFIX}f{fid}"],
                       check=False)
    if out.returncode != 0:
        return 0
    for item in json.loads(out.stdout)["nftables"]:
        for expr in item.get("rule", {}).get("expr", []):
            if "counter" in expr:
                return int(expr["counter"]["packets"])
    return 0
