"""A run's metrics: metrics.jsonl (one JSON object per iteration), samples.jsonl and TensorBoard events."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from torch.utils.tensorboard import SummaryWriter

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"


class RunLogger:
    """Writes each iteration's metrics to ``metrics.jsonl`` and TensorBoard, under ``run_dir``.

    Resuming at ``resume_after_iteration`` drops the lines a killed run wrote after its last
    checkpoint, so the file reads as if the run had never stopped. A logger that is not ``enabled``
    (every process of a multi-process run but the first) writes nothing.
    """

    def __init__(
        self,
        run_dir: Path,
        resume_after_iteration: int | None = None,
        resume_step: int | None = None,
        enabled: bool = True,
    ) -> None:
        self.run_dir = run_dir
        self.enabled = enabled
        if not enabled:
            return
        self.metrics_path = run_dir / METRICS_FILE
        if resume_after_iteration is not None:
            self._truncate_metrics(resume_after_iteration)
        purge_step = None if resume_step is None else resume_step + 1
        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge_step)
        self.metrics_file = open(self.metrics_path, "a", encoding="utf-8")

    def _truncate_metrics(self, last_iteration: int) -> None:
        for path in (self.metrics_path, self.run_dir / SAMPLES_FILE):
            if path.exists():
                kept = [record for record in read_jsonl(path) if record["iteration"] <= last_iteration]
                path.write_text("".join(json.dumps(record) + "\n" for record in kept), encoding="utf-8")

    def log(self, metrics: dict[str, float | int]) -> None:
        """One iteration: ``metrics`` must hold ``iteration`` and ``global_step``; NaN is written as null."""
        if not self.enabled:
            return
        step = int(metrics["global_step"])
        for name, value in metrics.items():
            if name not in ("iteration", "global_step") and value is not None and math.isfinite(value):
                self.writer.add_scalar(name, value, step)
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
        self.metrics_file.write(json.dumps(clean) + "\n")
        self.metrics_file.flush()

    def log_samples(self, iteration: int, global_step: int, rows: list[dict]) -> None:
        """Sample completions of one iteration: a line of ``samples.jsonl`` and a markdown table in TensorBoard's
        text tab.
        """
        if not self.enabled:
            return
        with open(self.run_dir / SAMPLES_FILE, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"iteration": iteration, "global_step": global_step, "samples": rows}) + "\n")
        columns = list(rows[0]) if rows else []
        self.writer.add_text(
            "samples", markdown_table(columns, [[markdown_cell(row[c]) for c in columns] for row in rows]), global_step
        )

    def close(self) -> None:
        if not self.enabled:
            return
        self.metrics_file.close()
        self.writer.close()


def markdown_cell(value) -> str:
    """One table cell: floats rounded, pipes escaped, newlines flattened."""
    return str(round(value, 3) if isinstance(value, float) else value).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table of cells already made safe (``markdown_cell``)."""
    return "\n".join(
        [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}", *(f"| {' | '.join(row)} |" for row in rows)]
    )


def read_jsonl(path: Path) -> list[dict]:
    """The JSON lines of ``path`` up to the first unreadable one (a line cut by a kill); [] if there is no file."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records
