"""What a job child runs once it is hardened: grading calls, the pytest-like collector, or a script.

Runs inside the sandbox, in the same process as model-written code, so nothing here is trusted by
the parent: its one report (written once, at the end, to the result fd) is checked by the parent for
the job's nonce, the expected number of outputs and a canary echoed through the value encoder, and
the outputs themselves are compared with expected values that never enter the sandbox.
"""

from __future__ import annotations

import _imp
import ctypes
import dataclasses
import errno
import importlib
import importlib.machinery
import io
import json
import os
import platform
import runpy
import socket
import sys
import traceback
import types

from . import pytest_lite, wire

RESULT_FD = 3
_ENCODER = json.JSONEncoder(separators=(",", ":"))  # json.dumps(..., separators=...) builds one per call


@dataclasses.dataclass(frozen=True)
class Streams:
    """A job's sys.stdin and sys.stdout/stderr, built once by the zygote (they hold no data: output
    is write-through, nothing is read before a job runs) over the fd numbers each child then fills:
    fd 0 is /dev/null; fd 1 is the output pipe, or /dev/null for a grading call."""

    stdin: io.TextIOWrapper
    to_pipe: io.TextIOWrapper
    to_null: io.TextIOWrapper

    @classmethod
    def build(cls) -> Streams:
        def output():
            return io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                    errors="backslashreplace", write_through=True)

        to_null = output()  # fd 1 is /dev/null here, as in a grading child
        pipe_read, pipe_write = os.pipe()
        saved = os.dup(1)
        try:
            os.dup2(pipe_write, 1)  # a pipe, as in a test run's child: the wrapper learns it cannot seek
            to_pipe = output()
        finally:
            os.dup2(saved, 1)
            for fd in (saved, pipe_read, pipe_write):
                os.close(fd)
        return cls(io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8"), to_pipe, to_null)


def run(job: dict, stdlib_path: list[str], streams: Streams | None = None) -> None:
    """Run `job` in the current (hardened) process and exit it; never returns."""
    sys.path[:] = [job["dir"]] + stdlib_path
    _forget_shadowed_modules(job["files"])
    kind = job["kind"]
    streams = streams or Streams.build()
    stream = streams.to_null if kind == "call" else streams.to_pipe
    sys.stdout = sys.stderr = stream
    sys.stdin = streams.stdin
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
    view = memoryview(_ENCODER.encode(payload).encode())
    while view:
        view = view[os.write(RESULT_FD, view):]
    os.close(RESULT_FD)


_MODULE_INDEX: tuple[int, dict[str, list[str]]] | None = None  # (len(sys.modules), {top-level name: modules})


def index_modules() -> None:
    """Index the loaded modules by top-level name (the zygote, once): a job child then forgets the
    few its files shadow without walking all of sys.modules."""
    global _MODULE_INDEX
    index: dict[str, list[str]] = {}
    for name in sys.modules:
        index.setdefault(name.split(".")[0], []).append(name)
    _MODULE_INDEX = (len(sys.modules), index)


def _forget_shadowed_modules(files: dict) -> None:
    """Files in the run dir win over modules the server had already imported under the same name.
    (No importlib.invalidate_caches(): the run dir is a path no finder has cached yet.)"""
    names = {path.replace("\\", "/").split("/")[0].removesuffix(".py") for path in files}
    if _MODULE_INDEX is not None and _MODULE_INDEX[0] == len(sys.modules):  # nothing loaded since
        for name in names:
            for loaded in _MODULE_INDEX[1].get(name, ()):
                sys.modules.pop(loaded, None)
        return
    for loaded in [name for name in sys.modules if name.split(".")[0] in names]:
        del sys.modules[loaded]


def _safe_message(error: BaseException) -> str:
    try:
        return f"{type(error).__name__}: {error}"[:300]
    except BaseException:  # a model-defined __str__ may raise anything
        return type(error).__name__


def _import_job_module(job: dict):
    """importlib.import_module(job["module"]), with a short path for the common case of a module that
    is one file of the run dir (`name.py`; no package `name/`, extension `name.*.so` or `__pycache__`
    beside it; not the name of a built-in or frozen module, which importlib would find first): the
    same module (name, __file__, __spec__ with a SourceFileLoader, code compiled from the file's bytes
    as importlib compiles them) without importlib's path search, which costs a fresh process more than
    the rest of a grading job."""
    name, files = job["module"], job["files"]
    filename = f"{name}.py"
    if not name.isidentifier() or filename not in files or name in sys.modules or _imp.is_builtin(name) \
            or _imp.is_frozen(name) or any(path.startswith((f"{name}/", "__pycache__/"))
                                           or (path.startswith(f"{name}.") and path.endswith(".so")) for path in files):
        return importlib.import_module(name)  # importlib's answer may not be the run dir's file
    path = f"{job['dir']}/{filename}"
    source = files[filename].encode("utf-8", "surrogatepass")  # the bytes the server wrote to `path`
    loader = importlib.machinery.SourceFileLoader(name, path)
    spec = importlib.machinery.ModuleSpec(name, loader, origin=path)
    spec.has_location = True
    module = types.ModuleType(name)
    module.__file__, module.__loader__, module.__spec__, module.__package__ = path, loader, spec, ""
    sys.modules[name] = module
    try:
        exec(compile(source, path, "exec", dont_inherit=True), module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return sys.modules[name]  # as importlib: a module may have replaced itself there


def _run_calls(job: dict) -> int:
    try:
        inputs = job["inputs"]  # plain values (the parent checked them), each a fresh object
        function = getattr(_import_job_module(job), job["function"])
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
