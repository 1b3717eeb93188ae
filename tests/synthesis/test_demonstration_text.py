"""A demonstration is stored and served as clean text (issues 24 and 55): never cut inside a
word, never marked with the display ellipsis ``…`` (a view marks what it shortens), and
without the HTML and markdown markup a web-trained base model writes (``<b>``, ``</h3>``,
``&amp;``, ``**``)."""

from __future__ import annotations

import pytest

from app.synthesis.generator import demonstration_text
from app.synthesis.markup import ELLIPSIS, clean_markup, end_cleanly

CUT = " What is the formula for the area of a tri"


@pytest.mark.parametrize(
    ("text", "finished", "expected"),
    [
        (CUT, False, "What is the formula for the area of a"),
        ("What is the capital of France ?", False, "What is the capital of France ?"),
        ("Who wrote it.", False, "Who wrote it."),
        ("Supercalifragilistic", False, "Supercalifragilistic"),
        (CUT, True, CUT.strip()),
        ("   ", False, ""),
        # a whole sentence that keeps at least half the words ends a cut text
        ("My invoice is wrong. Please refund the second charge on", False,
         "My invoice is wrong. Please refund the second charge"),
        ("Refund my order now. I was charged tw", False, "Refund my order now."),
        # punctuation left hanging after the fragment goes too
        ("Charged twice for order 41, inv", False, "Charged twice for order 41"),
        ("The server (eu-west", False, "The server"),
        # a tag T_max cut before its ">"
        ("<b>Server down</b> since <h", False, "Server down since"),
        ("The login page <span class='x", False, "The login page"),
        ("Cannot log in since the update </", False, "Cannot log in since the update"),
        # markup in a text that reached its stop token
        ("<b>Invoice 3</b> was charged twice</h3>", True, "Invoice 3 was charged twice"),
    ],
)  # fmt: skip
def test_demonstration_text(text: str, finished: bool, expected: str) -> None:
    assert demonstration_text(text, finished) == expected
    assert ELLIPSIS not in demonstration_text(text, finished)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<b>Invoice</b> charged twice", "Invoice charged twice"),
        ("<h3>Server 4 down</h3> since 9:00", "Server 4 down since 9:00"),
        ('<p class="x">Line one<br/>line two</p>', "Line one line two"),
        ("<!-- note -->Hi<BR>there", "Hi there"),
        ("<!DOCTYPE html><html><body>Help</body></html>", "Help"),
        ('<a href="https://x.io/a?b=1">the portal</a> is down', "the portal is down"),
        ("Tom &amp; Jerry&nbsp;called", "Tom & Jerry called"),
        ("&lt;b&gt;escaped&lt;/b&gt; tag", "escaped tag"),
        ("**Urgent**: __refund__ now", "Urgent: refund now"),
        ("*please* help, 5*3*2 = 30", "please help, 5*3*2 = 30"),
        ("## Outage in eu-west", "Outage in eu-west"),
        ("- Cannot log in", "Cannot log in"),
        ("See [the docs](https://example.com/x) first", "See the docs first"),
        ("Run `dpsyn jobs` again", "Run dpsyn jobs again"),
        (f"Wait{ELLIPSIS} what", "Wait... what"),
        # prose with angle brackets and placeholders is left alone
        ("if x <y and z> w", "if x <y and z> w"),
        ("Order <order id> is late", "Order <order id> is late"),
        ("a < b > c", "a < b > c"),
        ("  spaced\tout  ", "spaced out"),
    ],
)  # fmt: skip
def test_clean_markup(text: str, expected: str) -> None:
    assert clean_markup(text) == expected


def test_a_text_that_is_only_markup_comes_out_empty() -> None:
    # then the token loop leaves it out as empty (counted, noted), never serves "<b></b>"
    assert clean_markup("<b></b><br/>**  **") == ""
    assert demonstration_text("<h3></h3>", True) == ""


def test_end_cleanly_keeps_a_single_word() -> None:
    assert end_cleanly("Supercalifragilis") == "Supercalifragilis"
    assert end_cleanly("Refund,") == "Refund,"
