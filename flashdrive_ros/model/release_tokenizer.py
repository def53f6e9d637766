"""The tokenizer of a model directory, this package's or a release's.

A release ships the backbone's tokenizer.json (+ tokenizer_config.json with its
`added_tokens_decoder`), in the model directory or in the backbone directory that
`vlm_name_or_path` names. Trajectory tokens `<i0>`.. and the Alpamayo specials are added the
way the release code extends the backbone tokenizer when the files lack them; every token id
config.json states is then checked against the tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer

from flashdrive_ros.model.release_config import ReleaseConfig, read_release
from flashdrive_ros.model.tokenizer import (
    ALPAMAYO_SPECIAL_NAMES,
    TextTokenizer,
    TokenizerError,
    special,
    traj_token,
)

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
TRAJ_TOKEN_NAMES = {"history": "traj_history", "future": "traj_future",
                    "history_start": "traj_history_start", "future_start": "traj_future_start",
                    "history_end": "traj_history_end", "future_end": "traj_future_end"}
VISION_TOKEN_IDS = {"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
                    "vision_start_token_id": "<|vision_start|>",
                    "vision_end_token_id": "<|vision_end|>"}
RESERVED_IN_1_5 = ("image_pre_tkn", "traj_history_pre_tkn", "meta_action_start",
                   "meta_action_end", "traj_future_pre_tkn", "vectorized_wm",
                   "vectorized_wm_start", "vectorized_wm_end", "vectorized_wm_pre_tkn")


def release_special_names(variant: str) -> tuple[str, ...]:
    """The special-token names the release adds, in order (Alpamayo 1.5 renames its unused
    slots `_padding_i`, so every other special keeps its id)."""
    if variant == "alpamayo_r1":
        return ALPAMAYO_SPECIAL_NAMES
    return tuple(f"_padding_{RESERVED_IN_1_5.index(n)}" if n in RESERVED_IN_1_5 else n
                 for n in ALPAMAYO_SPECIAL_NAMES)


def load_tokenizer(model_dir: str | Path) -> TextTokenizer:
    """`model_dir/tokenizer.json` for this package's directories; for a release directory its
    (or its backbone's) tokenizer files, extended and checked as config.json says."""
    model_dir = Path(model_dir)
    release = read_release(model_dir)
    if release is None:
        return TextTokenizer.from_file(model_dir / TOKENIZER_FILE)
    folders = [d for d in (model_dir, release.vlm_dir) if d is not None]
    folder = next((d for d in folders if (d / TOKENIZER_FILE).is_file()), None)
    if folder is None:
        raise TokenizerError(f"no {TOKENIZER_FILE} in {' or '.join(map(str, folders))}: a "
                             f"release directory needs the backbone's tokenizer files")
    tok = _read(folder / TOKENIZER_FILE)
    _add_declared(tok, folder / TOKENIZER_CONFIG_FILE)
    raw = release.raw
    if tok.token_to_id(traj_token(0)) is None:
        count = raw.get("traj_vocab_size")
        if not isinstance(count, int) or count <= 0:
            raise TokenizerError("the tokenizer has no trajectory tokens and config.json no "
                                 "traj_vocab_size to add them")
        extend_like_release(tok, count, bool(raw.get("add_special_tokens", False)),
                            release.variant)
    _check_ids(tok, release)
    return TextTokenizer(tok)


def extend_like_release(tok: Tokenizer, traj_vocab_size: int, add_special_tokens: bool,
                        variant: str) -> None:
    """Append `<i0>`..`<i{n-1}>` as plain tokens, then the release's special tokens (all of
    them with add_special_tokens, else only the six trajectory markers); tokens already in
    the vocabulary keep their ids."""
    tok.add_tokens([AddedToken(traj_token(i), normalized=True)
                    for i in range(traj_vocab_size)])
    names = (release_special_names(variant) if add_special_tokens
             else tuple(TRAJ_TOKEN_NAMES.values()))
    tok.add_special_tokens([AddedToken(special(n), special=True, normalized=False)
                            for n in names if tok.token_to_id(special(n)) is None])


def _read(path: Path) -> Tokenizer:
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:
        raise TokenizerError(f"tokenizer file {path} is not a valid tokenizer.json: "
                             f"{type(exc).__name__}: {exc}") from None


def _add_declared(tok: Tokenizer, path: Path) -> None:
    """Add the `added_tokens_decoder` entries of tokenizer_config.json that tokenizer.json
    lacks, at the ids it declares."""
    if not path.is_file():
        return
    try:
        declared = json.loads(path.read_text()).get("added_tokens_decoder") or {}
        entries = sorted((int(i), e["content"], bool(e.get("special", False)))
                         for i, e in declared.items())
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, KeyError, TypeError,
            ValueError) as exc:
        raise TokenizerError(f"{path}: unreadable added_tokens_decoder ({exc})") from None
    for idx, content, is_special in entries:
        have = tok.token_to_id(content)
        if have is None:
            added = AddedToken(content, special=is_special, normalized=not is_special)
            (tok.add_special_tokens if is_special else tok.add_tokens)([added])
            have = tok.token_to_id(content)
        if have != idx:
            raise TokenizerError(f"{path}: {content!r} declared as id {idx}, the tokenizer "
                                 f"gives it id {have}")


def _check_ids(tok: Tokenizer, release: ReleaseConfig) -> None:
    raw, vlm = release.raw, release.vlm or {}
    stated: dict[str, tuple[str, int]] = {}
    if "traj_token_start_idx" in raw:
        stated["traj_token_start_idx"] = (traj_token(0), raw["traj_token_start_idx"])
    for key, name in TRAJ_TOKEN_NAMES.items():
        if key in (raw.get("traj_token_ids") or {}):
            stated[f"traj_token_ids.{key}"] = (special(name), raw["traj_token_ids"][key])
    for key, token in VISION_TOKEN_IDS.items():
        if key in raw or key in vlm:
            stated[key] = (token, raw.get(key, vlm.get(key)))
    problems = [f"{key} = {want} in config.json, the tokenizer gives {token!r} id "
                f"{tok.token_to_id(token)}"
                for key, (token, want) in stated.items() if tok.token_to_id(token) != want]
    count = raw.get("traj_vocab_size")
    start = tok.token_to_id(traj_token(0))
    if isinstance(count, int) and start is not None and (
            tok.token_to_id(traj_token(count - 1)) != start + count - 1
            or tok.token_to_id(traj_token(count)) is not None):
        problems.append(f"traj_vocab_size = {count} in config.json, the tokenizer's <iN> "
                        f"tokens are not {count} consecutive ids from {start}")
    vocab = raw.get("vocab_size", (vlm.get("text_config") or {}).get("vocab_size"))
    size = tok.get_vocab_size(with_added_tokens=True)
    if isinstance(vocab, int) and size > vocab:
        problems.append(f"the tokenizer has {size} tokens, the model's vocab_size is {vocab}")
    if problems:
        raise TokenizerError("release tokenizer does not match config.json:\n"
                             + "\n".join(f"  - {p}" for p in problems))
