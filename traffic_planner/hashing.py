"""The modelled ECMP hash, and the RoCEv2 UDP source port that steers a flow onto a path.

The model: every node with several equal-cost next hops towards a flow's destination (a switch,
or a dual-port NIC choosing its port) picks next hop ``mix(crc32(tuple) ^ seed) % n`` among
them, in sorted id order. ``tuple`` is the 13 bytes src IPv4, dst IPv4, protocol (17),
destination port (4791, RoCEv2), source port, big endian; ``seed`` is the node's ``hash_seed``
attribute, or the crc32 of its id; ``mix`` is MurmurHash3's 32-bit finalizer. The mix matters:
CRC is affine, so a CRC merely seeded per switch makes every switch's low bits the same function
of the tuple (hash polarization), and on fabrics with two tiers of choice some paths would be
reachable by no source port. Real switches avoid this by hashing differently per tier. A NIC's
IPv4 address is its ``ip`` attribute, or 10.x.y.z from the crc32 of its id. Real switches differ
in fields and functions; set ``hash_seed`` and ``ip`` in the topology (or swap this module) to
match the fabric before pinning ports on it.
"""

from __future__ import annotations

import ipaddress
import logging
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from traffic_planner.problem import Problem

log = logging.getLogger(__name__)

ROCE_DPORT = 4791
UDP = 17
SPORT_MIN, SPORT_MAX = 49152, 65535   # the dynamic range RoCE NICs draw source ports from


def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0xEDB88320), table >> 1)
    return table.astype(np.uint32)


_TABLE = _crc_table()
_MASK = np.uint32(0xFFFFFFFF)


def crc32_np(data: np.ndarray, init: np.ndarray | int = 0) -> np.ndarray:
    """``zlib.crc32(row, init)`` for every row of a uint8 array (broadcasting ``init``)."""
    state = np.asarray(init, dtype=np.uint32) ^ _MASK
    state = np.broadcast_to(state, data.shape[:-1]).copy()
    for i in range(data.shape[-1]):
        state = _TABLE[(state ^ data[..., i]) & 0xFF] ^ (state >> 8)
    return state ^ _MASK


def mix32(x: int) -> int:
    """MurmurHash3's finalizer: a bijection on 32 bits that spreads every input bit."""
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & 0xFFFFFFFF
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & 0xFFFFFFFF
    return x ^ (x >> 16)


def mix32_np(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint32, copy=True)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x85EBCA6B)            # uint32 arithmetic wraps, as the finalizer wants
    x ^= x >> np.uint32(13)
    x *= np.uint32(0xC2B2AE35)
    return x ^ (x >> np.uint32(16))


def node_seed(problem: Problem, node: str) -> int:
    seed = problem.topology.graph.nodes[node].get("hash_seed")
    return int(seed) & 0xFFFFFFFF if seed is not None else zlib.crc32(node.encode())


def nic_ip(problem: Problem, nic: str) -> int:
    ip = problem.topology.graph.nodes[nic].get("ip")
    if ip is not None:
        return int(ipaddress.IPv4Address(ip))
    return 0x0A000000 | (zlib.crc32(nic.encode()) & 0xFFFFFF)


@dataclass
class _Trie:
    """The ECMP choices of one candidate set: at ``node`` pick among ``options`` (next hops,
    sorted), each leading to a sub-trie; a leaf is a candidate index. ``pos`` is the position
    among the candidates' variable arcs (candidates are shortest paths, so positions align)."""

    node: str
    pos: int
    options: list[str]
    children: list[_Trie | int]


def _trie(arcs: list[tuple[str, str]], cands: list[tuple[int, ...]], alive: list[int],
          pos: int) -> _Trie | int:
    while len(alive) > 1:
        heads: dict[str, list[int]] = {}
        for k in alive:
            heads.setdefault(arcs[cands[k][pos]][1], []).append(k)
        if len(heads) > 1:
            options = sorted(heads)
            return _Trie(arcs[cands[alive[0]][pos]][0], pos, options,
                         [_trie(arcs, cands, heads[n], pos + 1) for n in options])
        pos += 1
    return alive[0]


