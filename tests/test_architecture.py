"""The layers are enforced: the core stands alone, import contracts hold and fail when broken, one name registry."""

import inspect
import json
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import agents
from agents.commands.compare import PRESET_ALIASES, PRESETS
from agents.commands.train_args import parse_train_args
from agents.core.kl import AdaptivePenalty, FixedPenalty, ProportionalKL
from agents.core.objectives import OBJECTIVES, objective_label
from agents.text.config import TextTrainConfig

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"core", "walkers", "text", "runs", "commands"}
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_importing_the_core_loads_no_environment_model_library_or_command_line():
    core_modules = [f"agents.core.{m.name}" for m in pkgutil.iter_modules([str(ROOT / "agents" / "core")])]
    assert {"update", "objectives", "kl", "losses", "advantages", "batch", "policy"} <= {
        m.split(".")[-1] for m in core_modules
    }
    script = (
        f"import importlib, json, sys\nfor m in {core_modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    loaded = set(json.loads(result.stdout))
    assert "torch" in loaded  # the import really happened
    assert not loaded & {"gymnasium", "mujoco", "transformers", "peft", "vaderSentiment", "tyro", "envs"}


def test_every_agents_module_lives_in_a_layer():
    top_level = {m.name for m in pkgutil.iter_modules(agents.__path__)}
    assert top_level == LAYERS | {"__main__"}


def copy_of_the_tree(tmp_path: Path) -> Path:
    for folder in ("agents", "envs"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter on the tree at ``root`` (PYTHONPATH makes it analyse that copy, not the installed one)."""
    env = {"PYTHONPATH": str(root), "PATH": str(LINT_IMPORTS.parent)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], capture_output=True, text=True, cwd=root, env=env, timeout=300
    )


def test_the_import_contracts_hold_on_this_tree(tmp_path):
    result = lint_imports(copy_of_the_tree(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "bad_import", "violation"),
    [
        ("agents/core/losses.py", "import agents.walkers.train", "agents.core is not allowed to import agents.walkers"),
        ("agents/core/kl.py", "import gymnasium", "agents.core is not allowed to import gymnasium"),
        (
            "agents/text/rollout.py",
            "import agents.walkers.rollout",
            "agents.text is not allowed to import agents.walkers",
        ),
        ("envs/mujoco.py", "import agents.core.kl", "envs is not allowed to import agents"),
    ],
)
def test_breaking_a_contract_fails_lint_imports(tmp_path, module, bad_import, violation):
    root = copy_of_the_tree(tmp_path)
    with open(root / module, "a", encoding="utf-8") as handle:
        handle.write(f"\n{bad_import}  # noqa: E402, F401\n")
    result = lint_imports(root)
    assert result.returncode != 0
    assert violation in result.stdout, result.stdout[-3000:]


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_every_registered_objective_is_a_subcommand_of_both_worlds(name):
    walker = parse_train_args([name])
    text = parse_train_args(["text", name])
    assert isinstance(text, TextTrainConfig)
    assert type(walker.objective) is type(text.objective) is OBJECTIVES[name]
    assert objective_label(walker.objective).startswith(name)


def test_compare_presets_come_from_the_registry():
    assert set(PRESET_ALIASES) <= set(OBJECTIVES)
    assert {preset.objective.name for preset in PRESETS.values()} == set(OBJECTIVES)
    assert all(PRESETS[label].objective == OBJECTIVES[alias]() for alias, label in PRESET_ALIASES.items())


def test_every_kl_controller_has_the_one_update_contract():
    for controller in (AdaptivePenalty, FixedPenalty, ProportionalKL):
        assert list(inspect.signature(controller.update).parameters) == ["self", "kl", "n"]
