"""Markdown tables of a drafter study (study.json -> study.md)."""

from __future__ import annotations

from flashdrive_ros.train.attention_budget import TOKEN_TYPES


def _row(cells: list) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(head: list[str], rows: list[list]) -> list[str]:
    return [_row(head), "|" + "---|" * len(head), *(_row(r) for r in rows)]


def engine_table(study: dict) -> list[str]:
    drafters = study["drafters"]
    rows = []
    for r in study.get("engine", []):
        d = drafters[r["drafter"]]
        rows.append([r["drafter"], d["kind"], d["rotary"], d["context_len"],
                     "streaming" if r["streaming"] else "full prefill", r["block_size"],
                     f"{r['accepted_length']:.3f}", f"{r['draft_ms']:.3f}",
                     f"{r['verify_ms']:.3f}", f"{r['cost_ratio']:.3f}", f"{r['speedup']:.3f}",
                     r["windows"], r["rounds"]])
    return _table(["drafter", "kind", "rotary", "context", "prefill", "block",
                   "accepted length L", "draft ms", "verify ms", "c", "L/(1+c)", "windows",
                   "rounds"], rows)


def offline_table(study: dict) -> list[str]:
    sizes = study["config"]["block_sizes"]
    rows = []
    for name, d in study["drafters"].items():
        train = d.get("training", {})
        rows.append([name, train.get("steps", "-"),
                     *(f"{d['offline'][str(k)]:.3f}" if str(k) in d.get("offline", {})
                       else "-" for k in sizes)])
    return _table(["drafter", "steps", *(f"offline acceptance @{k}" for k in sizes)], rows)


def budget_table(study: dict) -> list[str]:
    rows = [[name, *(f"{shares[t]:.3f}" for t in (*TOKEN_TYPES, "block"))]
            for name, shares in study.get("attention_budget", {}).items()]
    return _table(["drafter", *TOKEN_TYPES, "block"], rows)


def rl_table(study: dict) -> list[str]:
    keys = ("updates", "mean_reward", "mean_traj_err_m2", "mean_match", "mean_kl",
            "mean_stochastic", "mean_anchors")
    rows = [[name, *(f"{r.get(k, float('nan')):.4g}" for k in keys)]
            for name, r in study.get("rl", {}).items()]
    return _table(["run", *keys], rows)


def markdown(study: dict) -> str:
    lines = [f"Drafter study: target {study['model_dir']}, device {study['device']}, "
             f"{study.get('seconds', 0):.0f} s.", "", "In-engine, held-out drives "
             f"{study.get('eval_seeds')}:", "", *engine_table(study), "",
             f"Same CoC for every drafter of a prefill mode: {study.get('same_cocs')}", "",
             "Offline (held-out corpus blocks):", "", *offline_table(study), "",
             "First-layer attention budget (block queries):", "", *budget_table(study), "",
             f"RL on {study.get('rl_base')}:", "", *rl_table(study), ""]
    errors = [e["stage"] for e in study.get("errors", [])]
    if errors:
        lines += [f"Failed stages (tracebacks in study.json): {', '.join(errors)}", ""]
    return "\n".join(lines)
