"""PromptPATE's public texts lose their HTML markup before they are used (issue 24, item 5):
the unit, and that ``run_pate`` (the path of every PATE job: CLI, eval and worker) applies it
to the teachers' queries and to the student's demonstrations."""

from __future__ import annotations

import pytest

from app.pate.config import PateConfig
from app.pate.plan import plan_pate
from app.pate.public import clean_public_text
from app.pate.run import run_pate
from tests.pate.fake_backend import PateFakeBackend
from tests.pate.helpers import SST2, private_records


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Great film.<br /><br />Loved it.", "Great film. Loved it."),
        ("one<br>two<BR/>three<br\n/>four", "one two three four"),
        ("a <i>fine</i> <b class='x'>cast</b>", "a fine cast"),
        ("Tom &amp; Jerry &quot;rock&quot; &#39;n&#39; roll", "Tom & Jerry \"rock\" 'n' roll"),
        ("before<!-- a\ncomment -->after", "before after"),
        ("an escaped &lt;br /&gt; is text", "an escaped <br /> is text"),
        ("x < y and z > w, <bro>, a<b", "x < y and z > w, <bro>, a<b"),  # not markup
        ("  spaced \t out\n ", "spaced out"),
        ("<br /><br />", "<br /><br />"),  # markup only: kept, an input is never empty
    ],
)
def test_markup_is_stripped_and_entities_unescaped(raw: str, clean: str) -> None:
    assert clean_public_text(raw) == clean


def test_run_pate_queries_and_demonstrations_carry_no_markup() -> None:
    private = private_records(400)
    # IMDB-like inputs: "good"/"bad" films with paragraph breaks and an entity in them.
    public = [
        f"a {word} film<br /><br />number {i} &amp; more"
        for word in ("good", "bad")
        for i in range(12)
    ]
    config = PateConfig(
        epsilon=100.0,
        teachers=40,
        threshold_fraction=0.8,
        sigma_threshold=2.0,
        sigma_gnmax=2.0,
        student_shots=2,
        candidates=4,
        group_size=8,
        seed=3,
    )
    plan = plan_pate(SST2, len(private), len(public), config)
    backend = PateFakeBackend()
    result = run_pate(SST2, private, public, plan, backend)

    prompts = [prompt for call in backend.calls for prompt in call]
    assert prompts and not any("<br" in prompt or "&amp;" in prompt for prompt in prompts)
    assert any("film number" in prompt and "& more" in prompt for prompt in prompts)
    assert result.demonstrations
    for demo in result.demonstrations:
        assert "<br" not in demo.text and "&amp;" not in demo.text
        assert "film number" in demo.text and "& more" in demo.text
    assert "<br" not in result.prompt
