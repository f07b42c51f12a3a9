"""Whether multiprocessing can open its sockets under this process's temporary directory.

A DataLoader worker hands each batch's tensors to the loader through a file descriptor sent over an AF_UNIX
socket (torch's ``file_descriptor`` sharing; the worker's ``multiprocessing.resource_sharer`` listens at
``$TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX``, CPython 3.11 ``multiprocessing/connection.py``
``arbitrary_address``). A socket's path ends at 107 bytes on Linux (``sun_path``): under a longer TMPDIR the
worker fails with ``OSError: AF_UNIX path too long`` on its stderr alone, and ``next()`` waits for ever, in a
training run as in the check (measured, torch 2.13: /work/scratch/ownworld/plain.py under a 95-byte TMPDIR).
"""

from __future__ import annotations

import os
import socket
import tempfile

__all__ = ["socket_dir_problem"]


def socket_dir_problem(temp: str | None = None) -> str:
    """Why worker processes cannot pass batches under this process's TMPDIR (or ``temp``), said for a stranger;
    "" when they can (or the platform has no AF_UNIX). Binds nothing: the address is one in a directory that
    does not exist, so a path short enough fails with FileNotFoundError before any file is made."""
    if not hasattr(socket, "AF_UNIX"):
        return ""
    temp = tempfile.gettempdir() if temp is None else temp
    # As long as multiprocessing's own: mkdtemp(prefix="pymp-") and mktemp(prefix="listener-"), 8 random letters each.
    address = os.path.join(temp, "pymp-" + "0" * 8, "listener-" + "0" * 8)
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.bind(address)
        except OSError as e:
            if "too long" not in str(e):
                return ""  # FileNotFoundError: the path fits (its directory does not exist, nothing was made)
        else:  # the directory existed after all: leave nothing behind
            os.unlink(address)
            return ""
    return (f"a worker process could not connect: 'AF_UNIX path too long' (TMPDIR={temp}, {len(temp)} bytes: "
            f"multiprocessing's socket under it would be {len(address)} bytes, more than a socket's path may have, "
            "107 on Linux); your training would hang the same way. Set a shorter TMPDIR (TMPDIR=/tmp)")
