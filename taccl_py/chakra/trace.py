"""Chakra trace files: one ``GlobalMetadata`` message, then ``Node`` messages, each after its length as a varint.

That is the framing Chakra's ``protolib.encodeMessage`` writes and ASTRA-sim's feeder reads (a length of 0
reads as the end of the file, so no message written here is empty). :func:`encode_trace` builds the bytes
from plain :class:`TraceNode` records; :func:`decode_trace` reads a file back into messages.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taccl_py.chakra.schema import chakra_classes
from taccl_py.errors import InputError
from taccl_py.inputs import read_file_bytes

__all__ = ["CHAKRA_VERSION", "Attr", "TraceNode", "attr_value", "decode_trace", "encode_trace", "read_varint",
           "write_varint"]

CHAKRA_VERSION = "0.0.4"
"""The ``GlobalMetadata.version`` written (Chakra's execution-trace schema version)."""

Attr = tuple[str, str, Any]
"""``(name, value field of AttributeProto, value)``, e.g. ``("comm_src", "int32_val", 3)``."""


@dataclass(frozen=True)
class TraceNode:
    """One node of one rank's trace, in the schema's terms (``kind`` is a ``NodeType`` name)."""

    id: int
    name: str
    kind: str
    data_deps: tuple[int, ...] = ()
    ctrl_deps: tuple[int, ...] = ()
    duration_micros: int = 0
    attrs: tuple[Attr, ...] = ()


def write_varint(value: int) -> bytes:
    """Unsigned LEB128, as protobuf frames a length."""
    if value < 0:
        raise ValueError(f"a length is never negative (got {value})")
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(0x80 | bits)
        else:
            out.append(bits)
            return bytes(out)


def read_varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint starting at ``at`` and the position after it; :class:`InputError` when it is cut off."""
    value, shift = 0, 0
    while True:
        if at >= len(data):
            raise InputError("the file ends inside a length prefix")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise InputError("a length prefix is longer than 10 bytes")


def _set_attr(message: Any, attr: Attr, classes: dict[str, Any]) -> None:
    name, field, value = attr
    entry = message.attr.add()
    entry.name = name
    if field.endswith("_list"):
        getattr(entry, field).values.extend(value)
    else:
        setattr(entry, field, value)


def encode_trace(nodes: Sequence[TraceNode], metadata: Sequence[Attr]) -> bytes:
    """The bytes of one trace file: the metadata message, then every node, each length-prefixed."""
    classes = chakra_classes()
    node_types = classes["NodeType"]
    meta = classes["GlobalMetadata"](version=CHAKRA_VERSION)
    for attr in metadata:
        _set_attr(meta, attr, classes)
    chunks = [meta.SerializeToString()]
    for node in nodes:
        message = classes["Node"](id=node.id, name=node.name, type=node_types[node.kind],
                                  data_deps=list(node.data_deps), ctrl_deps=list(node.ctrl_deps),
                                  duration_micros=node.duration_micros)
        for attr in node.attrs:
            _set_attr(message, attr, classes)
        chunks.append(message.SerializeToString())
    out = bytearray()
    for chunk in chunks:
        if not chunk:  # pragma: no cover - every message written carries a version or a name
            raise ValueError("an empty message would read as the end of the file")
        out += write_varint(len(chunk))
        out += chunk
    return bytes(out)


def decode_trace(path: str | os.PathLike[str]) -> tuple[Any, list[Any]]:
    """``(GlobalMetadata, [Node, ...])`` of a trace file; :class:`InputError` naming the file when malformed."""
    where = str(path)
    data = read_file_bytes(path, InputError, what="Chakra trace")
    classes = chakra_classes()
    messages: list[bytes] = []
    at = 0
    try:
        while at < len(data):
            size, at = read_varint(data, at)
            if size == 0:
                break
            if at + size > len(data):
                raise InputError(f"a message of {size} bytes runs past the end of the file")
            messages.append(data[at:at + size])
            at += size
    except InputError as exc:
        raise InputError(exc.detail, where=where) from None
    if not messages:
        raise InputError("holds no GlobalMetadata message", where=where)
    try:
        meta = classes["GlobalMetadata"].FromString(messages[0])
        nodes = [classes["Node"].FromString(m) for m in messages[1:]]
    except Exception as exc:  # protobuf's DecodeError
        raise InputError(f"not a Chakra trace: {exc}", where=where) from None
    return meta, nodes


def attr_value(message: Any, name: str) -> Any:
    """The value of the attribute ``name`` of a decoded node or metadata message (None when absent)."""
    for entry in message.attr:
        if entry.name == name:
            field = entry.WhichOneof("value")
            value = getattr(entry, field)
            return list(value.values) if field.endswith("_list") else value
    return None
