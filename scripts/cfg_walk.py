"""The walk of the whole config from the train entry point (issue 37, must-show 3), measured statically.

    .venv/bin/python scripts/cfg_walk.py [--src src] [--start bugfix_rl.run.training:run_training]

Definition (ast only, nothing is imported or run):
- The walk starts at the function `--start` (default: whichever module defines a top-level
  `run_training`). In it, the whole config is the parameter named `cfg`.
- A call is followed when one of its arguments (positional or keyword) is exactly a name bound to the
  whole config, and the called name resolves to a function defined inside bugfix_rl: a module-level
  function, a class (its `__init__`), `self.method` in the same class, or `module.function`, through
  top-level and function-local imports (re-exports followed). In the callee the whole config is the
  parameter that argument binds to. Calls on objects (`trainer.step(...)`), attributes holding the config
  (`self.cfg`) and config sub-trees (`cfg.algo`) are not followed: only the object `cfg` itself is.
- `--parts` also follows the config's parts: an argument that is an attribute chain of a config-bound
  name ending at a sub-config field (`cfg.algo`, `cfg.env.sandbox`: a field of a config dataclass whose
  type is another class of the config module); the callee's parameter is config-bound in turn.
- A function's body includes its nested functions and lambdas (their calls are its text);
  `partial(f, ..., cfg=cfg)` counts as a call of f.
- returns (the issue's "bounce"): a followed edge from file A to file B != A, after which the walk comes
  back up into A; counted per A. A climb is the stricter kind: B already on the chain, a cycle in the walk.
- Depth first, each function expanded once, on the first chain that reaches it.
- Each call edge (caller function -> callee function) is counted once, however many call sites it has.
- files entered: distinct files holding a function the walk reaches (the start's file included).
- a climb back up: a followed call edge from a function in file A to one in file B != A where B holds
  a function on the current call chain (the stack above the caller); each edge counted once.
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from pathlib import Path


class Module:
    def __init__(self, name: str, path: Path, package: str):
        self.name, self.path = name, path
        self.tree = ast.parse(path.read_text())
        self.package = package  # what a relative import is relative to
        self.functions: dict[str, ast.AST] = {}  # qualname -> FunctionDef (top level, and Class.method)
        self.classes: set[str] = set()
        self.imports = imports_of(self.tree.body, self)
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                self.classes.add(node.name)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.functions[f"{node.name}.{item.name}"] = item


def imports_of(statements, module: Module, nested: bool = False) -> dict[str, tuple[str, str | None]]:
    """local name -> (module, attribute) for `from m import a as b`, (module, None) for `import m as b`.
    nested: also the imports inside these statements (a function body's lazy imports)."""
    found = {}
    nodes = [n for s in statements for n in ast.walk(s)] if nested else statements
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found[alias.asname] = (alias.name, None)
                else:
                    found[alias.name.split(".")[0]] = (alias.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                found[alias.asname or alias.name] = (base, alias.name)
    return found


def load(src: Path) -> dict[str, Module]:
    modules = {}
    for path in sorted((src / "bugfix_rl").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = Module(name, path, name if is_package else ".".join(parts[:-1]))
    return modules


def resolve(modules, module_name: str, name: str, seen=()) -> tuple[str, str] | None:
    """(module, qualname of a function) that `name` in `module_name`'s globals calls, or None."""
    module = modules.get(module_name)
    if module is None or (module_name, name) in seen:
        return None
    if name in module.functions:
        return module_name, name
    if name in module.classes:
        init = f"{name}.__init__"
        return (module_name, init) if init in module.functions else None
    if name in module.imports:
        target, attribute = module.imports[name]
        if attribute is not None:
            return resolve(modules, target, attribute, (*seen, (module_name, name)))
    return None


def module_alias(modules, scope: dict, name: str) -> str | None:
    """The bugfix_rl module a local name refers to (`from bugfix_rl.algo import update as u`), or None."""
    if name not in scope:
        return None
    target, attribute = scope[name]
    full = target if attribute is None else f"{target}.{attribute}"
    return full if full in modules else None


def callee(modules, module: Module, scope: dict, class_name: str | None, func: ast.AST):
    if isinstance(func, ast.Name):
        if func.id in scope and func.id not in module.functions:
            target, attribute = scope[func.id]
            return resolve(modules, target, attribute) if attribute else None
        return resolve(modules, module.name, func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = func.value.id
        if owner == "self" and class_name and f"{class_name}.{func.attr}" in module.functions:
            return module.name, f"{class_name}.{func.attr}"
        if owner in module.classes and f"{owner}.{func.attr}" in module.functions:
            return module.name, f"{owner}.{func.attr}"
        aliased = module_alias(modules, scope, owner)
        if aliased:
            return resolve(modules, aliased, func.attr)
    return None


def bound_parameter(definition: ast.AST, is_method: bool, position: int | None, keyword: str | None) -> str | None:
    args = definition.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    if is_method:
        positional = positional[1:]
    if keyword is not None:
        names = positional + [a.arg for a in args.kwonlyargs]
        return keyword if keyword in names else None
    return positional[position] if position < len(positional) else None


def sub_config_fields(modules) -> set[str]:
    """Names of config fields whose type is another config class (env, algo, sandbox, ...)."""
    trees = [m.tree for name, m in modules.items()
             if name == "bugfix_rl.config" or name.startswith("bugfix_rl.config.")]
    classes = [node for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    class_names = {c.name for c in classes}
    return {item.target.id for c in classes for item in c.body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            and isinstance(item.annotation, ast.Name) and item.annotation.id in class_names}


def config_bound(expression: ast.AST, cfg_names: set[str], parts: set[str]) -> bool:
    """`expression` is a config-bound name, or (parts non-empty) an attribute chain from one ending at a part."""
    if isinstance(expression, ast.Name):
        return expression.id in cfg_names
    return (isinstance(expression, ast.Attribute) and expression.attr in parts
            and config_bound(expression.value, cfg_names, parts))


def cfg_calls(modules, module_name: str, qualname: str, cfg_names: set[str], parts: set[str] = frozenset()):
    """(callee module, callee qualname, its parameter bound to the config) for each followed call."""
    module = modules[module_name]
    definition = module.functions[qualname]
    class_name = qualname.split(".")[0] if "." in qualname else None
    scope = {**module.imports, **imports_of(definition.body, module, nested=True)}
    for node in ast.walk(definition):
        if not isinstance(node, ast.Call):
            continue
        func, args = node.func, node.args
        if isinstance(func, ast.Name) and func.id == "partial" and args:  # functools.partial(f, ...): a call of f
            func, args = args[0], args[1:]
        passes = [(i, None) for i, a in enumerate(args) if config_bound(a, cfg_names, parts)]
        passes += [(None, k.arg) for k in node.keywords if k.arg and config_bound(k.value, cfg_names, parts)]
        if not passes:
            continue
        target = callee(modules, module, scope, class_name, func)
        if target is None:
            continue
        target_definition = modules[target[0]].functions[target[1]]
        for position, keyword in passes:
            parameter = bound_parameter(target_definition, "." in target[1], position, keyword)
            if parameter:
                yield target[0], target[1], parameter
                break


def walk(modules, start: tuple[str, str], parts: set[str] = frozenset()):
    files, climbs, edges, expanded, returns = {start[0]}, [], 0, set(), Counter()
    stack: list[str] = []  # module of each function on the current call chain

    def visit(module_name: str, qualname: str, cfg_name: str) -> None:
        nonlocal edges
        expanded.add((module_name, qualname))
        stack.append(module_name)
        calls = dict.fromkeys(cfg_calls(modules, module_name, qualname, {cfg_name}, parts))  # each edge once
        for target_module, target_name, parameter in calls:
            edges += 1
            files.add(target_module)
            if target_module != module_name:
                returns[module_name] += 1
            if target_module != module_name and target_module in stack[:-1]:
                climbs.append((module_name, qualname, target_module, target_name))
            if (target_module, target_name) not in expanded:
                visit(target_module, target_name, parameter)
        stack.pop()

    visit(*start, "cfg")
    return files, climbs, edges, expanded, returns


def find_start(modules) -> tuple[str, str]:
    for name, module in modules.items():
        if "run_training" in module.functions:
            return name, "run_training"
    raise SystemExit("no module defines run_training")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--src", default=str(Path(__file__).resolve().parents[1] / "src"))
    parser.add_argument("--start", help="module:function (default: the module defining run_training)")
    parser.add_argument("--parts", action="store_true", help="also follow sub-configs (cfg.algo, cfg.env, ...)")
    parser.add_argument("--verbose", action="store_true", help="list the files and every climb")
    args = parser.parse_args()
    modules = load(Path(args.src))
    start = tuple(args.start.split(":")) if args.start else find_start(modules)
    parts = sub_config_fields(modules) if args.parts else frozenset()
    files, climbs, edges, expanded, returns = walk(modules, start, parts)
    print(f"start: {start[0]}.{start[1]}")
    print(f"functions reached: {len(expanded)}, call edges followed: {edges}")
    print(f"files entered: {len(files)}")
    print(f"climbs back up: {len(climbs)}")
    by_file = Counter(target_module for _, _, target_module, _ in climbs)
    print("climbs into: " + (", ".join(f"{m} {n}" for m, n in by_file.most_common()) or "-"))
    print(f"returns into a caller's file: {sum(returns.values())} ("
          + ", ".join(f"{m} {n}" for m, n in returns.most_common()) + ")")
    if args.verbose:
        for name in sorted(files):
            print(f"  file {name}")
        for caller_module, caller, target_module, target in climbs:
            print(f"  climb {caller_module}.{caller} -> {target_module}.{target}")


if __name__ == "__main__":
    main()
