"""The chat suite: strict answer extraction on fixed strings, generation, prompts."""

import pytest
from icml_led.suite import FAMILIES, FORMATS, ChatProblem, extract_answer, make_suite


@pytest.mark.parametrize("text,fmt,want", [
    ("29 + 14 = 43.\nAnswer: 43", "answer", 43),
    ("Answer: 7.", "answer", 7),
    ("  Answer:   -3  ", "answer", -3),
    ("Answer: 5\nthen\nAnswer: 6", "answer", 6),            # the last marker decides
    ("Answer: 5\nAnswer: six", "answer", None),             # ... even when it is not a number
    ("Answer: 4.5", "answer", None),
    ("Answer: 1,200", "answer", None),
    ("Answer: 12 apples", "answer", None),
    ("The answer: 12", "answer", None),                     # the marker starts a line
    ("answer: 12", "answer", None),                         # case matters
    ("so the answer is \\boxed{43}.", "answer", None),      # another format never counts
    ("so the answer is \\boxed{43}.", "boxed", 43),
    ("\\boxed{ 8 }", "boxed", 8),
    ("\\boxed{1} and \\boxed{2}", "boxed", 2),
    ("\\boxed{x=2}", "boxed", None),
    ("\\boxed{1", "boxed", None),                           # cut off before the brace
    ("\\boxed{\\frac{1}{2}}", "boxed", None),
    ("3 + 4 = 7.\n#### 7", "hash", 7),
    ("#### 7.", "hash", 7),
    ("#### 7 pens", "hash", None),
    ("Answer: 7", "hash", None),
    ("", "answer", None),
])
def test_extract_answer_is_strict(text, fmt, want):
    assert extract_answer(text, fmt) == want


def test_unknown_format_is_an_error():
    with pytest.raises(ValueError, match="unknown answer format 'json'"):
        extract_answer("Answer: 3", "json")


def test_suite_is_reproducible_and_covers_families_and_formats():
    a, b = make_suite(36, seed=3), make_suite(36, seed=3)
    assert a == b and make_suite(36, seed=4) != a
    assert {(p.family, p.fmt) for p in a} == {(f, g) for f in FAMILIES for g in FORMATS}
    for p in a:
        assert isinstance(p.answer, int) and p.answer >= 0
    p = ChatProblem("What is 6 times 7?", 42, "mul", "hash")
    assert p.is_correct("6 * 7 = 42.\n#### 42") and not p.is_correct("#### 41")
    assert not p.is_correct("Answer: 42")
    with pytest.raises(ValueError, match="count >= 1"):
        make_suite(0)
    with pytest.raises(ValueError, match="unknown or empty"):
        make_suite(3, families=("calculus",))


def test_answers_are_exact():
    """Each family's answer recomputed from its question text."""
    import re

    for p in make_suite(60, seed=1):
        nums = [int(x) for x in re.findall(r"\d+", p.question)]
        want = {"add2": lambda a, b: a + b, "word_add": lambda a, b: a + b,
                "word_sub": lambda a, b: a - b, "word_mul": lambda a, b: a * b,
                "mul": lambda a, b: a * b}
        if p.family == "addsub3":
            assert p.answer == nums[0] + nums[1] - nums[2]
        else:
            assert p.answer == want[p.family](*nums)


def test_prompt_uses_the_chat_template():
    class Tok:
        chat_template = "x"

        def apply_chat_template(self, msgs, add_generation_prompt, tokenize):
            assert add_generation_prompt and not tokenize
            return "|".join(f"{m['role']}:{m['content']}" for m in msgs) + "|assistant:"

    p = make_suite(1)[0]
    text = p.prompt(Tok())
    assert text.startswith("user:What is 2 + 3?") and text.endswith(p.question +
                                                                      " End your reply with a "
                                                                      "final line 'Answer: "
                                                                      "<number>'.|assistant:")
    assert "assistant:2 + 3 = 5.\nAnswer: 5" in text

    class NoChat:
        chat_template = None

    with pytest.raises(ValueError, match="no chat template"):
        p.prompt(NoChat())
