"""Helpers shared by the modules: argument checks, bytes for C, and running a long C call on a
worker thread so that Ctrl-C (KeyboardInterrupt) in the calling thread can set the library's flag."""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Callable, Optional

from .errors import InvalidInput


def to_bytes(s, what: str, allow_nul: bool = False) -> bytes:
    """UTF-8 bytes of the str `s` (or a path-like); refuses other types, lone surrogates
    (not encodable) and NUL characters (C strings end at the first NUL) with InvalidInput."""
    if isinstance(s, os.PathLike):
        s = os.fspath(s)
    if isinstance(s, bytes):
        b = s
    elif isinstance(s, str):
        try:
            b = s.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidInput("%s: not valid Unicode text (%s)" % (what, e), 5, "AF_ERR_INVALID_ARG") from None
    else:
        raise InvalidInput("%s: expected a str, got %s" % (what, type(s).__name__), 5, "AF_ERR_INVALID_ARG")
    if not allow_nul and b"\0" in b:
        raise InvalidInput("%s: holds a NUL character at offset %d" % (what, b.index(b"\0")), 5, "AF_ERR_INVALID_ARG")
    return b


def path_bytes(p, what: str) -> bytes:
    return to_bytes(p, what)


def check_int(v, what: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            import numpy as np
            if isinstance(v, np.integer):
                v = int(v)
            else:
                raise TypeError
        except TypeError:
            raise InvalidInput("%s: expected an int, got %s" % (what, type(v).__name__), 5,
                               "AF_ERR_INVALID_ARG") from None
    if v < lo or v > hi:
        raise InvalidInput("%s: %d outside [%d, %d]" % (what, v, lo, hi), 5, "AF_ERR_INVALID_ARG")
    return v


def check_float(v, what: str, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        try:
            v = float(v) if type(v).__module__ == "numpy" else None
        except (TypeError, ValueError):
            v = None
        if v is None:
            raise InvalidInput("%s: expected a number" % what, 5, "AF_ERR_INVALID_ARG")
    v = float(v)
    if not (lo <= v <= hi):
        raise InvalidInput("%s: %r outside [%g, %g]" % (what, v, lo, hi), 5, "AF_ERR_INVALID_ARG")
    return v


class Flag:
    """An int the library reads while it works (a cancel / interrupt flag)."""

    def __init__(self):
        self.value = ctypes.c_int(0)

    def set(self):
        self.value.value = 1

    def clear(self):
        self.value.value = 0

    @property
    def ptr(self):
        return ctypes.pointer(self.value)


def run_interruptible(call: Callable[[], object], on_interrupt: Callable[[int], None],
                      cancel_event=None, on_cancel: Optional[Callable[[], None]] = None):
    """Run `call()` on a worker thread and wait for it. A KeyboardInterrupt in this thread calls
    on_interrupt(n) (n = 1 for the first Ctrl-C, 2 for the second, ...), which sets the library's
    flag; the wait goes on until the call returns, then the KeyboardInterrupt is raised again.
    cancel_event (a threading.Event, may be None): once set (from any thread), on_cancel() is called
    once. Returns call()'s result or raises what it raised (af_last_error is per thread: `call` must turn
    a failure into an exception itself)."""
    box = {}
    done = threading.Event()  # not Thread.join: a join interrupted by Ctrl-C may report the thread dead

    def work():
        try:
            box["r"] = call()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box["e"] = e
        finally:
            done.set()

    t = threading.Thread(target=work, name="afinar-worker", daemon=True)
    t.start()
    interrupts = 0
    while True:
        try:
            while not done.wait(0.05):
                if cancel_event is not None and on_cancel is not None and cancel_event.is_set():
                    on_cancel()
                    on_cancel = None
            break
        except KeyboardInterrupt:
            interrupts += 1
            on_interrupt(interrupts)
    if interrupts:
        ki = KeyboardInterrupt()
        ki.result = box.get("r")  # what the call returned after stopping (train: its summary)
        ki.error = box.get("e")
        raise ki
    if "e" in box:
        raise box["e"]
    return box.get("r")


def optional_int(v, what: str, lo: int, hi: int) -> Optional[int]:
    return None if v is None else check_int(v, what, lo, hi)
