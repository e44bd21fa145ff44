"""The GPU check on a machine without a package index (issue #31): wheels install from a folder with the index
unreachable, the SmolLM2-shaped random model is SmolLM2-135M's architecture, and the check's table reports every
part, failed or skipped ones included."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from benchmarks.probes import gpu_check
from envs.text import models

ROOT = Path(__file__).resolve().parents[1]
INSTALLER = ROOT / "benchmarks" / "probes" / "gpu_offline_install.sh"
NO_INDEX = {"PIP_NO_INDEX": "1", "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_FIND_LINKS": ""}
"""pip with no index: port 9 (discard) on the loopback answers nothing, so any download would fail."""


def make_wheel(folder: Path, name: str, version: str, source: str) -> Path:
    """A one-module pure-Python wheel ``name`` whose module body is ``source``, written by hand (no build, no
    network)."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": source,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{dist_info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{dist_info}/RECORD"])
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def install(wheelhouse: Path, target: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, **NO_INDEX, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(INSTALLER), str(wheelhouse), str(target)], capture_output=True, text=True,
                          env=environment, timeout=120)  # fmt: skip


def test_the_offline_installer_installs_a_folder_of_wheels_with_the_index_unreachable(tmp_path):
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    make_wheel(wheelhouse, "offline_probe_one", "1.0", "ANSWER = 42\n")
    make_wheel(wheelhouse, "offline_probe_two", "2.0", "from offline_probe_one import ANSWER\nDOUBLE = 2 * ANSWER\n")
    done = install(wheelhouse, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert f"installed 2 wheels from {wheelhouse}" in done.stdout
    probe = "import offline_probe_two, importlib.metadata as m; print(offline_probe_two.DOUBLE, offline_probe_two.__file__, m.version('offline_probe_two'))"  # noqa: E501
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(tmp_path / "site")})  # fmt: skip
    answer, path, version = imported.stdout.split()
    assert (answer, version) == ("84", "2.0"), imported.stderr
    assert Path(path).parent == tmp_path / "site"


def test_the_offline_installer_says_what_to_do_with_a_folder_without_wheels(tmp_path):
    done = install(tmp_path, tmp_path / "site")
    assert done.returncode == 1
    assert (
        done.stderr.strip() == f"{tmp_path} holds no .whl file; make it with: bash benchmarks/probes/gpu_wheelhouse.sh"
    )


@pytest.mark.slow  # 31 s on 2 shared cores: dequantising the GGUF and initialising 135M random weights
def test_the_random_smollm2_model_has_smollm2s_architecture_and_parameters():
    """Against the real GGUF: every tensor's name and shape, the total count, the config."""
    real = models.load_causal_lm(models.DEFAULT_MODEL).model
    random = models.build_smollm2_random_model()
    real_shapes = {name: tuple(tensor.shape) for name, tensor in real.state_dict().items()}
    random_shapes = {name: tuple(tensor.shape) for name, tensor in random.state_dict().items()}
    assert random_shapes == real_shapes
    assert sum(p.numel() for p in random.parameters()) == sum(p.numel() for p in real.parameters()) == 134_515_008
    real_config = real.config.to_dict()
    assert {key: real_config[key] for key in models.SMOLLM2_CONFIG} == models.SMOLLM2_CONFIG
    assert type(random) is type(real)
    assert not torch.equal(random.model.embed_tokens.weight, real.model.embed_tokens.weight)


def test_the_random_smollm2_model_reads_smollm2s_tokenizer_from_a_folder(tmp_path):
    folder = models.save_smollm2_tokenizer(tmp_path / "tokenizer")
    loaded = models.load_tokenizer(f"{models.SMOLLM2_RANDOM_MODEL}:{folder}")
    real = models.load_tokenizer(models.DEFAULT_MODEL)
    assert len(loaded) == len(real) == models.SMOLLM2_CONFIG["vocab_size"]
    text = "What is 17 + 15? Answer: 32"
    assert loaded(text)["input_ids"] == real(text)["input_ids"]
    assert loaded.decode(range(49_100, 49_152)) == real.decode(range(49_100, 49_152))
    assert loaded.eos_token_id == models.SMOLLM2_CONFIG["eos_token_id"]


def test_the_random_smollm2_model_names_a_missing_tokenizer_folder_in_one_line(tmp_path):
    with pytest.raises(models.ModelLoadError, match=f"^{tmp_path} holds no tokenizer.json; write one with"):
        models.load_causal_lm(f"{models.SMOLLM2_RANDOM_MODEL}:{tmp_path}")


def test_without_cuda_the_check_still_tables_every_part(tmp_path, monkeypatch):
    ran = []

    def child(command, timeout):
        ran.append(command)
        return gpu_check.Finished(0, "3 skipped in 1.00s", 1.0)

    monkeypatch.setattr(gpu_check, "run", child)
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: False)
    rows = dict(gpu_check.check(tmp_path, gpu_check.Budget(60), tmp_path / "tokenizer"))
    assert [command[-1] for command in ran] == ["tests/test_cuda.py"]
    assert rows["tests marked cuda"] == "ok: 3 skipped in 1.00s (1 s)"
    assert rows["device"] == "no CUDA device: torch sees none"
    skipped = [name for name, result in rows.items() if result == gpu_check.NO_CUDA]
    assert len(skipped) == 6 and "SmolLM2-135M text (arithmetic), bf16" in skipped
    assert rows["model"].startswith(("GGUF ", f"smollm2-random:{tmp_path / 'tokenizer'}"))


def test_a_failed_part_is_one_row_and_a_spent_budget_skips_the_rest():
    def broken():
        raise RuntimeError("CUDA out of memory.\nTried to allocate 2.00 GiB")

    assert gpu_check.row("text", broken) == ("text", "failed: RuntimeError: CUDA out of memory.")
    spent = gpu_check.Budget(0)
    assert gpu_check.row("Hopper", spent.limit) == ("Hopper", "skipped: the 7.5-minute budget is spent")
    table = gpu_check.table([("device", "none"), ("text", "failed: x")])
    assert table.splitlines()[0].startswith("| check") and table.splitlines()[-1] == "| text   | failed: x |"
