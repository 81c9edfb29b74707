"""MSCCL XML (either dialect) -> Program, with errors that name file, line and attribute.

Any file msccl-tools, TACCL, RCCL or this package writes loads. What cannot be
represented (a missing required attribute, a non-integer, an unknown step type
or buffer, a truncated file, a number outside the runtime's integer range)
raises :class:`XmlLoadError`, an :class:`~taccl_py.errors.XmlError`; nothing
else escapes. What the runtimes' tokenizer would reject but a normal XML parser
accepts (tabs, a declaration, tags over several lines...) is recorded as
``Program.source_issues`` for the verifier.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import partial
from xml.parsers import expat

from taccl_py.errors import XmlLoadError
from taccl_py.inputs import read_file_bytes
from taccl_py.msccl.ir import (
    MAX_ATTRIBUTES,
    MAX_STRING,
    Buffer,
    Gpu,
    Program,
    SourceIssue,
    Step,
    StepType,
    Threadblock,
)

__all__ = ["XmlLoadError", "load_program", "parse_program"]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

_ALGO_REQUIRED = ("ngpus", "nchunksperloop", "nchannels", "proto", "coll", "inplace")
_GPU_REQUIRED = ("id", "i_chunks", "o_chunks", "s_chunks")
_TB_REQUIRED = ("id", "send", "recv", "chan")
_STEP_REQUIRED = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")
_INTEGER = re.compile(r"^[+-]?[0-9]+$")


@dataclass
class _Node:
    name: str
    attrs: dict[str, str]
    line: int
    children: list[_Node] = field(default_factory=list)


def load_program(path: str | os.PathLike[str]) -> Program:
    """Read an MSCCL XML file of either dialect into a :class:`Program`."""
    data = read_file_bytes(path, partial(XmlLoadError, rule="file"), what="file")
    if len(data) >= FAST_MIN_BYTES:  # the compiled reader, then the objects (the same program, the same errors)
        from taccl_py.msccl.xml_scan import arrays_from_bytes

        return arrays_from_bytes(data, where=str(path)).program()
    return parse_program(data, where=str(path))


FAST_MIN_BYTES = 1 << 22
"""Files from this size are read by the compiled reader (:mod:`taccl_py.msccl.xml_scan`); below it, expat is as
quick as loading the compiled one."""


def parse_program(data: bytes | str, *, where: str = "<string>") -> Program:
    """Parse XML text (bytes or str) into a :class:`Program`; ``where`` names it in errors."""
    raw = data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else bytes(data)
    text = raw.decode("utf-8", errors="replace")
    root, issues = _parse_tree(raw, where)
    issues = _scan_text(text) + issues
    return _build_program(root, where, tuple(sorted(issues, key=lambda i: (i.line, i.rule))))


# ---------------------------------------------------------------- XML -> tree
def _parse_tree(raw: bytes, where: str) -> tuple[_Node, list[SourceIssue]]:
    parser = expat.ParserCreate()
    stack: list[_Node] = []
    roots: list[_Node] = []
    issues: list[SourceIssue] = []

    def start(name: str, attrs: dict[str, str]) -> None:
        line = parser.CurrentLineNumber
        node = _Node(name, attrs, line)
        if len(attrs) > MAX_ATTRIBUTES:
            issues.append(SourceIssue("too-many-attributes", line, f"<{name}> has {len(attrs)} attributes; the "
                                      f"runtime tokenizer keeps only the first {MAX_ATTRIBUTES}"))
        for key, value in attrs.items():
            if len(key) >= MAX_STRING or len(value) >= MAX_STRING:
                issues.append(SourceIssue("string-too-long", line, f"<{name}> attribute {key[:40]!r} is longer "
                                          f"than the runtime's {MAX_STRING - 1} characters"))
        if len(name) >= MAX_STRING:
            issues.append(SourceIssue("string-too-long", line, "element name longer than the runtime allows"))
        (stack[-1].children if stack else roots).append(node)
        stack.append(node)

    def end(name: str) -> None:
        stack.pop()

    def doctype(*_args: object) -> None:
        raise XmlLoadError("a DOCTYPE declaration is not allowed", where=where, line=parser.CurrentLineNumber)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.StartDoctypeDeclHandler = doctype
    try:
        parser.Parse(raw, True)
    except expat.ExpatError as exc:
        message = expat.errors.messages.get(exc.code, str(exc)) if exc.code is not None else str(exc)
        truncated = " (truncated file?)" if "no element found" in message or "unclosed token" in message else ""
        raise XmlLoadError(f"not well-formed XML: {message}{truncated}", where=where,
                           line=exc.lineno or None) from None
    except (RecursionError, MemoryError):
        raise XmlLoadError("document too large or too deeply nested", where=where) from None
    if not roots:
        raise XmlLoadError("no element found (empty file?)", where=where, line=1)
    return roots[0], issues


# ------------------------------------------------------------ lexical checks
_TOKEN = re.compile(r"<!--.*?-->|<\?.*?\?>|<[^>]*>?|[^<]+", re.DOTALL)
_CLOSING = re.compile(r"^</[A-Za-z_][\w.\-]*>$")
_SPACED_EQUALS = re.compile(r"\s=|=\s")
_SINGLE_QUOTED = re.compile(r"=\s*'")
_QUOTED = re.compile(r'"[^"]*"')


def _scan_text(text: str) -> list[SourceIssue]:
    """What the runtimes' tokenizer rejects even though the XML is well formed (first case of each)."""
    found: dict[str, SourceIssue] = {}
    counts: dict[str, int] = {}
    line = 1

    def note(rule: str, at: int, message: str) -> None:
        counts[rule] = counts.get(rule, 0) + 1
        if rule not in found:
            found[rule] = SourceIssue(rule, at, message)

    if text.startswith("\ufeff"):
        note("text-content", 1, "the file starts with a byte-order mark; the runtime expects '<'")
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if token.startswith("<!--"):
            pass
        elif token.startswith("<?"):
            note("xml-declaration", line, f"{token[:30]!r}: the runtime tokenizer fails on an XML declaration or "
                 "processing instruction")
        elif token.startswith("<"):
            if "\t" in token:
                note("tab-character", line, "a tab inside a tag; the runtime tokenizer only skips spaces and "
                     "newlines")
            if "\n" in token or "\r" in token:
                note("tag-spans-lines", line, f"tag {token.split()[0]}...> spans several lines; the runtime "
                     "needs every tag with its attributes on one line")
            if token.startswith("</"):
                if not _CLOSING.match(token):
                    note("malformed-tag", line, f"closing tag {token!r} must be exactly </name>")
            else:
                bare = _QUOTED.sub('""', token)
                if _SINGLE_QUOTED.search(bare):
                    note("single-quotes", line, "attribute values must use double quotes")
                if _SPACED_EQUALS.search(bare):
                    note("malformed-tag", line, "spaces around '=' in an attribute break the runtime tokenizer")
                if "&" in token:
                    note("entity", line, "the runtime does not decode entities such as &amp;")
                if "  " in bare or token.startswith("< "):
                    note("malformed-tag", line, "several spaces in a row inside a tag create empty attributes")
        else:
            stripped = token.strip(" \n\r")
            if "\t" in stripped or (stripped == "" and "\t" in token):
                note("tab-character", line, "a tab between elements; the runtime tokenizer only skips spaces and "
                     "newlines")
            elif stripped and not (match.start() == 0 and stripped == "\ufeff"):
                note("text-content", line, f"text {stripped[:20]!r} between elements; the runtime expects '<'")
        line += token.count("\n")
    return [SourceIssue(i.rule, i.line, i.message + (f" ({counts[i.rule]} places)" if counts[i.rule] > 1 else ""))
            for i in found.values()]


