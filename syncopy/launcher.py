"""Quiet launches of CPU ranks (`syncopy run`, `syncopy verify`): torch's elastic launcher logs a
failed rank's exit, with its own traceback, at ERROR, and torch.multiprocessing warns as it stops the
other ranks. For a user mistake that is noise around the one line we print, so their records are
held back, and shown only when a rank failed for a reason of its own (`replay()`)."""
from __future__ import annotations

import contextlib
import logging


class _Held(logging.Handler):
    """Keeps the launcher's log records; they are shown only when a rank failed for a reason of its own."""

    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)

    def replay(self):
        """Hand the records to the handlers above the held loggers (torch's own), as if never held."""
        for record in self.records:
            held = next(name for name in _LAUNCHER_LOGGERS if record.name == name or record.name.startswith(name + "."))
            logging.getLogger(held).parent.handle(record)


_LAUNCHER_LOGGERS = ("torch.distributed.elastic", "torch.multiprocessing")


@contextlib.contextmanager
def launcher_log():
    held = _Held()
    loggers = [logging.getLogger(name) for name in _LAUNCHER_LOGGERS]
    saved = [(lg.handlers[:], lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.handlers[:] = [held]
        lg.propagate = False
    try:
        yield held
    finally:
        for lg, (handlers, propagate) in zip(loggers, saved):
            lg.handlers[:], lg.propagate = handlers, propagate
