import pytest

from flashdrive_ros.closed_loop.light_waits import WAIT_RANGE_M, light_waits, summed_light_waits

STAY = "Stop and stay at the stop line because the traffic light is still red"
GO = "Keep going again because the red light changed to green and the way is clear"


def row(light, coc, gap=5.0, speed=0.0):
    return {"stop_line_ahead_m": gap, "light": light, "coc": coc, "ego_speed_mps": speed}


def test_plans_standing_before_a_line_count_by_light_and_decision():
    trace = [row("red", STAY, 6.8), row("red", GO, 6.6), row("yellow", GO, 4.0),
             row("green", STAY, 7.2), row("green", STAY, 7.2), row("green", GO, 7.1),
             row("red", GO, 6.0, speed=2.5),
             row("red", GO, -1.0), row("red", GO, WAIT_RANGE_M + 1.0),
             row("red", GO, ""), row("", GO, ""),
             row("red", "", 5.0)]
    assert light_waits(trace) == {"red_plans": 3, "red_go": 2, "green_plans": 3,
                                  "green_stay": 2, "red_gap_m": 6.6}
    assert light_waits([row("green", GO)])["red_gap_m"] is None


def test_the_counts_sum_over_drives_with_their_shares():
    drives = [{"light_waits": light_waits([row("red", STAY), row("red", GO)])},
              {"light_waits": light_waits([row("red", GO), row("green", STAY)])},
              {"light_waits": light_waits([])}]
    summed = summed_light_waits(drives)
    assert summed["red_plans"] == 3 and summed["red_go"] == 2
    assert summed["red_go_share"] == pytest.approx(2 / 3, abs=1e-4)
    assert summed["green_plans"] == 1 and summed["green_stay_share"] == 1.0
    assert summed_light_waits(drives[2:])["red_go_share"] is None
