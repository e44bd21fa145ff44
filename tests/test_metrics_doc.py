"""docs/metrics.md names every metric the training loops log.

Nothing is trained: the names are read from the source with ``ast``, wherever the loops build their records, so a
metric that moves to another module is still found, and a new one fails this test until the glossary has it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "metrics.md"
METRIC_WORDS = ("metrics", "diagnostics", "stats")  # functions and variables that build a metrics record
MERGERS = ("largest_peaks", "log")  # calls whose dict-literal argument is logged as it is


def key_name(node: ast.expr) -> str | None:
    """A dict key or subscript as the glossary writes it: ``"reward"`` -> reward, ``f"eval_{name}"`` -> eval_<name>."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = [v.value if isinstance(v, ast.Constant) else "<name>" for v in node.values]
        return "".join(parts)
    return None


def dict_keys(node: ast.AST) -> set[str]:
    """String keys of every dict literal within ``node``."""
    names = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Dict):
            names.update(name for key in inner.keys if key is not None and (name := key_name(key)))
    return names


def is_metric_word(name: str) -> bool:
    return any(word in name for word in METRIC_WORDS)


def target_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def logged_names(tree: ast.AST) -> set[str]:
    """Names a module puts into metrics records: the keys of dicts built in functions named *metrics* /
    *diagnostics* / *stats* or assigned to such variables, keys written into them, ``means.update(name=...)``
    keywords, and dict literals handed to ``largest_peaks`` or ``logger.log``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_metric_word(node.name):
            names |= dict_keys(node)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if is_metric_word(target_name(target)):
                    names |= dict_keys(node.value)
                if isinstance(target, ast.Subscript) and is_metric_word(target_name(target.value)):
                    if name := key_name(target.slice):
                        names.add(name)
        elif isinstance(node, ast.Call):
            called = target_name(node.func)
            if called in MERGERS:
                for argument in node.args:
                    names |= dict_keys(argument)
            if called == "update" and target_name(node.func.value) in ("means", "metrics", "stats"):
                names.update(keyword.arg for keyword in node.keywords if keyword.arg)
    return names


def task_metric_names() -> set[str]:
    """Each text task's per-completion metrics (``TaskScores(metrics={...})``), logged as ``task_<name>``."""
    names = set()
    for path in sorted((ROOT / "envs" / "text" / "tasks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and target_name(node.func) == "TaskScores":
                for keyword in node.keywords:
                    if keyword.arg == "metrics":
                        names.update(f"task_{name}" for name in dict_keys(keyword.value))
    return names


def stat_names(tree: ast.AST) -> set[str]:
    """The update's per-minibatch statistics: the strings of the ``STAT_NAMES`` tuple, wherever it is defined."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(target_name(t) == "STAT_NAMES" for t in node.targets):
            strings = [v for v in ast.walk(node.value) if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            names.update(v.value for v in strings)
    return names


def source_metric_names() -> set[str]:
    names = set()
    for path in sorted((ROOT / "agents").rglob("*.py")):
        tree = ast.parse(path.read_text())
        names |= logged_names(tree) | stat_names(tree)
    return names | task_metric_names()


def test_the_scan_finds_the_loops_metrics():
    """A guard on the scan itself: if a refactor hides the records from it, this fails before the glossary test
    passes vacuously."""
    names = source_metric_names()
    expected = {"episode_return", "reward", "ref_kl", "epochs_run", "kl_after_update", "explained_variance"}
    expected |= {"policy_loss", "approx_kl_k3", "grad_norm"}  # from STAT_NAMES
    expected |= {"zero_variance_groups", "sampling_rounds", "response_length", "eval_reward", "eval_<name>"}
    expected |= {"rollout_peak_gb", "eval_peak_gb", "task_accuracy", "task_gold_lexicon"}
    assert expected <= names, sorted(expected - names)


def first_cells(markdown: str) -> tuple[str, str]:
    """The first cells of the table rows in the at-a-glance section, and in the rest of the page."""
    glance, rest, section = [], [], ""
    for line in markdown.splitlines():
        if line.startswith("## "):
            section = line
        elif line.startswith("| `"):
            (glance if "at a glance" in section else rest).append(line.split("|")[1])
    return "\n".join(glance), "\n".join(rest)


def test_every_logged_metric_is_in_the_glossary():
    """Each name has a row in the table at the top and a row of its own where it is explained."""
    glance, rest = first_cells(GLOSSARY.read_text())
    names = source_metric_names()
    missing_glance = sorted(name for name in names if f"`{name}`" not in glance)
    missing_entry = sorted(name for name in names if f"`{name}`" not in rest)
    assert not missing_glance, f"docs/metrics.md's table at a glance does not name: {missing_glance}"
    assert not missing_entry, f"docs/metrics.md has no row explaining: {missing_entry}"
