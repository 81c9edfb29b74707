"""Chakra execution traces (mlcommons/chakra, the workload format of ASTRA-sim 2.0).

``schedule_traces`` / ``program_traces`` turn a schedule or an MSCCL program into one trace per rank,
``write_traces`` writes them as ``DIR/PREFIX.RANK.et``, and ``decode_trace`` reads a file back with the
same schema (``et_def.proto``, compiled at import time by :mod:`taccl_py.chakra.schema`).
"""

from taccl_py.chakra.export import RankTrace, program_traces, schedule_traces, trace_path, write_traces
from taccl_py.chakra.schema import chakra_classes, compile_proto
from taccl_py.chakra.trace import CHAKRA_VERSION, TraceNode, attr_value, decode_trace, encode_trace

__all__ = ["CHAKRA_VERSION", "RankTrace", "TraceNode", "attr_value", "chakra_classes", "compile_proto",
           "decode_trace", "encode_trace", "program_traces", "schedule_traces", "trace_path", "write_traces"]
