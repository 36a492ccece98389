"""Report text made safe for where it is shown: terminals, spreadsheets and XML.

Names in a report (NVTX text, kernel names, callers, process and host names) are whatever the
profiled program wrote. Printed raw, an escape sequence in one of them can clear the screen,
retitle the window or hide lines; in a CSV cell starting with ``=`` a spreadsheet runs a
formula; in JUnit XML a control character makes the file unreadable. The data stays as read
(JSON keeps every character, escaped by JSON itself); only the renderings change, here, once.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING, overload

from rich.console import Console

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

# C0 controls but newline and tab, DEL, C1 controls, the bidirectional overrides and isolates
# (U+202A-U+202E, U+2066-U+2069) that reorder what the terminal shows, and lone surrogates: a
# file name's bytes that are not UTF-8, as Python holds them (U+DC80-U+DCFF), which no
# terminal, file or DuckDB string can take
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    if 0xDC80 <= c <= 0xDCFF:  # the byte it stands for, as Python's own repr of such bytes shows it
        return f"\\x{c - 0xDC00:02x}"
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(text: str) -> str:
    """text with every control character shown as its escape (ESC -> ``\\x1b``), newlines and
    tabs kept: what a terminal shows is exactly what the report holds."""
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


def visible_line(text: str) -> str:
    """visible(), and a newline or tab shown too: for one-line messages (errors, warnings)."""
    text = visible(text)
    return text.replace("\n", "\\n").replace("\t", "\\t") if ("\n" in text or "\t" in text) else text


def markup_text(text: object) -> str:
    """Report text for a rich console line or table cell: on one line (visible_line: a name never
    adds a line or a heading) and its rich markup ([bold]) escaped, so that it is shown as is."""
    from rich.markup import escape

    return escape(visible_line(str(text)))


# What CommonMark and GitHub's Markdown would read in report text as something other than text:
# a backslash (an escape), links and images ([ ]), emphasis and strikethrough (* ~, and an
# underscore at a word's edge: inside a word, as in train_step, it is never emphasis), code spans
# (`), table cells (|), and bare URLs GitHub turns into links (https://, www.)
_MARKDOWN = re.compile(r"[\\`*~\[\]|]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|(?<=:)//|(?<=www)\.")


def markdown_text(text: object) -> str:
    """Report text as inert Markdown: on one line (visible_line: a name never adds a line or a
    heading), its HTML escaped (&, <, >) and every character that would make it a link, an image,
    emphasis, a code span or a table break backslash-escaped, so that a rendered page (GitHub's
    step summary) shows exactly the text the report holds."""
    text = html.escape(visible_line(str(text)), quote=False)
    return _MARKDOWN.sub(lambda m: "".join("\\" + c for c in m.group()), text)


# spaces at the end of a line, before the style codes that may close it: rich pads every table
# row to the table's width; in a log or a file they are noise
_TRAILING = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


class SafeConsole(Console):
    """A rich Console that shows the control characters of what it prints (visible()); its own
    styling (colours, bold), which rich writes as separate control segments, is kept. Lines end
    without trailing spaces."""

    def _render_buffer(self, buffer) -> str:
        from rich.segment import Segment

        text = super()._render_buffer(
            Segment(visible(text), style, control)
            if not control and _UNSAFE.search(text)
            else Segment(text, style, control)
            for text, style, control in buffer
        )
        return _TRAILING.sub(r"\1", text)


# What spreadsheet-safe CSV writers (OWASP's CSV injection advice) neutralise: a cell starting
# with one of these is a formula to Excel, LibreOffice and Google Sheets
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def csv_cell(value: object) -> object:
    """A CSV cell a spreadsheet shows as text: prefixed with ``'`` when it would start a formula,
    its control characters shown visibly. Numbers (negative ones too) stay numbers."""
    if not isinstance(value, str):
        return value
    if value.startswith(_FORMULA_START) and not _NUMBER.fullmatch(value):
        value = "'" + value
    return visible_line(value)


# XML 1.0 allows tab, newline and carriage return among the controls, and nothing of
# U+D800-U+DFFF, U+FFFE, U+FFFF; such characters in a JUnit file make every CI parser reject it
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@overload
def xml_text(text: str) -> str: ...
@overload
def xml_text(text: None) -> None: ...
def xml_text(text: str | None) -> str | None:
    """text with the characters XML 1.0 forbids shown as escapes (NUL -> ``\\x00``), so that a
    JUnit file parses whatever the names in the report hold."""
    if not isinstance(text, str):
        return text
    return _NOT_XML.sub(_escape, text) if _NOT_XML.search(text) else text


def xml_tree(root: ET.Element) -> None:
    """xml_text() over every attribute and text of an ElementTree, in place, before it is written."""
    for el in root.iter():
        for k, v in el.attrib.items():
            el.attrib[k] = xml_text(v)
        el.text, el.tail = xml_text(el.text), xml_text(el.tail)
