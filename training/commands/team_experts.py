"""``iabma train --experts experts.toml``: a team's own models as the experts.

The options that name them, and the expert list they give: the file's pre-fitted experts,
followed by the default experts only when ``--with-default-experts`` asks for them.
Without ``--experts`` the command trains the defaults exactly as before.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_expert_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("a team's own, already trained models")
    g.add_argument(
        "--experts",
        type=Path,
        default=None,
        metavar="TOML",
        help="experts.toml naming the models to combine, each used as trained (not refit); "
        "its [[experts]] tables have name, source, and optionally features, "
        "variance_output, classes",
    )
    g.add_argument(
        "--with-default-experts",
        action="store_true",
        help="with --experts: also train the default experts",
    )
    g.add_argument(
        "--trust-pickle",
        action="store_true",
        help="with --experts: allow joblib/pickle files and skops types skops does not "
        "trust by default (a pickle runs code when it loads: only for files you trust)",
    )
    g.add_argument(
        "--mlflow-log",
        action="store_true",
        help="log the bundle, its manifest and its metrics as an MLflow run at "
        "$MLFLOW_TRACKING_URI (needs the registry extra)",
    )


def check_expert_arguments(args: argparse.Namespace) -> None:
    """Options that need another, and MLflow when it will be needed; before any reading."""
    from training.errors import ParameterError

    if args.experts is None:
        for flag, on in (
            ("--with-default-experts", args.with_default_experts),
            ("--trust-pickle", args.trust_pickle),
        ):
            if on:
                raise ParameterError(flag, True, "applies only with --experts")
    if args.mlflow_log:
        try:
            import mlflow  # noqa: F401
        except ImportError:
            raise ParameterError(
                "--mlflow-log", True, "needs MLflow: pip install 'iabma[registry]'"
            ) from None


def choose_experts(args: argparse.Namespace, task: str, defaults: list[Any]) -> list[Any]:
    """The experts ``iabma train`` fits: the defaults, or the file's (and the defaults)."""
    from training.errors import ParameterError
    from training.experts.experts_toml import read_experts_toml

    if args.experts is None:
        return defaults
    team = list(read_experts_toml(args.experts, task=task, trust_pickle=args.trust_pickle))
    if not args.with_default_experts:
        return team
    taken = {e.name for e in team} & {e.name for e in defaults}
    if taken:
        raise ParameterError(
            "--experts",
            str(args.experts),
            f"names {sorted(taken)} like default experts; rename them, or drop "
            "--with-default-experts",
        )
    return team + defaults