class EcmpModel:
    """Places flows as the modelled hash would, for given source ports."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        built: dict[int, _Trie | int] = {}
        by_first: dict[tuple[int, ...], _Trie | int] = {}
        arcs = problem.arcs
        self.tries = []
        for cs in problem.cands:
            t = built.get(id(cs))
            if t is None:
                # Where the first arcs all differ (a leaf choosing a spine), they alone decide
                # the trie, and many leaf pairs share it.
                first = tuple(c[0] for c in cs) if cs[0] else ()
                t = by_first.get(first) if first else None
                if t is None:
                    t = _trie(arcs, cs, list(range(len(cs))), 0)
                    if first and len(set(first)) == len(first) and (
                            not isinstance(t, _Trie) or t.pos == 0):
                        by_first[first] = t
                built[id(cs)] = t
            self.tries.append(t)
        ips: dict[str, bytes] = {}
        for nic in {n for f in problem.flows for n in (f.src, f.dst)}:
            ips[nic] = nic_ip(problem, nic).to_bytes(4, "big")
        tail = bytes([UDP]) + ROCE_DPORT.to_bytes(2, "big")
        self.prefix = [ips[f.src] + ips[f.dst] + tail for f in problem.flows]
        self._seeds: dict[str, int] = {}

    def seed(self, node: str) -> int:
        s = self._seeds.get(node)
        if s is None:
            s = self._seeds[node] = node_seed(self.problem, node)
        return s

    def place(self, sports: Sequence[int] | np.ndarray) -> list[int]:
        """The candidate each flow lands on when it uses source port ``sports[f]``."""
        out = []
        for f, t in enumerate(self.tries):
            data = self.prefix[f] + int(sports[f]).to_bytes(2, "big")
            h = zlib.crc32(data)
            while not isinstance(t, int):
                t = t.children[mix32(h ^ self.seed(t.node)) % len(t.options)]
            out.append(t)
        return out

    def random_sports(self, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return rng.integers(SPORT_MIN, SPORT_MAX + 1, size=len(self.tries))

    def pin_ports(self, choice: Sequence[int], block: int = 256) -> list[int | None]:
        """For each flow, the lowest source port that the hash maps onto candidate
        ``choice[f]``; None if no port in the dynamic range does."""
        steps: list[list[tuple[int, int, int]]] = []   # flow -> (seed, n options, option index)
        arcs, cands = self.problem.arcs, self.problem.cands
        for f, t in enumerate(self.tries):
            mine, out = cands[f][choice[f]], []
            while not isinstance(t, int):
                i = t.options.index(arcs[mine[t.pos]][1])
                out.append((self.seed(t.node), len(t.options), i))
                t = t.children[i]
            steps.append(out)
        n_flows = len(steps)
        depth = max(1, max((len(s) for s in steps), default=0))
        pad = [(0, 1, 0)]
        table = np.array([s + pad * (depth - len(s)) for s in steps],
                         dtype=np.uint32).reshape(n_flows, depth, 3)
        seeds, mods, want = table[:, :, 0], table[:, :, 1], table[:, :, 2]
        prefix = np.frombuffer(b"".join(self.prefix), dtype=np.uint8).reshape(n_flows, -1) \
            if n_flows else np.zeros((0, 11), dtype=np.uint8)
        # CRC state after the fixed 11 bytes, per flow; then only the port varies.
        state = np.full(n_flows, _MASK, dtype=np.uint32)
        for i in range(prefix.shape[1]):
            state = _TABLE[(state ^ prefix[:, i]) & 0xFF] ^ (state >> 8)
        ports: list[int | None] = [None] * n_flows
        todo = np.array([f for f in range(n_flows) if steps[f]], dtype=np.int64)
        for f in range(n_flows):
            if not steps[f]:
                ports[f] = SPORT_MIN
        start = SPORT_MIN
        while len(todo) and start <= SPORT_MAX:
            # Small blocks first: most flows find their port within a few dozen tries.
            size = block if start > SPORT_MIN else 48
            cand = np.arange(start, min(start + size, SPORT_MAX + 1), dtype=np.uint32)
            start += size
            st = state[todo][:, None]
            st = _TABLE[(st ^ (cand >> 8)) & 0xFF] ^ (st >> 8)
            st = _TABLE[(st ^ (cand & 0xFF)) & 0xFF] ^ (st >> 8)
            crc = (st ^ _MASK)[:, None, :]                            # (flows, 1, ports)
            h = mix32_np(crc ^ seeds[todo][:, :, None])               # (flows, steps, ports)
            ok = ((h % mods[todo][:, :, None]) == want[todo][:, :, None]).all(axis=1)
            hit = ok.any(axis=1)
            first = ok.argmax(axis=1)
            for f, j in zip(todo[hit].tolist(), first[hit].tolist(), strict=True):
                ports[f] = int(cand[j])
            todo = todo[~hit]
        if len(todo):
            log.warning("%d flows have no source port that the modelled hash maps onto their "
                        "planned path; apply those with policy routes", len(todo))
        return ports
