from specchat.engine.reasoning import ReasoningParser, split_reasoning


def feed_all(parser: ReasoningParser, pieces: list[str]) -> tuple[str, str]:
    reasoning, answer = [], []
    for p in pieces:
        s = parser.feed(p)
        reasoning.append(s.reasoning)
        answer.append(s.answer)
    s = parser.flush()
    return "".join(reasoning) + s.reasoning, "".join(answer) + s.answer


def test_think_block_is_separated_from_the_answer():
    s = split_reasoning("<think>let me see</think>The answer is 4.")
    assert (s.reasoning, s.answer) == ("let me see", "The answer is 4.")


def test_tags_split_across_pieces_are_recognised():
    text = "<think>step one, step two</think>Done."
    for cut in range(1, len(text)):
        r, a = feed_all(ReasoningParser(), [text[:cut], text[cut:]])
        assert (r, a) == ("step one, step two", "Done."), cut


def test_one_character_at_a_time():
    text = "<think>a<b</think>x <think> y"
    r, a = feed_all(ReasoningParser(), list(text))
    # one think block per answer: a later "<think>" is plain answer text
    assert r == "a<b"
    assert a == "x <think> y"


def test_answer_without_reasoning_passes_through_and_keeps_lookalikes():
    r, a = feed_all(ReasoningParser(), ["if a <th", "ink b: pass"])
    assert r == ""
    assert a == "if a <think b: pass"


def test_template_that_opens_the_block_in_the_prompt():
    r, a = feed_all(ReasoningParser(started_in_reasoning=True), ["hmm...", "</think>", "\n\nHi"])
    assert r == "hmm..."
    assert a == "\n\nHi"


def test_unterminated_reasoning_stays_reasoning():
    r, a = feed_all(ReasoningParser(), ["<think>still thinking when max tokens hit"])
    assert r == "still thinking when max tokens hit"
    assert a == ""
