"""Demonstration text as a downstream model and a reader should get it: no markup, no marks.

A small base model (the packaged Gemma-3-270M) continues a "Ticket:" line the way its web
training text did: ``<b>Invoice 3</b> was charged twice``, ``</h3>``, ``&amp;``, ``**Urgent**``.
Served as they are, the tags reach the downstream model in every prompt and chat message,
where they teach it a format the app's queries never have, and a reader sees broken HTML.
:func:`clean_markup` takes them out before a demonstration is stored; the stored text is the
served text, so a prompt's JSON, its text and its chat messages all agree.

A demonstration that ran out of tokens (T_max) is never marked with a display ellipsis
(``…``): a mark of where a view shortened a text belongs to the view (the dashboard, the
CLI). :func:`end_cleanly` ends it at its last whole sentence or word instead.

Both are post-processing of a DP output (the released tokens): they read no private record,
so they cost no privacy and change nothing the ledger charges.
"""

from __future__ import annotations

import html
import re

#: The character views mark a shortened text with (never in a stored demonstration).
ELLIPSIS = "\u2026"

# HTML elements a web-trained model writes (and scraped text holds): known names only, so
# that "x <y and z> w" in ordinary prose, or a placeholder such as "<order id>", stays.
_ELEMENTS = (
    "a|abbr|address|article|aside|b|big|blockquote|body|br|button|caption|center|cite|code"
    "|dd|del|details|div|dl|dt|em|figcaption|figure|font|footer|form|h[1-6]|head|header|hr"
    "|html|i|img|input|ins|kbd|label|li|main|mark|meta|nav|ol|option|p|pre|q|s|section"
    "|select|small|span|strike|strong|sub|summary|sup|table|tbody|td|textarea|tfoot|th"
    "|thead|title|tr|tt|u|ul"
)
#: A tag of a known HTML element (opening, closing or self-closing, with any attributes),
#: a comment, or a doctype.
HTML_TAG = re.compile(
    rf"<!--.*?-->|<!doctype[^<>]*>|</?(?:{_ELEMENTS})(?:\s[^<>]*)?/?>",
    re.IGNORECASE | re.DOTALL,
)
# A tag T_max cut before its ">": "<", "</", "<b", "</h3", '<span class="x' at the end.
_CUT_TAG = re.compile(rf"</?(?:(?:{_ELEMENTS})(?:\s[^<>]*)?)?$", re.IGNORECASE)
# Markdown a base model writes around words: bold and underline runs, code fences and
# backticks, a heading's or a list item's mark at the start, a link's target.
_EMPHASIS = re.compile(r"\*\*+|__+|```+|`")
_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)([^*]*?\S)\*(?![\w*])")
_LEADING_MARK = re.compile(r"^(?:#{1,6}|[*+-]|>)\s+")
_LINK = re.compile(r"\[([^\[\]]+)\]\((?:https?://|/)[^()\s]*\)")

#: What ends a sentence, for :func:`end_cleanly` (closing quotes and brackets may follow).
_SENTENCE = re.compile(r"[.?!][\"')\]]*(?=\s|$)")
# Punctuation that leaves a cut text hanging: dropped from its end.
_HANGING = ",;:-–—(/&+=[{"


def clean_markup(text: str) -> str:
    """``text`` without HTML and markdown markup, on one line.

    Entities are unescaped first (``&amp;`` -> ``&``, ``&nbsp;`` -> a space), then tags
    (:data:`HTML_TAG`) are removed, so an escaped tag (``&lt;b&gt;``) goes too: in a
    generated demonstration it is the same markup, written once more escaped. A tag becomes
    a space where it separated words (``a<br>b`` -> ``a b``). Markdown bold, italics, code
    marks, links (their text stays) and a leading heading, list or quote mark go. An
    ellipsis character the model wrote (``…``) becomes three dots, so that a stored text
    never holds the character views mark their cuts with. Whitespace runs become one space.

    Post-processing of a DP output (no privacy cost): it reads nothing but the text.
    """
    text = html.unescape(text).replace(ELLIPSIS, "...")
    text = HTML_TAG.sub(" ", text)
    text = _LINK.sub(r"\1", text)
    text = _ITALIC.sub(r"\1", _EMPHASIS.sub("", text))
    text = " ".join(text.split())
    return _LEADING_MARK.sub("", text)


def end_cleanly(text: str) -> str:
    """A text that T_max cut, ended where a reader sees no cut: at its last sentence end when
    that keeps at least half its words, else at its last whole word (the last fragment may
    be part of a word: whether it was is only known from the token never generated), without
    punctuation left hanging (``,`` ``(`` ``-``) or a tag cut before its ``>``. A single word
    is kept; no mark is added (a view marks what it shortens, the stored text is not
    shortened for display). Post-processing of a DP output, so no privacy cost."""
    text = text.strip()
    untagged = _CUT_TAG.sub("", text)
    # What stood before a cut tag and a space is whole: only the tag was cut.
    whole = untagged != text and untagged[-1:].isspace()
    text = untagged.rstrip()
    words = text.split()
    if len(words) < 2:
        return text
    ends = [m.end() for m in _SENTENCE.finditer(text)]
    if ends and len(text[: ends[-1]].split()) * 2 >= len(words):
        return text[: ends[-1]]
    if not whole:  # the last sentence end is not at the end: the last word may be a fragment
        text = text.rsplit(None, 1)[0]
    return text.rstrip().rstrip(_HANGING).rstrip() or words[0]


def clean_stored(text: str) -> str:
    """A demonstration stored before :func:`clean_markup` existed, as it is stored now: its
    markup removed and the display ellipsis it was stored with when T_max cut it (`` …``,
    after its last whole word) taken off, with a tag or punctuation that the cut left
    hanging. Migration 0025 rewrites stored prompts with it. Post-processing of a stored DP
    output: no privacy cost."""
    cut = text.rstrip().endswith(ELLIPSIS)
    text = clean_markup(text.rstrip().removesuffix(ELLIPSIS) if cut else text)
    if not cut:
        return text
    return _CUT_TAG.sub("", text).rstrip().rstrip(_HANGING).rstrip()
