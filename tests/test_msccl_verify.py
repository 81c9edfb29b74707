"""The verifier, rule by rule, on small hand-written programs (each breaks exactly one thing)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from cli_runner import only_json, run

from taccl_py.msccl import Gpu, Program, Step, StepType, Threadblock, parse_program, verify_program
from taccl_py.msccl.ir import Buffer


def step(s: int, kind: str, src: str = "o", srcoff: int = 0, dst: str = "o", dstoff: int = 0, cnt: int = 1,
         depid: int = -1, deps: int = -1, hasdep: int = 0) -> str:
    return (f'<step s="{s}" type="{kind}" srcbuf="{src}" srcoff="{srcoff}" dstbuf="{dst}" dstoff="{dstoff}" '
            f'cnt="{cnt}" depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>')


def tb(tb_id: int, send: int, recv: int, steps: Iterable[str], chan: int = 0) -> str:
    body = "\n".join(f"      {s}" for s in steps)
    return f'    <tb id="{tb_id}" send="{send}" recv="{recv}" chan="{chan}">\n{body}\n    </tb>'


def gpu(gpu_id: int, tbs: Iterable[str], i: int = 0, o: int = 2, s: int = 0) -> str:
    body = "\n".join(tbs)
    return f'  <gpu id="{gpu_id}" i_chunks="{i}" o_chunks="{o}" s_chunks="{s}">\n{body}\n  </gpu>'


def algo(gpus: Iterable[str], coll: str = "allgather", ngpus: int = 2, chunks: int = 2, nchannels: int = 1,
         extra: str = 'inplace="1" outofplace="0" minBytes="0" maxBytes="0"', proto: str = "Simple") -> str:
    body = "\n".join(gpus)
    return (f'<algo name="t" proto="{proto}" nchannels="{nchannels}" nchunksperloop="{chunks}" ngpus="{ngpus}" '
            f'coll="{coll}" {extra}>\n{body}\n</algo>\n')


def pair_allgather(rank0: list[str] | None = None, rank1: list[str] | None = None, **kw: object) -> str:
    """2-rank in-place allgather: each rank sends its block and receives the other one."""
    r0 = rank0 if rank0 is not None else [tb(0, 1, 1, [step(0, "s", srcoff=0), step(1, "r", dstoff=1)])]
    r1 = r1_default() if rank1 is None else rank1
    return algo([gpu(0, r0), gpu(1, r1)], **kw)  # type: ignore[arg-type]


def r1_default() -> list[str]:
    return [tb(0, 0, 0, [step(0, "s", srcoff=1), step(1, "r", dstoff=0)])]


def check(text: str, dialect: str | None = None) -> tuple[bool, bool, set[str]]:
    report = verify_program(parse_program(text, where="t.xml"), dialect)
    return report.valid, report.correct, report.rules


def test_the_base_program_is_valid_and_correct() -> None:
    assert check(pair_allgather()) == (True, True, set())
    assert check(pair_allgather(), "v1") == (True, True, set())


@pytest.mark.parametrize(("rank0", "rule"), [
    ([tb(0, 1, 1, [step(5, "s"), step(1, "r", dstoff=1)])], "step-index"),
    ([tb(0, 1, 1, [step(0, "s", cnt=72), step(1, "r", dstoff=1, cnt=72)])], "count"),
    ([tb(0, 1, 1, [step(0, "s", srcoff=2), step(1, "r", dstoff=1)])], "offset-range"),
    ([tb(0, 1, 1, [step(0, "s"), step(1, "r", dstoff=1, hasdep=2)])], "hasdep"),
    ([tb(0, 1, 1, [step(0, "s", depid=200, deps=0), step(1, "r", dstoff=1)])], "field-width"),
    ([tb(0, 1, 1, [step(0, "s"), step(1, "ra", dstoff=1)])], "ra-step"),
    ([tb(0, 0, 1, [step(0, "s"), step(1, "r", dstoff=1)])], "peer"),
    ([tb(0, 5, 1, [step(0, "s"), step(1, "r", dstoff=1)])], "peer"),
    ([tb(0, 1, 1, [step(0, "s"), step(1, "r", dstoff=1)], chan=1)], "channel"),
    ([tb(0, 1, 1, [step(0, "s"), step(1, "r", dstoff=1)], chan=40)], "channel"),
    ([tb(1, 1, 1, [step(0, "s"), step(1, "r", dstoff=1)])], "tb-ids"),
    ([tb(0, -1, 1, [step(0, "s"), step(1, "r", dstoff=1)])], "missing-peer"),
    ([tb(0, 1, 1, [step(0, "s"), step(1, "nop"), step(2, "r", dstoff=1)])], "nop"),
    ([tb(0, 1, 1, [step(0, "s"), step(1, "r", dstoff=1), step(2, "nop", depid=1, deps=0)]),
      tb(1, -1, -1, [step(0, "cpy", srcoff=0, dstoff=0, hasdep=1)])], "nop"),
    ([tb(0, 1, 1, [step(0, "s"), step(1, "nop", depid=1, deps=0), step(2, "r", dstoff=1)]),
      tb(1, -1, -1, [step(0, "cpy", hasdep=1)])], "dependency-carrier"),
    ([tb(0, 1, 1, [step(0, "s", depid=3, deps=0), step(1, "r", dstoff=1)])], "dangling-dependency"),
    ([tb(0, 1, 1, [step(0, "s", depid=0, deps=1), step(1, "r", dstoff=1, hasdep=1)])], "dangling-dependency"),
    ([tb(0, 1, 1, [step(0, "s", depid=1, deps=4), step(1, "r", dstoff=1)]), tb(1, -1, -1, [step(0, "cpy")])],
     "dangling-dependency"),
    ([tb(0, 1, 1, [step(0, "s", depid=1, deps=0), step(1, "r", dstoff=1)]), tb(1, -1, -1, [step(0, "cpy")])],
     "dangling-dependency"),
    ([tb(0, 1, -1, [step(0, "s")]), tb(1, 1, 1, [step(0, "r", dstoff=1)])], "duplicate-connection"),
    ([tb(0, 1, 1, [step(0, "s", cnt=2), step(1, "r", dstoff=1)])], "count-mismatch"),
    ([tb(0, 1, 1, [step(0, "s"), step(1, "s"), step(2, "r", dstoff=1)])], "step-count-mismatch"),
])
def test_each_rule(rank0: list[str], rule: str) -> None:
    valid, correct, rules = check(pair_allgather(rank0))
    assert rule in rules
    assert not valid and not correct


def test_both_ranks_receiving_first_deadlock() -> None:
    text = pair_allgather([tb(0, 1, 1, [step(0, "r", dstoff=1), step(1, "s")])],
                          [tb(0, 0, 0, [step(0, "r", dstoff=0), step(1, "s", srcoff=1)])])
    report = verify_program(parse_program(text))
    assert not report.valid and report.rules == {"deadlock"}
    assert "cycle" in report.errors[0].message
    # one of them sending first is fine: sends are buffered
    assert check(pair_allgather([tb(0, 1, 1, [step(0, "r", dstoff=1), step(1, "s")])])) == (True, True, set())


def test_unmatched_connection_in_both_directions() -> None:
    text = pair_allgather(rank1=[tb(0, 0, 0, [step(0, "s", srcoff=1), step(1, "r", dstoff=0)], chan=1)],
                          nchannels=2)
    report = verify_program(parse_program(text))
    assert [e.rule for e in report.errors].count("unmatched-connection") == 4
    assert {e.rank for e in report.errors} == {0, 1}


def test_algo_level_rules() -> None:
    base = pair_allgather()
    assert "missing-attribute" in check(base.replace(' minBytes="0"', ""), "v2")[2]
    assert check(base.replace(' minBytes="0"', ""))[0]  # detected as v1, which needs no minBytes
    assert "missing-attribute" in check(base.replace('name="t" ', ""), "v1")[2]
    assert "protocol" in check(base.replace('proto="Simple"', 'proto="simple"'))[2]
    assert "mode" in check(base.replace('inplace="1"', 'inplace="0"'))[2]
    assert "size-range" in check(base.replace('minBytes="0" maxBytes="0"', 'minBytes="10" maxBytes="5"'))[2]
    assert "algo-attribute" in check(base.replace('nchannels="1"', 'nchannels="0"'))[2]
    assert "algo-attribute" in check(base.replace('name="t"', 'name="t" nthreads="100"'), "v1")[2]
    assert "gpu-ids" in check(base.replace('ngpus="2"', 'ngpus="3"'))[2]
    assert "gpu-ids" in check(base.replace('<gpu id="1"', '<gpu id="0"'))[2]
    assert "chunk-count" in check(base.replace('<gpu id="0" i_chunks="0"', '<gpu id="0" i_chunks="3"'), "v1")[2]
    assert "chunk-count" not in check(base.replace('<gpu id="0" i_chunks="0"', '<gpu id="0" i_chunks="1"'),
                                      "v1")[2]
    rs = pair_allgather(coll="reduce_scatter")
    assert "unknown-collective" in check(rs, "v2")[2]
    assert "unknown-collective" in check(pair_allgather(coll="reducescatter"), "v1")[2]


def test_dialect_limits_on_steps_and_threadblocks() -> None:
    copies = [step(k, "cpy", srcoff=0, dstoff=0) for k in range(65)]
    local = tb(1, -1, -1, copies)
    text = pair_allgather([tb(0, 1, 1, [step(0, "s"), step(1, "r", dstoff=1)]), local])
    assert "step-limit" in check(text, "v2")[2]
    assert "step-limit" not in check(text, "v1")[2]
    many = [tb(0, 1, 1, [step(0, "s"), step(1, "r", dstoff=1)])] + [
        tb(k, -1, -1, [step(0, "cpy")]) for k in range(1, 217)]
    assert "tb-limit" in check(pair_allgather(many), "v1")[2]
    assert "tb-limit" not in check(pair_allgather(many), "v2")[2]
    dense = [tb(0, 1, 1, [step(0, "s"), step(1, "r", dstoff=1)])] + [
        tb(k, -1, -1, [step(j, "cpy") for j in range(64)]) for k in range(1, 65)]
    assert "node-limit" in check(pair_allgather(dense))[2]


def test_too_many_peers_on_one_channel() -> None:
    n = 34
    steps = (Step(0, StepType.SEND, Buffer.OUTPUT, 0, Buffer.OUTPUT, 0, 1),)
    tbs = tuple(Threadblock(k, k + 1, -1, 0, steps) for k in range(n - 1))
    gpus = (Gpu(0, 0, n, 0, tbs), *(Gpu(r, 0, n, 0, ()) for r in range(1, n)))
    program = Program("t", "allgather", n, n, 1, "Simple", 1, gpus, 0, 0, 0,
                      attributes=("ngpus", "nchunksperloop", "nchannels", "proto", "coll", "inplace", "outofplace",
                                  "minBytes", "maxBytes"))
    assert "channel-peers" in verify_program(program).rules


def test_dependency_on_a_step_without_flag_but_a_later_flag_is_a_note() -> None:
    rank0 = [tb(0, 1, 1, [step(0, "s", depid=1, deps=0), step(1, "r", dstoff=1)]),
             tb(1, -1, -1, [step(0, "cpy"), step(1, "cpy", hasdep=1)])]
    report = verify_program(parse_program(pair_allgather(rank0)))
    assert report.valid and report.correct
    assert any("dependency-flag" in note for note in report.notes)


def test_re_fusion_with_different_counts() -> None:
    rank0 = [tb(0, 1, 1, [step(0, "s"), step(1, "r", dstoff=1)]),
             tb(1, -1, -1, [step(0, "re", src="s", srcoff=0, dstoff=0, cnt=1, depid=0, deps=1),
                            step(1, "re", src="s", srcoff=1, dstoff=0, cnt=2)])]
    text = pair_allgather(rank0).replace('<gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0"',
                                         '<gpu id="0" i_chunks="0" o_chunks="2" s_chunks="3"')
    assert "re-fusion" in check(text)[2]


# ------------------------------------------------------------------ data
def test_data_race_between_unordered_threadblocks() -> None:
    rank0 = [tb(0, 1, 1, [step(0, "s"), step(1, "r", dstoff=1)]),
             tb(1, -1, -1, [step(0, "cpy", srcoff=0, dstoff=1)])]  # writes o[1] while tb 0 receives into it
    valid, correct, rules = check(pair_allgather(rank0))
    assert valid and not correct and "data-race" in rules


def test_ordering_the_same_copy_removes_the_race() -> None:
    rank0 = [tb(0, 1, 1, [step(0, "s", hasdep=1), step(1, "r", dstoff=1, hasdep=1)]),
             tb(1, -1, -1, [step(0, "cpy", srcoff=1, dstoff=1, depid=0, deps=1)])]
    assert check(pair_allgather(rank0)) == (True, True, set())


def test_reading_memory_nobody_wrote_is_garbage() -> None:
    rank0 = [tb(0, 1, 1, [step(0, "s", src="s", srcoff=0), step(1, "r", dstoff=1)])]
    text = pair_allgather(rank0).replace('<gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0"',
                                         '<gpu id="0" i_chunks="0" o_chunks="2" s_chunks="1"')
    report = verify_program(parse_program(text))
    assert report.valid and not report.correct
    (error,) = report.errors
    assert error.rank == 1 and "garbage" in error.message and "before anything wrote it" in error.message


def allreduce_pair(first_rank0: str = "rrc", outofplace: int = 0) -> str:
    """2-rank allreduce of one chunk: exchange and reduce on both sides."""
    rank0 = [tb(0, 1, 1, [step(0, "s", src="i"), step(1, first_rank0, src="i", dst="i")])]
    rank1 = [tb(0, 0, 0, [step(0, "s", src="i"), step(1, "rrc", src="i", dst="i")])]
    return algo([gpu(0, rank0, i=1, o=0), gpu(1, rank1, i=1, o=0)], coll="allreduce", chunks=1,
                extra=f'inplace="1" outofplace="{outofplace}" minBytes="0" maxBytes="0"')


def test_allreduce_and_its_mistakes() -> None:
    assert check(allreduce_pair()) == (True, True, set())
    valid, correct, rules = check(allreduce_pair(first_rank0="r"))
    assert valid and not correct and rules == {"wrong-result"}
    report = verify_program(parse_program(allreduce_pair(first_rank0="r")))
    assert "missing rank 0 chunk 0" in report.errors[0].message
    # claiming out-of-place too: the result never reaches the output buffer there
    report = verify_program(parse_program(allreduce_pair(outofplace=1)))
    assert report.modes == ("inplace", "outofplace") and not report.correct
    assert all(e.message.startswith("out-of-place") for e in report.errors)


def test_double_reduction_is_caught() -> None:
    rank0 = [tb(0, 1, 1, [step(0, "s", src="i"), step(1, "rrc", src="i", dst="i", hasdep=1)]),
             tb(1, -1, -1, [step(0, "re", src="i", dst="i", depid=0, deps=1)])]  # adds i[0] into itself
    rank1 = [tb(0, 0, 0, [step(0, "s", src="i"), step(1, "rrc", src="i", dst="i")])]
    text = algo([gpu(0, rank0, i=1, o=0), gpu(1, rank1, i=1, o=0)], coll="allreduce", chunks=1)
    report = verify_program(parse_program(text))
    assert report.valid and not report.correct
    assert "reduces the contribution of rank 0 chunk 0, rank 1 chunk 0 a second time" in report.errors[0].message
    assert "contribution 0 " not in report.errors[0].message


def test_custom_collectives_cannot_be_checked() -> None:
    text = pair_allgather(coll="custom", extra='inplace="1"')
    report = verify_program(parse_program(text))
    assert report.dialect == "v1" and report.valid and not report.correct
    assert report.rules == {"unchecked-collective"}


def test_nop_dependencies_follow_the_runtime_counter() -> None:
    """Two nops then a step: three waits, and the kernel's step counter stays equal to the position."""
    rank0 = [tb(0, 1, 1, [step(0, "s"), step(1, "r", dstoff=1)]),
             tb(1, -1, -1, [step(k, "cpy", dst="s", dstoff=k, hasdep=1) for k in range(3)]),
             tb(2, -1, -1, [step(0, "nop", depid=1, deps=0), step(1, "nop", depid=1, deps=1),
                            step(2, "cpy", src="s", srcoff=2, dst="s", dstoff=3, depid=1, deps=2, hasdep=1)]),
             tb(3, -1, -1, [step(0, "cpy", src="s", srcoff=3, dst="s", dstoff=4, depid=2, deps=2)])]

    def with_scratch(text: str) -> str:
        return text.replace('<gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0"',
                            '<gpu id="0" i_chunks="0" o_chunks="2" s_chunks="5"')

    assert check(with_scratch(pair_allgather(rank0))) == (True, True, set())
    # waiting for tb 2 step 1 (a nop) is satisfied once its step 2 publishes: legal, but noted
    rank0[-1] = tb(3, -1, -1, [step(0, "cpy", src="s", srcoff=3, dst="s", dstoff=4, depid=2, deps=1)])
    report = verify_program(parse_program(with_scratch(pair_allgather(rank0))))
    assert report.correct and report.notes
    # waiting for a position the flag of tb 2 can never reach (it publishes 2) is a hang
    rank0[-1] = tb(3, -1, -1, [step(0, "cpy", src="s", srcoff=3, dst="s", dstoff=4, depid=2, deps=3)])
    assert "dangling-dependency" in check(with_scratch(pair_allgather(rank0)))[2]
    # without the dependency the copy reads s[3] racing with tb 2's write
    rank0[-1] = tb(3, -1, -1, [step(0, "cpy", src="s", srcoff=3, dst="s", dstoff=4)])
    assert check(with_scratch(pair_allgather(rank0)))[1:] == (False, {"data-race"})


