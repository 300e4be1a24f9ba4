"""Wrappers around the torch.distributed functions that record one row per call.

The hot path (a hooked call) does only dictionary look-ups, two clock reads and a list append;
everything else (naming groups, connecting, encoding) happens on first sight of a group or on the
shipper thread. A failure inside the recording code never reaches the training script: the call
then simply goes to torch unrecorded. How async calls complete: ``collectors.completion``.
"""

from __future__ import annotations

import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from collectors.batch import wrap_batch
from collectors.buffer import RecordBuffer
from collectors.completion import OK, Completion
from collectors.group_state import GroupState, ThreadFlags
from collectors.specs import SPECS, OpSpec, arg_positions

log = logging.getLogger(__name__)

# Functions wrapped only to learn when process groups appear and disappear.
_LIFECYCLE = ("init_process_group", "destroy_process_group")


_PASS = GroupState(skip=True)


class Recorder:
    """Builds the wrappers and owns the per-group counters; see module docstring."""

    def __init__(self, buffer: RecordBuffer, on_attach: Callable[[], None],
                 cuda_timer_factory: Callable[[], Any] | None = None,
                 async_timing: str = "auto") -> None:
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        self.dist, self.c10d = dist, c10d
        self.buf = buffer
        self.active = True
        self.done = Completion(buffer, async_timing)
        self._on_attach = on_attach
        self._cuda_factory = cuda_timer_factory
        self.cuda_timer: Any = None
        self._tls = ThreadFlags()
        self._lock = threading.RLock()
        self._by_key: dict[Any, GroupState] = {}
        self._by_pg: dict[Any, GroupState] = {}
        self._dtypes: dict[Any, int] = {}
        self._tokens = itertools.count()
        self._empty = buffer.strings.intern("")
        self._originals: list[tuple[Any, str, Any]] = []
        self._warned = False
        self._invoke_wall = self._make_invoke()

    # ------------------------------------------------------------------ install / uninstall
    def patch(self) -> None:
        dist, c10d = self.dist, self.c10d
        for spec in SPECS:
            orig = getattr(c10d, spec.name, None)
            if orig is None:
                continue  # an older torch without this function
            wrapper = self._wrap(spec, orig)
            functools.update_wrapper(wrapper, orig)
            # a marker on the function object, which mypy does not let a Callable carry
            wrapper.__c4_original__ = orig  # type: ignore[attr-defined]
            self._set(c10d, spec.name, wrapper)
            if getattr(dist, spec.name, None) is orig:
                self._set(dist, spec.name, wrapper)
        for name in _LIFECYCLE:
            orig = getattr(c10d, name)
            wrapper = functools.update_wrapper(self._wrap_lifecycle(name, orig), orig)
            self._set(c10d, name, wrapper)
            if getattr(dist, name, None) is orig:
                self._set(dist, name, wrapper)
        work_cls = dist.Work
        self._set(work_cls, "wait", self.done.wrap_wait(work_cls.wait))
        self._set(work_cls, "is_completed", self.done.wrap_is_completed(work_cls.is_completed))
        self._set(work_cls, "get_future", self.done.wrap_get_future(work_cls.get_future))

    def unpatch(self) -> None:
        self.active = False
        for owner, name, orig in reversed(self._originals):
            setattr(owner, name, orig)
        self._originals.clear()

    def _set(self, owner: Any, name: str, value: Any) -> None:
        self._originals.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    # ------------------------------------------------------------------ cold paths
    def resolve(self, group: Any) -> GroupState:
        """State for a ``group`` argument seen for the first time (None: the default group)."""
        with self._lock:
            st = self._by_key.get(group)
            if st is not None:
                return st
            try:
                return self._resolve_locked(group)
            except Exception:
                log.debug("cannot resolve process group %r; not recording it", group,
                          exc_info=True)
                return _PASS

    def _resolve_locked(self, group: Any) -> GroupState:
        dist, c10d = self.dist, self.c10d
        if not dist.is_initialized():
            return _PASS  # not cached: torch raises its own error for this call
        pg = c10d._get_default_group() if group is None else group
        if pg is c10d.GroupMember.NON_GROUP_MEMBER or pg == c10d.GroupMember.NON_GROUP_MEMBER:
            self._by_key[group] = _PASS
            return _PASS
        self.attach()
        st = self._by_pg.get(pg)
        if st is None:
            name = str(pg.group_name)
            ranks = tuple(int(r) for r in dist.get_process_group_ranks(pg))
            st = GroupState(self.buf.strings.intern(name), name, ranks)
            st.invoke = self._invoke_for(pg)
            self._by_pg[pg] = st
            self._announce(name, ranks, str(getattr(pg, "group_desc", "") or ""))
        self._by_key[group] = st
        if pg is c10d._get_default_group():
            self._by_key[None] = st
        return st

    def _announce(self, name: str, ranks: tuple[int, ...], desc: str) -> None:
        from c4.proto import c4_pb2

        self.buf.groups.append(c4_pb2.GroupInfo(pg=name, ranks=ranks, desc=desc))

    def _invoke_for(self, pg: Any) -> Callable[..., Any] | None:
        """Wall-clock timing, or CUDA events for groups whose backend runs on the GPU."""
        if self._cuda_factory is None:
            return None
        try:
            backend = str(self.dist.get_backend(pg)).lower()
        except Exception:
            backend = ""
        if "nccl" not in backend:
            return None
        if self.cuda_timer is None:
            self.cuda_timer = self._cuda_factory()
        if self.cuda_timer is None:
            return None
        return self.cuda_timer.make_invoke(self, self._invoke_wall)

    def attach(self) -> None:
        """Called once torch.distributed is initialized: announce the rank, start shipping."""
        self._on_attach()

    def forget_groups(self) -> None:
        with self._lock:
            self._by_key.clear()
            self._by_pg.clear()

    def dtype_index(self, dtype: Any) -> int:
        idx = self._dtypes.get(dtype)
        if idx is None:
            idx = self.buf.strings.intern(str(dtype).removeprefix("torch."))
            self._dtypes[dtype] = idx
        return idx

    def measure(self, data: Any) -> tuple[int, int]:
        """(bytes, dtype index) of a tensor or a list of tensors; (0, "") for anything else."""
        if isinstance(data, (list, tuple)):
            total, dt = 0, self._empty
            for i, t in enumerate(data):
                total += int(t.nbytes)
                if i == 0:
                    dt = self.dtype_index(t.dtype)
            return total, dt
        if data is None or not hasattr(data, "nbytes"):
            return 0, self._empty
        return int(data.nbytes), self.dtype_index(data.dtype)

    def next_token(self) -> int:
        return next(self._tokens)

    def _prepare_failed(self) -> None:
        if not self._warned:
            self._warned = True
            log.warning("c4 collector could not record a call; it goes to torch unrecorded",
                        exc_info=True)

    # ------------------------------------------------------------------ hot path
    # The wrappers below repeat the same tail instead of calling a shared helper: one Python
    # call fewer is a noticeable part of a ~1 µs budget. ``_make_invoke`` is that tail as a
    # function, for the cold users (CUDA timing's async calls, recv from any source).
    def _make_invoke(self) -> Callable[..., Any]:
        buf = self.buf
        rows, cap, pending, tls, wake = buf.rows, buf.capacity, buf.pending, self._tls, buf.wake
        half = cap // 2
        time_ns = time.time_ns
        complete, track = self.done.complete, self.done.track

        def invoke(orig: Callable[..., Any], args: tuple, kwargs: dict, row: tuple,
                   token: int, is_async: bool, st: GroupState, p2p: bool) -> Any:
            pending[token] = row
            tls.busy = True
            try:
                result = orig(*args, **kwargs)
            except BaseException as exc:
                pending.pop(token, None)
                complete(row, time_ns(), exc)
                raise
            finally:
                tls.busy = False
            if is_async and result is not None:
                track(result, ((token, row),), st)
                return result
            t_end = time_ns()
            del pending[token]
            if len(rows) < cap:
                rows.append((*row[:7], t_end, OK, row[9]))
                if len(rows) == half:
                    wake.set()
            else:
                buf.dropped_full += 1
            return result

        return invoke

    def _wrap(self, spec: OpSpec, orig: Callable[..., Any]) -> Callable[..., Any]:
        if spec.kind == "coll":
            return self._wrap_collective(spec, orig)
        if spec.kind == "batch":
            return wrap_batch(self, orig)
        return self._wrap_p2p(spec, orig)

    def _wrap_collective(self, spec: OpSpec, orig: Callable[..., Any]) -> Callable[..., Any]:
        pos = arg_positions(orig, {"data": spec.data, "group": "group", "async": spec.async_arg})
        d_pos, d_name = pos["data"].pos, pos["data"].name
        g_pos, g_name = pos["group"].pos, pos["group"].name
        a_pos, a_name = pos["async"].pos, pos["async"].name
        has_data, is_list = spec.data is not None, spec.data_is_list
        op_idx, empty = self.buf.strings.intern(spec.name), self._empty
        tls, by_key, dtypes = self._tls, self._by_key, self._dtypes
        resolve, measure, tokens, time_ns = self.resolve, self.measure, self._tokens, time.time_ns
        buf = self.buf
        rows, cap, pending, wake = buf.rows, buf.capacity, buf.pending, buf.wake
        half = cap // 2
        done = self.done
        complete, track = done.complete, done.track
        waiting, poll = done._waiting, done.poll
        rec = self

        def hooked(*args: Any, **kwargs: Any) -> Any:
            if tls.busy or not rec.active:
                return orig(*args, **kwargs)
            try:
                if waiting:  # async calls not seen complete yet: look now (C4_ASYNC_TIMING)
                    poll()
                n = len(args)
                st = by_key.get(args[g_pos] if n > g_pos else kwargs.get(g_name))
                if st is None:
                    st = resolve(args[g_pos] if n > g_pos else kwargs.get(g_name))
                if st.skip:
                    return orig(*args, **kwargs)
                is_async = args[a_pos] if n > a_pos else kwargs.get(a_name)
                if has_data:
                    data: Any = args[d_pos] if n > d_pos else kwargs.get(d_name)
                    if is_list:
                        nbytes, dt = measure(data)
                    else:
                        try:
                            nbytes, dt = data.nbytes, dtypes[data.dtype]
                        except (AttributeError, KeyError):
                            nbytes, dt = measure(data)
                else:
                    nbytes, dt = 0, empty
                pgi = st.idx
                seq = st.seq
                st.seq = seq + 1
                token = next(tokens)
                t_enter = time_ns()
                row = (pgi, seq, op_idx, nbytes, dt, t_enter, -1, -1, OK, -1)
            except Exception:
                rec._prepare_failed()
                return orig(*args, **kwargs)
            if st.invoke is not None:
                return st.invoke(orig, args, kwargs, row, token, is_async, st, False)
            pending[token] = row
            tls.busy = True
            try:
                result = orig(*args, **kwargs)
            except BaseException as exc:
                pending.pop(token, None)
                complete(row, time_ns(), exc)
                raise
            finally:
                tls.busy = False
            if is_async and result is not None:
                if done.future_timing:
                    track(result, ((token, row),), st)
                else:  # track() inlined: poll and wait timing just remember the Work
                    waiting[id(result)] = (result, ((token, row),))
                    done.async_calls += 1
                return result
            t_end = time_ns()
            del pending[token]
            if len(rows) < cap:
                rows.append((pgi, seq, op_idx, nbytes, dt, t_enter, -1, t_end, OK, -1))
                if len(rows) == half:
                    wake.set()
            else:
                buf.dropped_full += 1
            return result

        return hooked

    def _wrap_p2p(self, spec: OpSpec, orig: Callable[..., Any]) -> Callable[..., Any]:
        pos = arg_positions(orig, {"data": spec.data, "group": "group",
                                   "peer": spec.peer_arg, "gpeer": spec.group_peer_arg})
        d_pos, d_name = pos["data"].pos, pos["data"].name
        g_pos, g_name = pos["group"].pos, pos["group"].name
        p_pos, p_name = pos["peer"].pos, pos["peer"].name
        q_pos, q_name = pos["gpeer"].pos, pos["gpeer"].name
        is_send, is_async = spec.kind == "send", spec.always_async
        op_idx = self.buf.strings.intern(spec.name)
        tls, by_key, dtypes = self._tls, self._by_key, self._dtypes
        resolve, measure, tokens, time_ns = self.resolve, self.measure, self._tokens, time.time_ns
        buf = self.buf
        rows, cap, pending, wake = buf.rows, buf.capacity, buf.pending, buf.wake
        half = cap // 2
        done = self.done
        complete, track = done.complete, done.track
        waiting, poll = done._waiting, done.poll
        rec = self

        def hooked(*args: Any, **kwargs: Any) -> Any:
            if tls.busy or not rec.active:
                return orig(*args, **kwargs)
            try:
                if waiting:  # async calls not seen complete yet: look now (C4_ASYNC_TIMING)
                    poll()
                n = len(args)
                st = by_key.get(args[g_pos] if n > g_pos else kwargs.get(g_name))
                if st is None:
                    st = resolve(args[g_pos] if n > g_pos else kwargs.get(g_name))
                if st.skip:
                    return orig(*args, **kwargs)
                data: Any = args[d_pos] if n > d_pos else kwargs.get(d_name)
                try:
                    nbytes, dt = data.nbytes, dtypes[data.dtype]
                except (AttributeError, KeyError):
                    nbytes, dt = measure(data)
                peer = args[p_pos] if n > p_pos else kwargs.get(p_name)
                if peer is None:
                    gpeer = args[q_pos] if n > q_pos else kwargs.get(q_name)
                    peer = st.ranks[gpeer] if gpeer is not None else -1
                if peer == -1 and not is_send and not is_async:
                    # recv from any source: the sender is known only when it returns
                    return _recv_any(rec, orig, args, kwargs, st, op_idx, nbytes, dt)
                key = (is_send, peer)
                seq = st.p2p.get(key, 0)
                st.p2p[key] = seq + 1
                token = next(tokens)
                t_enter = time_ns()
                row = (st.idx, seq, op_idx, nbytes, dt, t_enter, -1, -1, OK, peer)
            except Exception:
                rec._prepare_failed()
                return orig(*args, **kwargs)
            if st.invoke is not None:
                return st.invoke(orig, args, kwargs, row, token, is_async, st, True)
            pending[token] = row
            tls.busy = True
            try:
                result = orig(*args, **kwargs)
            except BaseException as exc:
                pending.pop(token, None)
                complete(row, time_ns(), exc)
                raise
            finally:
                tls.busy = False
            if is_async and result is not None:
                if done.future_timing:
                    track(result, ((token, row),), st)
                else:  # track() inlined: poll and wait timing just remember the Work
                    waiting[id(result)] = (result, ((token, row),))
                    done.async_calls += 1
                return result
            t_end = time_ns()
            del pending[token]
            if len(rows) < cap:
                rows.append((row[0], seq, op_idx, nbytes, dt, t_enter, -1, t_end, OK, peer))
                if len(rows) == half:
                    wake.set()
            else:
                buf.dropped_full += 1
            return result

        return hooked

    def _wrap_lifecycle(self, name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        def hooked(*args: Any, **kwargs: Any) -> Any:
            result = orig(*args, **kwargs)
            try:
                if name == "init_process_group":
                    self.attach()
                elif not self.dist.is_initialized():
                    self.forget_groups()  # new groups after a re-init count from 0 again
            except Exception:
                log.debug("c4 collector: %s bookkeeping failed", name, exc_info=True)
            return result

        return hooked


def _recv_any(rec: Recorder, orig: Callable[..., Any], args: tuple, kwargs: dict,
              st: GroupState, op_idx: int, nbytes: int, dt: int) -> Any:
    """A synchronous recv from any source: numbered once the sender is known."""
    t_enter = time.time_ns()
    token = rec.next_token()
    open_row = (st.idx, -1, op_idx, nbytes, dt, t_enter, -1, -1, OK, -1)
    rec.buf.pending[token] = open_row
    rec._tls.busy = True
    try:
        src = orig(*args, **kwargs)
    except BaseException as exc:
        rec.buf.pending.pop(token, None)
        rec.done.complete(open_row, time.time_ns(), exc)
        raise
    finally:
        rec._tls.busy = False
    t_end = time.time_ns()
    rec.buf.pending.pop(token, None)
    peer = int(src) if isinstance(src, int) else -1
    key = (False, peer)
    seq = st.p2p.get(key, 0)
    st.p2p[key] = seq + 1
    rec.done.complete((st.idx, seq, op_idx, nbytes, dt, t_enter, -1, -1, OK, peer), t_end, None)
    return src
