"""Which tests make the inner loop (``pytest -m inner``; tests/conftest.py marks them)."""

from __future__ import annotations

# The inner loop (``pytest -m inner``): the Qt-free core and the UI flows that take well under a
# second each; no model file, no subprocess-heavy or kill-and-restart test (those stay in the fast tier).
INNER = (
    "tests/engine/", "tests/harness/", "tests/telemetry/", "tests/store/", "tests/test_metrics.py", "tests/test_config.py",
    "tests/test_layers.py", "tests/backends/test_choose.py", "tests/backends/test_server_auto.py", "tests/test_files.py", "tests/test_cancel.py", "tests/workers/test_tasks.py", "tests/services/test_services_on_the_fake.py",
    "tests/services/test_long_chats.py", "tests/test_context_policy.py", "tests/ui/test_long_chat_ui.py",
    "tests/services/test_hub_tasks.py", "tests/ui/test_main_window.py", "tests/ui/test_chat_shortcuts.py",
    "tests/ui/test_telemetry_panel.py", "tests/ui/test_answer_view.py", "tests/ui/test_settings_dialogs.py",
    "tests/ui/test_reasoning_split_ui.py", "tests/ui/test_chat_settings_structured.py",
    "tests/ui/test_theme_contrast.py", "tests/ui/test_undo_delete.py",
)
# in those places, what runs a child process or a whole command, or waits on a retry clock
INNER_EXCEPT = (
    "tests/store/test_crash_safety.py",
    "tests/store/test_exchange.py::test_json_round_trip_of_100_chats_and_5000_messages_gives_back_every_message_"
    "version_and_figure",  # 5,000 messages written through the store (10 s)
    "tests/engine/test_grammar_hostile.py",  # each check is a child process (6 s in all)
    "tests/ui/test_chat_settings_structured.py",  # OK checks the grammar in a child process
    "tests/services/test_services_on_the_fake.py::"
    "test_a_full_disk_mid_answer_stops_it_at_what_was_shown_and_stores_it_as_stopped_once_there_is_room",  # a 2 s retry
    "tests/harness/test_simulate.py::test_simulate_agreement_from_the_command_line",
    "tests/harness/test_simulate.py::test_the_agreement_table_has_one_column_per_share_and_the_kits_goals",
)


def inner(nodeid: str) -> bool:
    """Is this test (its id from the repository root) in the inner loop?"""
    return nodeid.split("::")[0].startswith(INNER) and not nodeid.startswith(INNER_EXCEPT)