def chained_copy_program() -> str:
    """tb 2 reads o[1] after tb 0 received it, ordered only through tb 1 (a chain of two dependencies)."""
    rank0 = [tb(0, 1, 1, [step(0, "s"), step(1, "r", dstoff=1, hasdep=1)]),
             tb(1, -1, -1, [step(0, "cpy", srcoff=1, dst="s", dstoff=0, depid=0, deps=1, hasdep=1)]),
             tb(2, -1, -1, [step(0, "cpy", srcoff=1, dst="s", dstoff=1, depid=1, deps=0)])]
    return pair_allgather(rank0).replace('<gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0"',
                                         '<gpu id="0" i_chunks="0" o_chunks="2" s_chunks="2"')


def round_trip_program() -> str:
    """Rank 0 rewrites o[0] (same value) in tb 1 after tb 0 sent it: ordered only through rank 1's receive and
    send, which needs the search over every rank."""
    rank0 = [tb(0, 1, -1, [step(0, "s")]), tb(1, -1, 1, [step(0, "r", dstoff=1), step(1, "cpy", srcoff=0)])]
    rank1 = [tb(0, 0, 0, [step(0, "r", dstoff=0), step(1, "s", srcoff=1)])]
    return pair_allgather(rank0, rank1)


def test_orderings_through_chains_are_found() -> None:
    assert check(chained_copy_program()) == (True, True, set())
    assert check(round_trip_program()) == (True, True, set())
    # without rank 1's relay the rewrite races with the send
    rank0 = [tb(0, 1, 1, [step(0, "s"), step(1, "r", dstoff=1)]), tb(1, -1, -1, [step(0, "cpy", srcoff=0)])]
    assert check(pair_allgather(rank0))[1:] == (False, {"data-race"})


def test_a_race_check_that_cannot_finish_makes_the_verdict_unknown(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    import taccl_py.msccl.verify as verify_module

    monkeypatch.setattr(verify_module, "_RACE_SEARCH_FACTOR", 0)
    monkeypatch.setattr(verify_module, "_RACE_SEARCH_BASE", 0)
    report = verify_program(parse_program(round_trip_program()))
    assert report.valid and not report.correct and report.verdict == "unknown"
    assert report.rules == {"unchecked-races"} and report.to_dict()["verdict"] == "unknown"
    path = tmp_path / "chain.xml"
    path.write_text(round_trip_program())
    code, out, _ = run(["verify", str(path)], capsys)
    assert code == 3 and "correct: unknown" in out
    code, out, _ = run(["verify", str(path), "--json"], capsys)
    data = only_json(out)
    assert code == 3 and data["correct"] is False and data["verdict"] == "unknown"
