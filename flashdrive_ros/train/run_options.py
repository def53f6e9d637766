"""Command-line options that every training entry point shares: where the run goes, its time
budget, device, seed and data workers."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch


def add_run_options(parser: argparse.ArgumentParser, minutes_budget: float) -> None:
    """--out, --minutes-budget (default `minutes_budget`), --device, --seed, --workers."""
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--minutes-budget", type=float, default=minutes_budget)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None)


def add_on_off(parser: argparse.ArgumentParser, flag: str, default: bool, help_text: str) -> None:
    """An on|off option that reads as True, False or None (not given); help names the default."""
    parser.add_argument(flag, choices=("on", "off"), default=None,
                        help=f"{help_text} (default {'on' if default else 'off'})")


def on_off(value: str | None) -> bool | None:
    return None if value is None else value == "on"
