"""A block of compact Inspector lines -> columns, without a Python object per field.

NCCL writes each record as one compact object (no spaces) with its keys in a fixed order, so
lines with the same number of colons have the same layout: the k-th colon of each is the same
key. The scanner finds every ``:`` of the block with numpy, groups the lines by their colon
count, learns each group's layout from its first line, and checks on every line that the bytes
before each colon it reads spell the key it expects; numbers and strings are read from
fixed-width windows after the colons, as array operations over the block. A line on which
anything is unexpected (a key elsewhere, a value wider than its window, an escaped quote, a
pretty-printed record) is handed back to the JSON path (:mod:`diagnosis.nccl.inspector`),
which reads it or reports it: the scanner never guesses.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from diagnosis.nccl.ids import comm_hash, op_name
from diagnosis.nccl.records import CommKey, NcclOps

__all__ = ["scan_block"]

_W = 16                   # bytes before a colon that name its key
_NUM = 20                 # widest number read (uint64)
_STR = 40                 # widest string read (hostnames, names; wider: the JSON path)
_PAD = 128                # zeros after the block, so that every window fits
_QUOTE, _COLON, _NL = 34, 58, 10

# the bytes before the colon of each key the reader needs (a neighbour included where the key
# alone is not unique)
_KEYS = {
    "id": '{"id"', "comm_name": '"comm_name"', "rank": ',"rank"', "n_ranks": '"n_ranks"',
    "nnodes": '"nnodes"', "version": '"inspector_output_format_version"',
    "dump": '"dump_timestamp_us"', "hostname": '"hostname"', "pid": ',"pid"',
    "coll": '{"coll"', "p2p": '{"p2p"', "coll_sn": '"coll_sn"', "p2p_sn": '"p2p_sn"',
    "peer": '"p2p_peer"', "coll_msg": '"coll_msg_size_bytes"', "p2p_msg": '"p2p_msg_size_bytes"',
    "coll_exec": '"coll_exec_time_us"', "p2p_exec": '"p2p_exec_time_us"',
    "coll_busbw": '"coll_busbw_gbs"', "p2p_busbw": '"p2p_busbw_gbs"',
    "coll_start": '"coll_start_ts"', "p2p_start": '"p2p_start_ts"',
    "kstart": '"kernel_start_ts"', "kstop": '"kernel_stop_ts"',
    # a v4.1+ drop marker: the JSON path keeps its counts (a line with it is no call)
    "dump_stats": '"dump_stats"',
}
_MULTI = ("kstart", "kstop")          # once per kernel channel


def _sig(key: str) -> tuple[np.ndarray, np.ndarray]:
    """The key's bytes right-aligned in ``_W`` bytes and the mask of those that must match,
    as two 64-bit words."""
    raw = key.encode()[-_W:]
    sig = np.zeros(_W, dtype=np.uint8)
    mask = np.zeros(_W, dtype=np.uint8)
    sig[_W - len(raw):] = np.frombuffer(raw, dtype=np.uint8)
    mask[_W - len(raw):] = 0xFF
    return sig.view(np.uint64), mask.view(np.uint64)


_SIGS = {k: _sig(v) for k, v in _KEYS.items()}
_POW10 = np.array([10 ** e for e in range(_NUM)] + [0], dtype=np.uint64)  # [_NUM]: 0


def _windows(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes starting at each position."""
    return sliding_window_view(buf, width)[at]


def _numbers(buf: np.ndarray, at: np.ndarray, width: int = _NUM
             ) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative integers of at most ``width`` digits starting at ``at``: (values,
    readable), readable where the digits end in ``,`` or ``}`` inside the window."""
    if not len(at):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    win = _windows(buf, at, width + 1)
    digit = (win >= 48) & (win <= 57)
    length = np.argmin(digit, axis=1)              # the first non-digit
    end = win[np.arange(len(at)), length]
    ok = (length > 0) & (length < width + 1) & ((end == 44) | (end == 125))
    exp = length[:, None] - 1 - np.arange(width)   # the power of ten of each digit
    pw = _POW10[np.where(exp >= 0, exp, _NUM)]
    out = ((win[:, :width] - 48).astype(np.uint64) * pw).sum(axis=1, dtype=np.uint64)
    ok &= out <= np.iinfo(np.int64).max
    return out.astype(np.int64), ok


_MIX = np.random.default_rng(18).integers(1, 2**63, _STR + 1, dtype=np.uint64) | np.uint64(1)


def _strings(buf: np.ndarray, at: np.ndarray, width: int = _STR
             ) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Strings of at most ``width`` bytes starting at ``at`` (a quote): (index into the
    table, table, readable). Rows are told apart by a 64-bit hash, checked byte for byte
    against each distinct value's first row."""
    if not len(at):
        return np.zeros(0, dtype=np.int64), [], np.zeros(0, dtype=bool)
    win = _windows(buf, at, width + 2)
    body = win[:, 1:]
    quote = body == _QUOTE
    length = np.argmax(quote, axis=1)
    inside = np.arange(width + 1) < length[:, None]
    ok = (win[:, 0] == _QUOTE) & quote.any(axis=1) & ~((body == 92) & inside).any(axis=1)
    body = np.where(inside, body, 0)
    with np.errstate(over="ignore"):
        h = (body.astype(np.uint64) * _MIX[:width + 1]).sum(axis=1, dtype=np.uint64)
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    inv = inv.ravel()
    if not (body == body[first[inv]]).all():        # two strings with one hash: sort them
        view = np.ascontiguousarray(body).view(np.dtype((np.void, body.shape[1]))).ravel()
        _, first, inv = np.unique(view, return_index=True, return_inverse=True)
        inv = inv.ravel()
    table = [bytes(body[i]).rstrip(b"\0").decode("utf-8", "replace") for i in first.tolist()]
    return inv.astype(np.int64), table, ok


