"""What a job child runs once it is hardened: grading calls, the pytest-like collector, or a script.

Runs inside the sandbox, in the same process as model-written code, so nothing here is trusted by
the parent: its one report (written once, at the end, to the result fd) is checked by the parent for
the job's nonce, the expected number of outputs and a canary echoed through the value encoder, and
the outputs themselves are compared with expected values that never enter the sandbox.
"""

from __future__ import annotations

import ctypes
import errno
import importlib
import io
import json
import os
import platform
import runpy
import socket
import sys
import traceback

from . import pytest_lite, wire

RESULT_FD = 3


def run(job: dict, stdlib_path: list[str]) -> None:
    """Run `job` in the current (hardened) process and exit it; never returns."""
    sys.path[:] = [job["dir"]] + stdlib_path
    _forget_shadowed_modules(job["files"])
    stream = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                              errors="backslashreplace", write_through=True)
    sys.stdout = sys.stderr = stream
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    kind = job["kind"]
    if kind == "call":
        code = _run_calls(job)
    elif kind == "pytest":
        code = pytest_lite.main(job["args"], lambda counts: _report(job, counts))
    elif kind == "python":
        code = _run_script(job)
    else:
        code = _selftest(job)
    try:
        stream.flush()
    finally:
        os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)


def _report(job: dict, payload: dict) -> None:
    """The job's single report on the result fd; later calls (model code calling it too) are void."""
    if job.get("reported"):
        return
    job["reported"] = True
    payload = dict(payload, nonce=job["nonce"], canary=wire.encode(wire.decode(job["canary"])))
    view = memoryview(json.dumps(payload, separators=(",", ":")).encode())
    while view:
        view = view[os.write(RESULT_FD, view):]
    os.close(RESULT_FD)


def _forget_shadowed_modules(files: dict) -> None:
    """Files in the run dir win over modules the server had already imported under the same name.
    (No importlib.invalidate_caches(): the run dir is a path no finder has cached yet.)"""
    names = {path.replace("\\", "/").split("/")[0].removesuffix(".py") for path in files}
    for loaded in [name for name in sys.modules if name.split(".")[0] in names]:
        del sys.modules[loaded]


def _safe_message(error: BaseException) -> str:
    try:
        return f"{type(error).__name__}: {error}"[:300]
    except BaseException:  # a model-defined __str__ may raise anything
        return type(error).__name__


def _run_calls(job: dict) -> int:
    try:
        inputs = [wire.decode(args) for args in job["inputs"]]
        function = getattr(importlib.import_module(job["module"]), job["function"])
    except BaseException as error:  # SyntaxError, SystemExit at import, missing function, ...
        _report(job, {"import_error": _safe_message(error)})
        return 0
    outputs = []
    for args in inputs:
        try:
            value = function(*args)
        except BaseException as error:
            outputs.append(["error", type(error).__name__])
            continue
        try:
            outputs.append(["value", wire.encode(value)])
        except wire.NotPlain:
            outputs.append(["error", "NotPlainValue"])
    _report(job, {"outputs": outputs})
    return 0


def _run_script(job: dict) -> int:
    path, *args = job["args"]
    sys.argv = [path, *args]
    try:
        runpy.run_path(path, run_name="__main__")
        code = 0
    except SystemExit as exit_request:
        code = exit_request.code
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    except BaseException as error:
        frames = traceback.extract_tb(error.__traceback__)
        start = next((i for i, frame in enumerate(frames) if frame.filename.endswith(path)), 0)
        print("Traceback (most recent call last):", file=sys.stderr)
        print("".join(traceback.format_list(frames[start:])), end="", file=sys.stderr)
        print("".join(traceback.format_exception_only(type(error), error)), end="", file=sys.stderr)
        code = 1
    sys.stdout.flush()
    _report(job, {"exit_code": code})
    return code


def _selftest(job: dict) -> int:
    """Probe each layer from inside a hardened child; True means the layer held."""
    checks = {"uid": os.getuid() != 0}
    try:
        with open(os.path.join(job["stdlib"], "colorsys.py")) as handle:  # never imported by the server
            checks["stdlib_readable"] = bool(handle.read(1))
    except OSError:
        checks["stdlib_readable"] = False
    try:
        open("/etc/passwd").close()
        checks["landlock"] = False
    except OSError as error:
        checks["landlock"] = error.errno == errno.EACCES
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
        checks["seccomp"] = False
    except OSError:
        try:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            checks["seccomp"] = False
        except OSError:
            checks["seccomp"] = True
    try:
        checks["ipcns"] = os.readlink("/proc/self/ns/ipc") != job["host_ipc"]
    except OSError:
        checks["ipcns"] = False
    checks["seccomp_ipc"] = _ipc_creation_denied()
    with open("written", "w") as handle:
        checks["run_dir_writable"] = handle.write("x") == 1
    _report(job, {"checks": checks})
    return 0


def _ipc_creation_denied() -> bool:
    """True when creating a SysV shared memory segment, message queue or semaphore set, or a POSIX
    message queue, fails with EPERM; whatever gets created anyway is removed again. x86_64 numbers."""
    if platform.machine() != "x86_64":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def call(number, *args):
        return libc.syscall(ctypes.c_long(number), *[a if isinstance(a, ctypes.c_char_p) else ctypes.c_long(a)
                                                     for a in args])

    create_flags, remove = 0o1000 | 0o600, 0  # IPC_CREAT | rw-------, IPC_RMID
    name = ctypes.c_char_p(b"bugfix-rl-selftest")
    attempts = [(lambda: call(29, 0, 4096, create_flags), lambda ident: call(31, ident, remove, 0)),  # shm
                (lambda: call(68, 0, create_flags), lambda ident: call(71, ident, remove, 0)),  # msg
                (lambda: call(64, 0, 1, create_flags), lambda ident: call(66, ident, 0, remove)),  # sem
                (lambda: call(240, name, os.O_CREAT | os.O_RDWR, 0o600, 0),  # mq_open
                 lambda fd: (os.close(fd), call(241, name)))]
    denied = True
    for create, undo in attempts:
        ident = create()
        if ident >= 0:
            undo(ident)
            denied = False
        elif ctypes.get_errno() != errno.EPERM:
            denied = False
    return denied
