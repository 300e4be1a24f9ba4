"""Ship a rank's last records when it is stopped with SIGTERM, even from inside a collective.

Launchers (torchrun's agent, Slurm, Kubernetes) stop ranks with SIGTERM first. With SIGTERM at
its default action the process dies at once and the rows of the last flush interval, plus the
call it was stuck in, are lost: exactly what diagnosing a dying job needs.

Why not a plain ``signal.signal`` handler: Python runs it on the main thread only, between
bytecodes, and a rank blocked inside a C++ collective never gets there, so it would ignore
SIGTERM until its collective timed out. Why not ``sigwait`` in a thread: that needs SIGTERM
blocked in *every* thread, and the threads torch and gloo start before ``install()`` (gloo's
workers, the store's) keep their own masks, so the kernel may hand the signal to one of them and
the process dies unflushed; a blocked mask would also be inherited by every subprocess the
program starts, which would then ignore SIGTERM.

What we do instead: Python's C-level signal handler, whichever thread the kernel picks, writes
the signal number to the ``signal.set_wakeup_fd`` descriptor before anything waits for the main
thread. A daemon thread reads that pipe; on SIGTERM it ships what is left (bounded by
``term_flush_s``) and then:

- if SIGTERM had its default action when we armed (we installed the Python-level stand-in), it
  restores the default at the C level and re-sends SIGTERM to the process: the process dies of
  the signal exactly as before (exit status -15 / 143; no ``atexit``, no ``finally``);
- if the program handles SIGTERM itself (before or after us), it only flushes; the program's
  handler runs as it always did, when its main thread next runs Python;
- if SIGTERM is ignored, nothing is armed.

The stand-in handler also runs on the main thread when that thread does get to Python first, so
a rank busy in Python stops within the bound instead of computing on while we flush.
A wakeup descriptor that the program had set is chained (every byte is forwarded to it); one
that the program sets after us replaces ours, and then only the main-thread path remains.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

SIGTERM = signal.SIGTERM
# A process whose default-action SIGTERM we re-sent, if it is somehow still alive after this,
# exits with the status a shell reports for death by SIGTERM.
_DIE_GRACE_S = 1.0


def _libc_signal() -> Callable[[int, Any], Any] | None:
    """libc's ``signal()``: the one way to restore SIG_DFL off the main thread."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.signal
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_int, ctypes.c_void_p]
        return fn
    except Exception:
        return None


