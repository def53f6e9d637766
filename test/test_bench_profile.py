import pytest

from flashdrive_ros.bench.profile import main, parse_args


def test_profile_prints_stages_and_kernels_per_variant(capsys):
    assert main(["--shape", "tiny", "--windows", "1", "--warmup", "0", "--coc-tokens", "2",
                 "--top", "3", "--rotated-keys", "on,off"]) == 0
    out = capsys.readouterr().out
    assert out.count("tiny flashdrive stage all cuda_graphs=False") == 2
    assert "rotated_keys=True" in out and "rotated_keys=False" in out
    for stage in ("encode", "prefill", "decode", "action"):
        assert f"stage:{stage}" in out
    assert "Self CPU time total" in out


def test_action_stage_profiles_only_the_action_expert(capsys):
    assert main(["--shape", "tiny", "--windows", "2", "--warmup", "0", "--coc-tokens", "2",
                 "--top", "3", "--stage", "action"]) == 0
    out = capsys.readouterr().out
    assert "tiny flashdrive stage action cuda_graphs=False" in out
    stages = {line.split()[0] for line in out.splitlines() if line.strip().startswith("stage:")}
    assert stages == {"stage:action"}


def test_switch_values_are_checked():
    assert parse_args(["--graphs", "on,off"]).graphs == ["on", "off"]
    with pytest.raises(SystemExit):
        parse_args(["--graphs", "maybe"])
