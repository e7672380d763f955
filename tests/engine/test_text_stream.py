from specchat.engine.generate import TextStream


def run(stream: TextStream, chunks: list[bytes]) -> tuple[str, bool]:
    out = []
    for c in chunks:
        text, hit = stream.push(c)
        out.append(text)
        if hit:
            return "".join(out), True
    return "".join(out) + stream.flush(), False


def test_utf8_split_across_tokens_is_joined():
    data = "héllo → wörld".encode()
    chunks = [data[i : i + 1] for i in range(len(data))]
    assert run(TextStream([]), chunks) == ("héllo → wörld", False)


def test_stop_string_across_tokens_is_cut_and_never_shown():
    stream = TextStream(["\nUser:"])
    shown = []
    for c in [b"Sure.", b"\nUs", b"er:", b" more"]:
        text, hit = stream.push(c)
        shown.append(text)
        if hit:
            break
    assert hit
    assert "".join(shown) == "Sure."


def test_text_held_back_for_a_possible_stop_is_released_at_the_end():
    assert run(TextStream(["STOP"]), [b"ab", b"ST"]) == ("abST", False)