# ------------------------------------------------------------- tree -> IR
class _Reader:
    """Typed access to one element's attributes, failing with file, line, element and attribute."""

    def __init__(self, node: _Node, where: str) -> None:
        self.node = node
        self.where = where

    def fail(self, attribute: str, message: str, rule: str = "bad-attribute") -> XmlLoadError:
        return XmlLoadError(f"{self.node.name} attribute {attribute!r} {message}", where=self.where,
                            line=self.node.line, rule=rule)

    def require(self, names: tuple[str, ...]) -> None:
        for name in names:
            if name not in self.node.attrs:
                raise self.fail(name, "is missing", rule="missing-attribute")

    def text(self, name: str) -> str:
        return self.node.attrs[name]

    def integer(self, name: str, lo: int = INT32_MIN, hi: int = INT32_MAX) -> int:
        value = self.node.attrs[name]
        if not _INTEGER.match(value.strip()):
            raise self.fail(name, f"must be an integer (got {value[:40]!r})")
        digits = value.strip().lstrip("+-").lstrip("0")
        number = int(value.strip()) if len(digits) <= 20 else hi + 1
        if not lo <= number <= hi:
            raise self.fail(name, f"is out of range (got {value[:40]}; the runtime reads it as a "
                            f"{'64' if hi > INT32_MAX else '32'}-bit integer)", rule="out-of-range")
        return number

    def optional_integer(self, name: str, lo: int = INT32_MIN, hi: int = INT32_MAX) -> int | None:
        return self.integer(name, lo, hi) if name in self.node.attrs else None


