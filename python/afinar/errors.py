"""Exceptions raised by afinar: one class per kind of failure of the C library (af_status).

Every exception carries the library's message ("FILE: field: problem at offset N"), the numeric
status (``.status``), its name (``.status_name``, e.g. ``"AF_ERR_FORMAT"``) and what the failure is
about when the library says more than the status (``.kind``: ``"checkpoint"`` for a checkpoint whose
files do not verify, so the run cannot resume from it; else None).

=====================  ===================================================  ===================
class                  statuses                                             also a
=====================  ===================================================  ===================
``InvalidInput``       AF_ERR_INVALID_ARG, AF_ERR_FORMAT, AF_ERR_RANGE       ``ValueError``
``NotFound``           AF_ERR_NOT_FOUND, AF_ERR_IO (file missing/unreadable) ``OSError``
``Unsupported``        AF_ERR_UNSUPPORTED                                   ``NotImplementedError``
``OutOfMemory``        AF_ERR_NOMEM                                         ``MemoryError``
``DeviceError``        AF_ERR_DEVICE                                        ``RuntimeError``
``Cancelled``          AF_ERR_CANCELLED, AF_ERR_INTERRUPTED                 ``RuntimeError``
``Error``              AF_ERR_INTERNAL (a bug) and the base of all above
=====================  ===================================================  ===================
"""
from __future__ import annotations


class Error(Exception):
    """Base class of every afinar failure. ``status``: the af_status number; ``status_name``."""

    def __init__(self, message: str, status: int = 8, status_name: str = "AF_ERR_INTERNAL"):
        super().__init__(message)
        self.message = message
        self.status = status
        self.status_name = status_name
        self.kind = None  # af_last_error_kind: "checkpoint", or None

    def __str__(self) -> str:
        return self.message


class InvalidInput(Error, ValueError):
    """An argument, a setting or a file's content is invalid (AF_ERR_INVALID_ARG, AF_ERR_FORMAT,
    AF_ERR_RANGE)."""


class NotFound(Error, OSError):
    """A file, key, tensor or token is missing, or a file cannot be read or written (AF_ERR_NOT_FOUND,
    AF_ERR_IO)."""

    def __init__(self, message: str, status: int = 6, status_name: str = "AF_ERR_NOT_FOUND"):
        Error.__init__(self, message, status, status_name)

    def __str__(self) -> str:
        return self.message


class Unsupported(Error, NotImplementedError):
    """Well-formed but not supported: architecture, tensor type, template (AF_ERR_UNSUPPORTED)."""


class OutOfMemory(Error, MemoryError):
    """An allocation failed (AF_ERR_NOMEM)."""


class DeviceError(Error, RuntimeError):
    """A compute device failed (AF_ERR_DEVICE)."""


class Cancelled(Error, RuntimeError):
    """The work was stopped on request (AF_ERR_CANCELLED, AF_ERR_INTERRUPTED)."""


_BY_STATUS = {1: NotFound, 2: InvalidInput, 3: Unsupported, 4: OutOfMemory, 5: InvalidInput, 6: NotFound,
              7: InvalidInput, 8: Error, 9: Cancelled, 10: Cancelled, 11: DeviceError}


_KINDS = {1: "checkpoint"}  # af_error_kind (afinar.h) -> .kind


def raise_for_status(status: int, message: str, status_name: str, kind: int = 0) -> None:
    """Raise the class of `status` with `message` and the library's error kind (af_error_kind)."""
    cls = _BY_STATUS.get(status, Error)
    e = cls(message or status_name, status, status_name)
    e.kind = _KINDS.get(kind)
    raise e
