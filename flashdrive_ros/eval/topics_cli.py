"""`flashdrive-topics BAG [--out FILE] [--model-dir DIR]`: list a bag's topics (type, count,
rate) and propose the topics YAML that maps them to the model's inputs for flashdrive-replay."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flashdrive_ros.eval.bag import open_reader, topic_infos, unread_topic_notes
from flashdrive_ros.eval.bag_source import bag_source
from flashdrive_ros.eval.errors import ReplayError
from flashdrive_ros.eval.topic_proposal import ProposalError, proposal_yaml, propose
from flashdrive_ros.model.config import PromptConfig


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashdrive-topics", description=__doc__.split(":")[1])
    p.add_argument("bag", help="rosbag2 directory (mcap or sqlite3), or one .mcap / .db3 file "
                   "of a recording that was never closed")
    p.add_argument("--out", help="write the proposed topics YAML here")
    p.add_argument("--model-dir", default=None,
                   help="take the camera slots from this model (default: the embedded model)")
    return p


def camera_slots(model_dir: str | None) -> tuple[str, ...]:
    if model_dir is None:
        return PromptConfig().camera_names
    from flashdrive_ros.eval.replay_options import load_model_config

    return load_model_config(Path(model_dir)).prompt.camera_names


def topic_table(infos, seconds: float) -> str:
    rows = [("topic", "type", "messages", "rate (Hz)")]
    rows += [(i.topic, i.msgtype, str(i.count),
              f"{i.count / seconds:.1f}" if seconds > 0 else "-") for i in infos]
    widths = [max(len(r[k]) for r in rows) for k in range(4)]
    return "\n".join("  ".join(c.rjust(w) if k >= 2 else c.ljust(w)
                               for k, (c, w) in enumerate(zip(r, widths))) for r in rows)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        with bag_source(args.bag) as source:
            reader = open_reader(source)
            try:
                infos = topic_infos(reader)
                seconds = (reader.end_time - reader.start_time) * 1e-9
                unreadable = dict(reader.unreadable)
            finally:
                reader.close()
            notes = source.all_notes() + unread_topic_notes(unreadable)
        path = source.path
        slots = camera_slots(args.model_dir)
    except ReplayError as exc:
        print(f"flashdrive-topics: error: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        print(note)
    print(f"{path}: {len(infos)} topics over {seconds:.1f} s")
    print(topic_table(infos, seconds))
    try:
        proposal = propose([i for i in infos if i.topic not in unreadable], slots)
    except ProposalError as exc:
        print(f"flashdrive-topics: no proposal: {exc}", file=sys.stderr)
        return 1
    text = proposal_yaml(proposal, str(path))
    print()
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}; use it with flashdrive-replay {path} --topics-yaml "
              f"{args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