_STEP_TYPES = {t.value: t for t in StepType}
_BUFFERS = {b.value: b for b in Buffer}


def _build_program(root: _Node, where: str, issues: tuple[SourceIssue, ...]) -> Program:
    if root.name != "algo":
        raise XmlLoadError(f"the top element is <{root.name}>, not <algo>", where=where, line=root.line,
                           rule="missing-element")
    algo = _Reader(root, where)
    algo.require(_ALGO_REQUIRED)
    gpus = tuple(_build_gpu(node, where) for node in root.children if node.name == "gpu")
    return Program(
        name=root.attrs.get("name"),
        coll=algo.text("coll"),
        ngpus=algo.integer("ngpus"),
        nchunksperloop=algo.integer("nchunksperloop"),
        nchannels=algo.integer("nchannels"),
        proto=algo.text("proto"),
        inplace=algo.integer("inplace"),
        gpus=gpus,
        outofplace=algo.optional_integer("outofplace"),
        min_bytes=algo.optional_integer("minBytes", INT64_MIN, INT64_MAX),
        max_bytes=algo.optional_integer("maxBytes", INT64_MIN, INT64_MAX),
        nthreads=algo.optional_integer("nthreads"),
        root=algo.optional_integer("root") or 0,
        attributes=tuple(root.attrs),
        source=where,
        source_issues=issues,
        line=root.line,
    )


def _build_gpu(node: _Node, where: str) -> Gpu:
    gpu = _Reader(node, where)
    gpu.require(_GPU_REQUIRED)
    tbs = tuple(_build_tb(child, where) for child in node.children if child.name == "tb")
    return Gpu(id=gpu.integer("id"), i_chunks=gpu.integer("i_chunks"), o_chunks=gpu.integer("o_chunks"),
               s_chunks=gpu.integer("s_chunks"), threadblocks=tbs, line=node.line)


def _build_tb(node: _Node, where: str) -> Threadblock:
    tb = _Reader(node, where)
    tb.require(_TB_REQUIRED)
    steps = tuple(_build_step(child, where) for child in node.children if child.name == "step")
    return Threadblock(id=tb.integer("id"), send=tb.integer("send"), recv=tb.integer("recv"),
                       chan=tb.integer("chan"), steps=steps, line=node.line)


def _build_step(node: _Node, where: str) -> Step:
    step = _Reader(node, where)
    step.require(_STEP_REQUIRED)
    kind = _STEP_TYPES.get(step.text("type"))
    if kind is None:
        raise step.fail("type", f"has unknown value {step.text('type')[:20]!r} (expected one of "
                        f"{', '.join(_STEP_TYPES)})", rule="unknown-step-type")
    buffers = []
    for name in ("srcbuf", "dstbuf"):
        buffer = _BUFFERS.get(step.text(name))
        if buffer is None:
            raise step.fail(name, f"has unknown value {step.text(name)[:20]!r} (expected i, o or s)",
                            rule="unknown-buffer")
        buffers.append(buffer)
    return Step(index=step.integer("s"), type=kind, srcbuf=buffers[0], srcoff=step.integer("srcoff"),
                dstbuf=buffers[1], dstoff=step.integer("dstoff"), cnt=step.integer("cnt"),
                depid=step.integer("depid"), deps=step.integer("deps"), hasdep=step.integer("hasdep"),
                line=node.line)