class TermWatch:
    """One armed SIGTERM watch; see module docstring.

    ``on_term(final)`` ships what is left: ``final`` when the process is about to die (ship
    every pending call as open, then stop), else a flush that keeps shipping afterwards. It must
    return within about ``bound_s``; the watch waits for it at most that long anyway.
    """

    def __init__(self, on_term: Callable[[bool], None], bound_s: float) -> None:
        self._on_term = on_term
        self._bound_s = bound_s
        self._read_fd = self._write_fd = -1
        self._chained_fd = -1
        self._owns_default = False
        self._libc_signal: Callable[[int, Any], Any] | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._running = False
        self._done = threading.Event()
        # one bound method object, so that ``getsignal(SIGTERM) is self._handler`` can hold
        self._handler = self._main_thread_handler
        self.armed = False

    # ------------------------------------------------------------------ arm / disarm
    def arm(self) -> bool:
        """Start watching; False (and nothing changed) where that is impossible or pointless."""
        if threading.current_thread() is not threading.main_thread():
            log.debug("c4 collector: not on the main thread; SIGTERM flush not armed")
            return False
        current = signal.getsignal(SIGTERM)
        if current is signal.SIG_IGN or current is None:
            return False  # ignored, or handled by C code we cannot see: leave it alone
        self._libc_signal = _libc_signal()
        read_fd, write_fd = os.pipe()  # close-on-exec: programs the job runs do not inherit it
        os.set_blocking(write_fd, False)  # required by set_wakeup_fd
        try:
            previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(read_fd)
            os.close(write_fd)
            log.debug("c4 collector: cannot set the signal wakeup fd", exc_info=True)
            return False
        self._read_fd, self._write_fd, self._chained_fd = read_fd, write_fd, previous
        if current is signal.SIG_DFL:
            signal.signal(SIGTERM, self._handler)
            self._owns_default = True
        self._thread = threading.Thread(target=self._watch, name="c4-collector-sigterm",
                                        daemon=True)
        self._thread.start()
        self.armed = True
        return True

    def disarm(self) -> None:
        """Give SIGTERM and the wakeup fd back (main thread only; elsewhere it stays armed)."""
        if not self.armed or threading.current_thread() is not threading.main_thread():
            return
        self._restore_signal_state()
        self.armed = False
        # The C handler no longer writes here; closing the write end ends the watcher (EOF).
        os.close(self._write_fd)
        self._write_fd = -1

    def after_fork_in_child(self) -> None:
        """A forked child has no watcher: give it its SIGTERM and wakeup fd back, close pipes."""
        if not self.armed:
            return
        with contextlib.suppress(Exception):
            self._restore_signal_state()
        for fd in (self._read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._read_fd = self._write_fd = -1
        self.armed = False

    def _restore_signal_state(self) -> None:
        current = signal.set_wakeup_fd(self._chained_fd)
        if current != self._write_fd:
            signal.set_wakeup_fd(current)  # the program replaced ours meanwhile: keep its fd
        if self._owns_default and signal.getsignal(SIGTERM) is self._handler:
            signal.signal(SIGTERM, signal.SIG_DFL)

    # ------------------------------------------------------------------ the two paths
    def _watch(self) -> None:
        read_fd = self._read_fd
        try:
            while True:
                try:
                    data = os.read(read_fd, 512)
                except InterruptedError:
                    continue
                if not data:
                    return  # disarmed
                if self._chained_fd != -1:
                    with contextlib.suppress(OSError):
                        os.write(self._chained_fd, data)
                if SIGTERM in data:
                    self._handle()
        except Exception:
            log.exception("c4 collector: SIGTERM watcher failed")
        finally:
            with contextlib.suppress(OSError):
                os.close(read_fd)

    def _main_thread_handler(self, signum: int, frame: Any) -> None:
        """Stands in for SIG_DFL at the Python level; runs when the main thread reaches Python."""
        self._handle()

    def _handle(self) -> None:
        """Flush (once per signal, whichever path comes first), then die if the default says so."""
        with self._lock:
            first = not self._running
            if first:
                self._running = True
                self._done.clear()
        if not first:
            # The other path is flushing: wait for it (the process normally dies meanwhile).
            self._done.wait(self._bound_s + 0.5)
            if self._dies():
                self._die()
            return
        dies = self._dies()
        t0 = time.monotonic()
        try:
            self._on_term(dies)
        except Exception:
            log.exception("c4 collector: flushing on SIGTERM failed")
        log.debug("c4 collector: SIGTERM flush took %.1f ms", (time.monotonic() - t0) * 1e3)
        if dies:
            self._die()
        with self._lock:
            self._running = False
            self._done.set()

    def _dies(self) -> bool:
        # Our stand-in still in place: the program never asked for anything but the default.
        return self._owns_default and signal.getsignal(SIGTERM) is self._handler

    def _die(self) -> None:
        """Terminate as SIGTERM's default action would: death by the signal itself."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(SIGTERM, signal.SIG_DFL)
        elif self._libc_signal is not None:
            self._libc_signal(int(SIGTERM), None)  # SIG_DFL is the null pointer
        else:
            os._exit(128 + int(SIGTERM))
        os.kill(os.getpid(), SIGTERM)
        time.sleep(_DIE_GRACE_S)  # delivery is immediate; this only guards a masked thread
        os._exit(128 + int(SIGTERM))
