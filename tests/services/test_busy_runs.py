"""Issue 38, item 3a: each answer stores the machine's verdict on it (the telemetry recorder's judge),
its task run carries it, and the task table leaves the busy runs out and counts them.  The machine's
business is injected (helpers.machine), never measured."""

from __future__ import annotations

from helpers.fakes import FakePairFactory, FakeSpec
from helpers.machine import FakeCpu, watch
from specchat.engine.pair import PairConfig
from specchat.services.answers import AnswerService
from specchat.store import ChatSettings, open_store, task_table
from specchat.telemetry import TelemetryRecorder
from specchat.workers.generation import GenerationService


class Hogs(FakeCpu):
    """A 2-core machine whose counters move on at every reading: our decodes keep a core busy, and
    ``hogs`` other processes a core each."""

    hogs = 0

    def __call__(self):
        self.run(1.0, ours=1.0, others=float(self.hogs))
        return self.now


def test_answers_keep_the_machines_verdict_and_the_task_table_leaves_the_busy_ones_out(qtbot, tmp_path):
    store = open_store(tmp_path / "db.sqlite3")
    target = tmp_path / "t.gguf"
    target.touch()
    chat = store.create_chat("c", ChatSettings(target=target, speculation="baseline", task="code",
                                               max_tokens=40)).id
    cpu = Hogs()
    gen = GenerationService(FakePairFactory(FakeSpec(answer_tokens=20)))
    answers = AnswerService(store, gen, lambda s: PairConfig(s.target, None),
                            recorder=TelemetryRecorder(machine=watch(cpu)))
    finished = []
    answers.finished.connect(lambda _chat, stored: finished.append(stored))
    try:
        for i, hogs in enumerate((0, 2, 0, 2, 2)):
            cpu.hogs = hogs
            store.add_message(chat, "user", f"question {i}")
            answers.ask(chat)
            qtbot.waitUntil(lambda n=i + 1: len(finished) == n, timeout=10_000)
        assert [m.stats.busy for m in finished] == [False, True, False, True, True]
        assert "other work kept" in finished[1].stats.busy_why and not finished[0].stats.busy_why
        stored = [m.stats.busy for m in store.messages(chat) if m.role == "assistant"]
        assert stored == [False, True, False, True, True]  # read back from the database
        [row] = task_table(store)
        assert (row.plain_answers, row.busy_runs) == (2, 3)
    finally:
        answers.shutdown()
        gen.shutdown()
        store.close()
