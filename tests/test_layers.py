"""The layer rule between bugfix_rl's folders (docs/ARCHITECTURE.md): each floor imports only its own
floor and the floors below it, counting imports inside functions too. One arrow may run back up, and
it is named here with its reason; a new one fails this test."""

from __future__ import annotations

from test_import_graph import import_graph

# Bottom to top. A module's floor is the first of its dotted names (after bugfix_rl) found here.
FLOORS = (
    ("errors", "registry", "config", "types", "kernels", "checkpoint", "progress"),
    ("sandbox",),
    ("gym",),
    ("policy",),
    ("rollout",),
    ("algo",),
    ("recipes",),
    ("evaluate",),
    ("present",),
    ("run",),
    ("commands",),
    ("cli", "__main__"),
)

# The one arrow allowed to run back up: (importer's folder, imported folder) -> why.
ALLOWED_UPWARD = {
    ("config", "sandbox"): "config/validate.py checks env.sandbox.min_isolation, before anything is built, against the "
                           "sandbox's own list of isolation layers (sandbox/isolation.py, LAYERS). The list stays "
                           "with the fork server, which runs on the standard library alone and cannot import the "
                           "config package; the import is inside the check, so loading a config never loads the sandbox.",
}


def floor_of(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    for level, names in enumerate(FLOORS):
        if top in names:
            return level
    raise AssertionError(f"{module} sits on no floor: add its folder to FLOORS in tests/test_layers.py")


def upward_arrows(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(importer folder, imported folder) -> the module pairs whose import runs to a higher floor."""
    found: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for module, imports in graph.items():
        if module == "bugfix_rl":
            continue  # the package's __init__ (kernel pinning) sits below everything
        for target in imports:
            if target != "bugfix_rl" and floor_of(target) > floor_of(module):
                key = (module.split(".")[1], target.split(".")[1])
                found.setdefault(key, []).append((module, target))
    return found


def test_every_module_sits_on_a_floor():
    for module in import_graph():
        if module != "bugfix_rl":
            floor_of(module)


def test_imports_run_down_the_floors():
    arrows = upward_arrows(import_graph())
    unexpected = {key: sorted(pairs) for key, pairs in arrows.items() if key not in ALLOWED_UPWARD}
    assert unexpected == {}, f"imports running up the floors: {unexpected}"
    assert len(ALLOWED_UPWARD) <= 1


def test_the_rule_catches_an_arrow_up():
    graph = {"bugfix_rl.gym.tasks": {"bugfix_rl.policy.tiny"}, "bugfix_rl.policy.tiny": {"bugfix_rl.gym.tasks"}}
    assert upward_arrows(graph) == {("gym", "policy"): [("bugfix_rl.gym.tasks", "bugfix_rl.policy.tiny")]}


def test_no_source_file_is_over_450_lines():
    from test_import_graph import PACKAGE

    long_files = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
                  if (n := len(p.read_text().splitlines())) > 450}
    assert long_files == {}
