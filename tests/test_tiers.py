"""The inner loop (``pytest -m inner``) is a list of places in tests/helpers/tiers.py: it must not rot."""

from pathlib import Path

import helpers.tiers as tiers

ROOT = Path(__file__).resolve().parents[1]


def test_every_place_the_inner_loop_names_exists():
    for place in tiers.INNER + tiers.INNER_EXCEPT:
        path, _, test = place.partition("::")
        assert (ROOT / path).exists(), place  # a renamed file would silently leave the inner loop
        if test:
            assert f"def {test}(" in (ROOT / path).read_text(), place


def test_the_inner_loop_takes_the_core_and_leaves_child_processes_and_slow_flows_out():
    assert tiers.inner("tests/engine/test_controller.py::test_expected_tokens_per_round")
    assert tiers.inner("tests/ui/test_main_window.py::test_x[a]")
    assert not tiers.inner("tests/store/test_crash_safety.py::test_a_killed_process_loses_at_most_the_last_second")
    assert not tiers.inner("tests/harness/test_simulate.py::test_simulate_agreement_from_the_command_line")
    assert not tiers.inner("tests/ui/test_closing.py::test_x")  # a UI flow of seconds
    assert not tiers.inner("tests/remote/test_counters.py::test_x")