class _Scan:
    """The block's lines, colons and layouts."""

    def __init__(self, block: bytes) -> None:
        raw = np.frombuffer(block, dtype=np.uint8)
        # zeros before (windows before the first colon) and after (windows past the end)
        self.buf = buf = np.concatenate([np.zeros(_W, np.uint8), raw, np.zeros(_PAD, np.uint8)])
        self.ends = np.flatnonzero(buf == _NL)
        self.n = n = len(self.ends)
        starts: np.ndarray = np.r_[_W, self.ends[:-1] + 1]
        self.bad = (self.ends - starts) < 2       # blank lines: the JSON path skips them
        self.colons = np.flatnonzero(buf == _COLON)
        self.first = np.searchsorted(self.colons, starts)
        count = np.searchsorted(self.colons, self.ends) - self.first
        self.pos = {k: np.full(n, -1, dtype=np.int64) for k in _KEYS if k not in _MULTI}
        self.multi: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {k: [] for k in _MULTI}
        for c in np.unique(count).tolist():
            self._layout(np.flatnonzero(count == c), c)

    def _before(self, colon_at: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(_windows(self.buf, colon_at - _W, _W)).view(np.uint64)

    def _layout(self, lines: np.ndarray, count: int) -> None:
        """The lines with ``count`` colons: their layout from the first, checked on all."""
        if count == 0:
            self.bad[lines] = True
            return
        ref = self.colons[self.first[lines[0]]:self.first[lines[0]] + count]
        words = self._before(ref)
        where: dict[str, list[int]] = {}
        for key, (sig, mask) in _SIGS.items():
            hit = np.flatnonzero(((words[:, 0] & mask[0]) == sig[0])
                                 & ((words[:, 1] & mask[1]) == sig[1]))
            if len(hit) > 1 and key not in _MULTI:
                self.bad[lines] = True
                return
            if len(hit):
                where[key] = hit.tolist()
        for key, offsets in where.items():
            sig, mask = _SIGS[key]
            found = []
            for j in offsets:
                at = self.colons[self.first[lines] + j]
                w = self._before(at)
                ok = ((w[:, 0] & mask[0]) == sig[0]) & ((w[:, 1] & mask[1]) == sig[1])
                self.bad[lines[~ok]] = True
                found.append(at + 1)
            if key in _MULTI:
                for at in found:
                    self.multi[key].append((lines, at))
            else:
                self.pos[key][lines] = found[0]

    def extreme(self, key: str, reduce: np.ufunc) -> np.ndarray:
        """Per line the smallest or largest (``reduce``) number after the key's colons (one
        per kernel channel); -1 where the line has none."""
        init = np.iinfo(np.int64).max if reduce is np.minimum else -1
        acc = np.full(self.n, init, dtype=np.int64)
        for lines, at in self.multi[key]:
            vals, ok = _numbers(self.buf, at)
            self.bad[lines[~ok]] = True
            vals = np.where(ok & (vals > 0), vals, init)
            acc[lines] = reduce(acc[lines], vals)
        return np.where(acc != init, acc, -1)


def scan_block(block: bytes, first_line: int, source: str
               ) -> tuple[NcclOps, np.ndarray, list[tuple[str, int]]]:
    """The records of a block of whole lines (each ending in a newline) that the scanner could
    read, the numbers (0-based, within the block) of the lines it could not, and the format
    versions of the lines it read with the first line (0-based) of each."""
    sc = _Scan(block)
    buf, pos = sc.buf, sc.pos
    is_p2p = pos["p2p"] >= 0
    sc.bad |= (pos["coll"] >= 0) == is_p2p        # exactly one payload
    sc.bad |= pos["dump_stats"] >= 0
    for k in ("id", "rank", "n_ranks", "nnodes", "version", "dump", "hostname", "pid"):
        sc.bad |= pos[k] < 0
    for k in ("sn", "msg", "exec", "busbw", "start"):
        pos[k] = np.where(is_p2p, pos[f"p2p_{k}"], pos[f"coll_{k}"])
    sc.bad |= (pos["sn"] < 0) | (pos["msg"] < 0) | (is_p2p & (pos["peer"] < 0))
    kstart = sc.extreme("kstart", np.minimum)
    kstop = sc.extreme("kstop", np.maximum)
    type_at = np.where(is_p2p, pos["p2p"], pos["coll"])
    named = pos["comm_name"] >= 0
    g = np.flatnonzero(~sc.bad)
    vals: dict[str, np.ndarray] = {}
    for k, width in (("rank", 9), ("n_ranks", 9), ("nnodes", 9), ("dump", _NUM), ("pid", 10),
                     ("sn", _NUM), ("msg", _NUM), ("exec", _NUM), ("start", _NUM),
                     ("peer", 9)):
        at = pos[k][g]
        present = at >= 0
        v, ok = _numbers(buf, np.where(present, at, 0), width)
        vals[k] = np.where(present, v, -1)
        sc.bad[g[present & ~ok]] = True
    # a rank outside its communicator: the JSON path says so
    sc.bad[g[vals["rank"] >= np.maximum(vals["n_ranks"], 1)]] = True
    strings: dict[str, tuple[np.ndarray, list[str]]] = {}
    for k, at, width in (("id", pos["id"], 20), ("hostname", pos["hostname"], _STR),
                         ("version", pos["version"], 16), ("type", type_at, 24),
                         ("name", np.where(named, pos["comm_name"], pos["id"]), _STR)):
        idx, table, ok = _strings(buf, at[g], width)
        strings[k] = (idx, table)
        sc.bad[g[~ok]] = True
    # bandwidths are not read here (c4 has no use for them): the JSON path reads them
    busbw = np.full(len(g), np.nan)
    keep = ~sc.bad[g]
    ops = _ops(source, first_line, g[keep], {k: v[keep] for k, v in vals.items()},
               {k: (i[keep], t) for k, (i, t) in strings.items()}, named[g][keep],
               kstart[g][keep], kstop[g][keep], busbw[keep])
    vidx, vtable = strings["version"]
    versions = []
    for j, version in enumerate(vtable):
        hit = np.flatnonzero(vidx == j)
        if len(hit):
            versions.append((version, int(g[hit[0]])))
    return ops, np.flatnonzero(sc.bad), versions


def _ops(source: str, first: int, rows: np.ndarray, v: dict[str, np.ndarray],
         s: dict[str, tuple[np.ndarray, list[str]]], named: np.ndarray, kstart: np.ndarray,
         kstop: np.ndarray, busbw: np.ndarray) -> NcclOps:
    if not len(rows):
        return NcclOps.empty(source)
    host_idx, hosts = s["hostname"]
    _, pfirst, proc = np.unique((host_idx << 32) | v["pid"], return_index=True,
                                    return_inverse=True)
    id_idx, ids = s["id"]
    name_idx, names = s["name"]
    name_idx = np.where(named, name_idx, -1)
    key = (id_idx << 44) | ((name_idx + 1) << 24) | v["rank"]
    _, cfirst, comm = np.unique(key, return_index=True, return_inverse=True)
    comm = comm.ravel()
    # a communicator's size and node count are the same on every line of it
    for k in ("n_ranks", "nnodes"):
        if not (v[k] == v[k][cfirst[comm]]).all():
            raise ValueError("a communicator with two sizes in one block")
    hashes = [comm_hash(x) for x in ids]
    comms = []
    for f in cfirst.tolist():
        nm = int(name_idx[f])
        name = names[nm] if nm >= 0 else None
        comms.append(CommKey(hashes[int(id_idx[f])], int(v["rank"][f]), int(v["n_ranks"][f]),
                             int(v["nnodes"][f]), name if name and name != "unknown" else None))
    type_idx, types = s["type"]
    return NcclOps(
        source, [(hosts[int(host_idx[f])], int(v["pid"][f])) for f in pfirst.tolist()], comms,
        [op_name(t) for t in types],
        proc.astype(np.int32).ravel(), comm.astype(np.int32).ravel(),
        type_idx.astype(np.int32), v["sn"], v["peer"], v["msg"], v["exec"], v["dump"],
        v["start"], kstart, kstop, rows.astype(np.int64) + first, busbw)
