"""What the sandbox's per-job short cuts (issue 40) must keep as it was.

A grading child imports a module that is one file of its run dir without importlib's path search,
and the job's inputs reach it through marshal instead of JSON trees. Each test here holds the
behaviour importlib and the tree codec gave: the module's identity attributes, the source encoding
of its bytes, a module that replaces itself, an import that fails; every plain value arrives equal,
of the same types, and as separate objects where the caller passed one object twice.
"""

import math

import pytest

from sandboxes import start_sandbox


@pytest.fixture(scope="module")
def sandbox():
    with start_sandbox(workers=1) as box:
        yield box


IDENTITY = '''
import sys


def about():
    module = sys.modules[__name__]
    return [__name__, __file__, __package__, __spec__.name, __spec__.origin, __spec__.has_location,
            type(__loader__).__name__, module.__dict__ is globals(), about.__module__]
'''


def test_a_graded_module_has_the_identity_importlib_gives_it(sandbox):
    result = sandbox.call_function({"share.py": IDENTITY}, "share", "about", [()])
    assert result.status == "ok", result
    name, file, package, spec_name, origin, located, loader, own_globals, defined_in = result.outputs[0][1]
    assert (name, package, spec_name, loader, own_globals, defined_in) == \
        ("share", "", "share", "SourceFileLoader", True, "share")
    assert file == origin and file.endswith("/share.py") and located is True


def test_the_source_encoding_declared_in_the_file_is_honoured(sandbox):
    source = "# -*- coding: latin-1 -*-\ndef f():\n    return '\u00e9'\n"  # written as UTF-8, read as Latin-1
    assert sandbox.call_function({"m.py": source}, "m", "f", [()]).outputs == [("value", "\u00c3\u00a9")]


def test_a_module_that_replaces_itself_in_sys_modules_is_the_one_called(sandbox):
    source = "import sys, types\n_m = types.ModuleType('m')\n_m.f = lambda: 'replaced'\nsys.modules['m'] = _m\n"
    assert sandbox.call_function({"m.py": source}, "m", "f", [()]).outputs == [("value", "replaced")]


def test_a_failing_import_is_an_import_error_and_a_package_still_goes_through_importlib(sandbox):
    failed = sandbox.call_function({"m.py": "raise ValueError('no')\ndef f():\n    return 1\n"}, "m", "f", [()])
    assert failed.status == "import_error" and "ValueError: no" in failed.detail
    package = {"m.py": "def f():\n    return 'file'\n", "m/__init__.py": "def f():\n    return 'package'\n"}
    assert sandbox.call_function(package, "m", "f", [()]).outputs == [("value", "package")]


ECHO = "def echo(*args):\n    return list(args)\n\n\ndef first_after_mutating_second(a, b):\n    b.append(2)\n    return a\n"


def test_inputs_arrive_equal_and_of_the_same_types(sandbox):
    values = (None, True, 0, -(2 ** 200), 1.5, -0.0, math.inf, "x\u00e9\U0001f600", b"\x00\xff",
              [1, (2, [3])], {"k": (1, 2), (1, "a"): [None]}, (), [])
    result = sandbox.call_function({"m.py": ECHO}, "m", "echo", [values])
    assert result.status == "ok", result
    echoed = result.outputs[0][1]
    assert echoed == list(values)
    assert [type(v) for v in echoed] == [type(v) for v in values]
    assert math.copysign(1.0, echoed[5]) == -1.0


def test_one_object_passed_twice_arrives_as_two(sandbox):
    shared = [1]
    result = sandbox.call_function({"m.py": ECHO}, "m", "first_after_mutating_second", [(shared, shared)])
    assert result.outputs == [("value", [1])] and shared == [1]


def _verdict(program, number: int, arch: int = 0xC000003E, first_arg: int = 0) -> int:
    """What the classic-BPF seccomp program returns for one syscall (its loads, jumps and returns)."""
    data, at, accumulator = {0: number, 4: arch, 16: first_arg}, 0, 0
    while True:
        code, jump_true, jump_false, k = program[at]
        if code == 0x20:
            accumulator, at = data[k], at + 1
        elif code == 0x06:
            return k
        else:
            taken = {0x15: accumulator == k, 0x25: accumulator > k, 0x35: accumulator >= k}[code]
            at += 1 + (jump_true if taken else jump_false)


def test_the_merged_seccomp_program_denies_exactly_the_listed_calls():
    """The filter checks runs of consecutive numbers (issue 40: shorter to compile per job); every
    syscall number must still get the verdict the lists in seccomp.py give it."""
    from bugfix_rl.sandbox import seccomp

    program = seccomp.seccomp_instructions()
    eperm, enosys, allow, kill = 0x50000 | 1, 0x50000 | 38, 0x7FFF0000, 0x80000000
    denied = {seccomp._SYSCALL[name] for name in seccomp._DENIED}
    ipc = {n for first, last in seccomp.IPC_SYSCALL_RANGES for n in range(first, last + 1)}
    for number in range(600):
        expected = eperm if number in denied | ipc else enosys if number == 435 else allow
        assert _verdict(program, number) == expected, number
    assert _verdict(program, 157, first_arg=1) == eperm and _verdict(program, 157, first_arg=15) == allow  # prctl
    assert _verdict(program, 0x40000000 + 1) == kill and _verdict(program, 1, arch=0x40000003) == kill
    assert all(max(jt, jf) < 256 for _, jt, jf, _ in program) and len(program) < 70
