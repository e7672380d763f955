"""What a chat sends past the context: which turns each policy keeps, and how often it renders."""

from __future__ import annotations

import pytest

from specchat.context_policy import POLICY_NAMES, ContextPolicy, fit_messages, reserve


def chat(turns: int, *, system: bool = True) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "S" * 10}] if system else []
    for i in range(turns):
        msgs.append({"role": "user", "content": f"u{i}" + "x" * 8})
        if i < turns - 1:  # the last user message is the one being answered
            msgs.append({"role": "assistant", "content": f"a{i}" + "y" * 18})
    return msgs


class Renders:
    """A stand-in for the chat template and tokenizer: a prompt's length is its characters."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, msgs: list[dict[str, str]]) -> str:
        self.calls += 1
        return "".join(m["content"] for m in msgs)


def fit(msgs, policy, budget, render=None):
    render = render or Renders()
    return fit_messages(msgs, policy, budget, render, len)


def test_what_fits_is_sent_whole_after_one_render_under_every_policy():
    for policy in ContextPolicy:
        render = Renders()
        out = fit(chat(5), policy, 10_000, render)
        assert out.messages == tuple(chat(5)) and out.left_out == 0 and render.calls == 1


def test_stop_sends_everything_even_when_it_does_not_fit():
    out = fit(chat(20), ContextPolicy.STOP, 50)
    assert out.messages == tuple(chat(20)) and out.left_out == 0 and len(out.prompt) > 50


def test_rolling_window_keeps_the_system_prompt_and_the_newest_turns_that_fit():
    msgs = chat(20)  # 10 + 19 * (10 + 20) + 10 = 590 characters
    out = fit(msgs, ContextPolicy.ROLLING_WINDOW, 200)
    sent = out.messages
    assert sent[0] == msgs[0]  # the system prompt
    assert sent[1]["role"] == "user"  # whole turns go: no answer without its question
    assert sent[-1] == msgs[-1]  # the question being answered
    assert len(out.prompt) <= 200
    assert list(sent[1:]) == msgs[len(msgs) - len(sent) + 1:]  # the newest ones, in order
    # the fewest turns left out: one more turn would not fit
    assert len(out.prompt) + 30 > 200
    assert out.left_out == len(msgs) - len(sent)


def test_truncate_middle_keeps_the_system_prompt_and_the_first_exchange():
    msgs = chat(20)
    out = fit(msgs, ContextPolicy.TRUNCATE_MIDDLE, 200)
    sent = out.messages
    assert list(sent[:3]) == msgs[:3]  # system, first question, its answer
    assert sent[3]["role"] == "user" and sent[-1] == msgs[-1]
    assert list(sent[3:]) == msgs[len(msgs) - len(sent) + 3:]
    assert len(out.prompt) <= 200 < len(out.prompt) + 30
    assert out.left_out == len(msgs) - len(sent)


def test_without_a_system_prompt_rolling_window_starts_at_a_question():
    out = fit(chat(20, system=False), ContextPolicy.ROLLING_WINDOW, 100)
    assert out.messages[0]["role"] == "user" and len(out.prompt) <= 100


def test_the_search_renders_a_logarithmic_number_of_times():
    render = Renders()
    fit(chat(500), ContextPolicy.ROLLING_WINDOW, 300, render)
    assert render.calls <= 2 + 9  # 498 turns that may go: log2 < 9


def test_when_even_the_fewest_messages_do_not_fit_those_are_sent():
    msgs = chat(6)
    out = fit(msgs, ContextPolicy.TRUNCATE_MIDDLE, 5)
    assert out.messages == (msgs[0], msgs[1], msgs[2], msgs[-1])  # the engine then says it is too long
    out = fit(msgs, ContextPolicy.ROLLING_WINDOW, 5)
    assert out.messages == (msgs[0], msgs[-1])


def test_the_reserve_is_max_tokens_but_never_more_than_half_the_context():
    assert reserve(512, 60) == 60
    assert reserve(512, 2048) == 256
    assert POLICY_NAMES == ("stop", "truncate_middle", "rolling_window")


@pytest.mark.parametrize("policy", ["truncate_middle", "rolling_window"])
def test_a_policy_given_by_name_is_read(policy):
    assert fit(chat(20), policy, 200).left_out > 0


@pytest.mark.parametrize("policy, kept_start", [(ContextPolicy.ROLLING_WINDOW, 1), (ContextPolicy.TRUNCATE_MIDDLE, 3)])
def test_the_fit_says_where_the_messages_it_left_out_begin(policy, kept_start):
    """The transcript marks what was not sent from this: request[left_out_at : left_out_at + left_out]."""
    msgs = chat(20)
    out = fit(msgs, policy, 200)
    assert out.left_out > 0 and out.left_out_at == kept_start
    gone = msgs[out.left_out_at:out.left_out_at + out.left_out]
    assert [m for m in msgs if m not in gone] == list(out.messages)  # exactly the ones not sent
    assert fit(msgs, policy, 10_000).left_out_at == 0  # nothing left out
