"""Label rules: the wording is set by what the model sees (the ego's speed band), creeping
towards a red line or a crossing pedestrian is a stop, waiting is at the line, a slower lead
is followed, and with standing_lead a lead that stands is a stop."""

from dataclasses import replace

from flashdrive_ros.sim.drive import simulate
from flashdrive_ros.sim.expert import ExpertInfo
from flashdrive_ros.sim.labels import (
    STANDING_LEAD_MPS,
    WORDING_SPEED_BANDS,
    label_drive,
    label_frame,
)

FREE = ExpertInfo(t=10.0, route_s=100.0, route_d=-1.75, front_s=104.0, v=10.0, v_des=12.0,
                  accel=0.0, reason="free", nudge_now=0.0, nudge_ahead=0.0, light_state=None,
                  light_gap=None, light_green_at=None, lead_speed=None,
                  ped_gap=None, heading_change_ahead=0.0, curvature_ahead=0.0,
                  oncoming_near=False)


def _label(**fields):
    return label_frame([replace(FREE, **fields)], 0)


def test_a_braking_lead_is_a_slow_down_and_a_slower_one_is_followed():
    slow = _label(reason="lead", lead_speed=6.0, accel=-2.0)
    follow = _label(reason="lead", lead_speed=6.0, accel=-0.5)
    assert slow.decision == "slow" and follow.decision == "follow"
    assert "follow_lead" in slow.tags and "follow_lead" in follow.tags


def test_only_a_lead_with_brake_lights_lit_is_said_to_slow_down():
    for v in (3.0, 6.0, 11.0):
        lit = _label(reason="lead", lead_speed=2.0, accel=-2.0, v=v, lead_brake_lights=True)
        dark = _label(reason="lead", lead_speed=2.0, accel=-2.0, v=v)
        assert lit.decision == dark.decision == "slow"
        assert any(word in lit.coc for word in ("braking", "slows down", "slowing"))
        assert not any(word in dark.coc for word in ("braking", "slows down", "slowing"))
        assert "slower" in dark.coc and lit.tags == dark.tags


def test_a_standing_lead_is_a_stop_only_with_standing_lead_labels():
    fields = {"reason": "lead", "accel": -0.5}
    for v in (0.0, 5.0):
        standing = replace(FREE, v=v, lead_speed=0.1, **fields)
        assert label_frame([standing], 0).decision == "follow"
        label = label_frame([standing], 0, standing_lead=True)
        assert label.decision == "stop" and " behind the " in label.coc
        assert "follow_lead" in label.tags
    moving = replace(FREE, lead_speed=STANDING_LEAD_MPS + 0.1, **fields)
    assert label_frame([moving], 0, standing_lead=True).decision == "follow"
    other = replace(FREE, reason="vehicle", lead_speed=None, accel=-0.5)
    assert label_frame([other], 0, standing_lead=True).decision == "follow"
    infos = [replace(FREE, lead_speed=0.1, **fields), FREE]
    assert [x.decision for x in label_drive(infos, standing_lead=True)] == ["stop", "keep_lane"]


def test_the_wording_follows_the_speed_band_and_nothing_else():
    for key_fields in ({}, {"reason": "lead", "lead_speed": 2.0}):
        by_band = {}
        for v in (1.0, 2.0, 3.9, 4.1, 6.0, 8.9, 9.1, 11.0, 14.0):
            band = sum(v >= edge for edge in WORDING_SPEED_BANDS)
            texts = {_label(v=v, t=t, **key_fields).coc for t in (1.0, 7.3, 40.0)}
            assert len(texts) == 1, "the wording changes with time at one speed"
            by_band.setdefault(band, set()).update(texts)
        assert all(len(texts) == 1 for texts in by_band.values())
        assert len(set.union(*by_band.values())) == len(WORDING_SPEED_BANDS) + 1


def test_creeping_towards_a_red_line_or_a_crossing_pedestrian_is_a_stop():
    red = _label(v=1.5, light_state="red", light_gap=12.0)
    ped = _label(v=1.5, ped_gap=9.0)
    fast_red = _label(v=10.0, light_state="red", light_gap=80.0)
    past = _label(v=1.5, light_state="red", light_gap=-1.5)
    assert red.decision == "stop" and "red_light_stop" in red.tags
    assert ped.decision == "stop" and "pedestrian_yield" in ped.tags
    assert fast_red.decision == "keep_lane" and past.decision == "keep_lane"


def test_standing_at_the_red_line_is_a_wait_and_standing_short_of_it_a_move_up_to_it():
    at_line = _label(v=0.0, reason="red_light", light_state="red", light_gap=1.5)
    short = _label(v=0.0, reason="red_light", light_state="red", light_gap=20.0)
    assert at_line.coc.startswith("Stop and stay at the stop line")
    assert short.coc.startswith("Stop smoothly at the line")
    assert at_line.decision == short.decision == "stop"


def test_a_standing_ego_that_starts_names_no_obstacle_as_its_reason():
    log = simulate(4242, 30.0, blocks=("red_light", "red_light"))
    starting = [info for info in log.infos
                if info.v < 0.5 and info.accel > 0.3 and info.t > 1.0]
    held = [info for info in log.infos if info.v < 0.1 and info.light_state == "red"]
    assert starting and held
    assert all(info.reason in ("free", "curve") for info in starting), \
        {info.reason for info in starting}
    assert all(info.reason == "red_light" for info in held)
