"""Markdown tables of a bench.json dict."""

from __future__ import annotations

from flashdrive_ros.engine.types import STAGES


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def heading(bench: dict) -> str:
    m, s = bench["machine"], bench["settings"]
    gpu = m["gpu"]["name"] if m.get("gpu") else f"CPU ({m['processor']})"
    model = bench.get("model", {})
    prompt = next((run["work"]["prompt_length"] for v in bench["variants"].values()
                   for run in v.get("samples", {}).values()), None)
    state = "" if bench.get("complete") else " (partial: the run stopped early)"
    return (f"## flashdrive-bench: {s['shape']} on {gpu}{state}\n\n"
            f"{m['date']}, torch {m['torch']}, transformers {m['transformers']}, "
            f"{bench['dtype']}; prompt {prompt} tokens, {model.get('images_per_window')} "
            f"images, {s['coc_tokens']} CoC tokens (forced), {s['windows']} windows after "
            f"{s['warmup']} warm-up.\n`{bench['command']}`")


def floors_table(bench: dict) -> str:
    f = bench["floors"]
    return table(["copy bandwidth (GB/s, read+write)", "matmul rate (TFLOP/s)", "matmul"],
                 [[fmt(f["copy_bytes_per_s"] / 1e9), fmt(f["matmul_flops_per_s"] / 1e12, 2),
                   f"{f['matmul_n']}^3 {f['matmul_dtype']}"]])


def latency_table(bench: dict, count: str) -> str:
    ups = bench.get("speedups", {})
    rows = []
    for name, variant in bench["variants"].items():
        run = variant.get("samples", {}).get(count)
        if run is None:
            continue
        cells = [f"{fmt(run['stages'][s]['p50'])} / {fmt(run['stages'][s]['p90'])}"
                 for s in STAGES]
        ref = ups.get("vs_reference", {}).get(name, {}).get(count, {}).get("total")
        base = ups.get("vs_baseline", {}).get(name, {}).get(count, {}).get("total")
        rows.append([name, *cells, fmt(ref, 2), fmt(base, 2)])
    return (f"### Latency, ms p50 / p90, {count} sample(s)\n\n"
            + table(["variant", *STAGES, "x vs reference", "x vs baseline"], rows))


def floor_table(bench: dict, count: str) -> str:
    rows = []
    for name, variant in bench["variants"].items():
        run = variant.get("samples", {}).get(count)
        if run is None:
            continue
        cells = []
        for stage in STAGES:
            floor = run["floors"][stage]
            bound = f" ({floor['bound'][:3]})" if "bound" in floor else ""
            cells.append(f"{fmt(floor['floor_ms'], 2)}{bound} x{fmt(run['over_floor'][stage])}")
        rows.append([name, *cells])
    return (f"### Floor ms (bound) and p50 / floor, {count} sample(s)\n\n"
            + table(["variant", *STAGES], rows))


def decode_table(bench: dict) -> str:
    rows = []
    for name, d in bench.get("decode", {}).items():
        for implied in d["implied"]:
            rows.append([name, d["autoregressive_variant"], fmt(d["per_token_ms"], 2),
                         fmt(d["per_round_ms"], 2), fmt(d["rounds_measured"]),
                         f"{fmt(implied['accepted_length'], 2)}: {implied['label']}",
                         fmt(implied["decode_ms"]), fmt(implied["total_ms"])])
    return ("### Decode: cost per autoregressive token and per speculative round (draft + "
            "verify); implied decode at an accepted length\n\n"
            + table(["variant", "AR variant", "ms / AR token", "ms / round",
                     "rounds (random weights)", "accepted length", "implied decode ms",
                     "implied total ms"], rows))


def measured_table(bench: dict) -> str:
    rows = []
    for name, per_count in bench.get("measured_acceptance", {}).items():
        for count, m in per_count.items():
            rows.append([name, count, str(m["block_size"]), fmt(m["target_accepted_length"], 2),
                         fmt(m["measured_accepted_length"], 2),
                         f"{fmt(m['rounds_mean'])} ({m['pattern_rounds']})",
                         fmt(m["same_coc_as_recorded"], 2), fmt(m["decode_ms"]),
                         fmt(m["total_ms"])])
    return ("### Decode measured at an accepted length (rounds of a trained drafter; "
            "ms p50)\n\n"
            + table(["variant", "samples", "block", "pattern L", "measured L (last round cut "
                     "by the CoC end)", "rounds (pattern)", "same CoC as recorded",
                     "decode", "total"], rows))


def thor_table(bench: dict, count: str) -> str:
    thor = bench.get("thor")
    if not thor:
        return ""
    rows = []
    for name, variant in bench["variants"].items():
        run = variant.get("samples", {}).get(count)
        if run is None or "thor_projected_ms" not in run:
            continue
        rows.append([name, *(fmt(run["thor_projected_ms"][s]) for s in STAGES)])
    f = thor["floors"]
    return (f"### Jetson AGX Thor projection, ms, {count} sample(s) (not measured)\n\n"
            f"Rates used: {fmt(f['copy_bytes_per_s'] / 1e9)} GB/s, "
            f"{fmt(f['matmul_flops_per_s'] / 1e12)} TFLOP/s ({thor['sources']['thor']}; "
            f"scaled by this run's measured / nominal rates where the run is on an H200: "
            f"{thor['sources']['h200']}).\n\n" + table(["variant", *STAGES], rows))


def errors(bench: dict) -> str:
    lines = [f"- {name}: {v['error']}" for name, v in bench["variants"].items()
             if "error" in v]
    lines += [f"- {name}: skipped ({why})" for name, why in bench.get("skipped", {}).items()]
    return "\n".join(lines)


def markdown(bench: dict) -> str:
    parts = [heading(bench), floors_table(bench)]
    for count in bench["settings"]["samples"]:
        parts.append(latency_table(bench, str(count)))
    for count in bench["settings"]["samples"]:
        parts.append(floor_table(bench, str(count)))
    parts.append(decode_table(bench))
    parts.append(measured_table(bench))
    parts.append(thor_table(bench, str(bench["settings"]["samples"][0])))
    problems = errors(bench)
    if problems:
        parts.append("### Not measured\n\n" + problems)
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Prints the tables of a (possibly partial) bench.json: report.py PATH."""
    import json
    import sys
    from pathlib import Path

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m flashdrive_ros.bench.report OUTDIR/bench.json", file=sys.stderr)
        return 2
    print(markdown(json.loads(Path(args[0]).read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
