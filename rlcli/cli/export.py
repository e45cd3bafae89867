"""``rlcli export``: the deterministic policy as one ONNX or TorchScript file, checked against PyTorch."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from rlcli.cli.app import app
from rlcli.cli.options import Best, Run
from rlcli.share.names import resolve_run


class ExportFormat(str, Enum):
    onnx = "onnx"
    torchscript = "torchscript"


@app.command("export", help="Export a policy with its observation normalisation and action mapping, "
                            "checked on real observations. Example: rlcli export RUN --format onnx")
def export_command(
    run: Run,
    fmt: Annotated[ExportFormat, typer.Option("--format", "-f", help="File format.")] = ExportFormat.onnx,
    out: Annotated[Optional[str], typer.Option(
        "--out", "-o", help="Policy file, or a folder for it (an existing one, or a path ending in /) \\[default: "
                            "RUN/export/policy.onnx or .pt; ./export/NAME/... for a run in the Hub's cache or one "
                            "that cannot be written]; its spec is FILE.json.", show_default=False)] = None,
    best: Best = False,
    check_batch: Annotated[int, typer.Option(
        "--check-batch", min=1, help="Observations on which the file is checked against PyTorch.")] = 64,
) -> None:
    import torch

    from rlcli.share.export import export_policy

    torch.set_num_threads(1)
    report = export_policy(resolve_run(run), fmt.value, out, best=best, check_batch=check_batch)
    ties = f", {report.near_ties} near-ties" if report.near_ties else ""
    sequences = (f" in sequence ({report.sequences[0]} rows x {report.sequences[1]} steps from a reset, each "
                 "side carrying its own state)" if report.sequences else "")
    diff = float(f"{report.max_abs_diff:.3g}")
    typer.echo(f"Exported {report.algo} {report.env_id} policy -> {report.path} (+ {report.spec_path.name}); "
               f"checked {report.n_checked} observations{sequences}: max |Δaction| = {diff} "
               f"(tolerance {report.tolerance}){ties}")
