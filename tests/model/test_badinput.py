"""Bad input (issue 21): every reader checks types and ranges against one schema, every
input is bounded, and a mistake is one line naming the file, line and field (exit 2)."""

from __future__ import annotations

import os

import orjson
import pytest

from rtax_tui.commands.cli import main
from rtax_tui.engine.profile import ProfileError, load_profile
from rtax_tui.model.events import EVENT_CHECKS, EVENT_SCHEMA, check_event
from rtax_tui.model.recording import RecordingError, read_recording

HEADER = {
    "type": "run", "t_ns": 0, "format": "rtax/1", "run_id": "r", "started_at": "x",
    "seed": 1, "argv": [], "profile": {"name": "p"}, "hosts": {},
}  # fmt: skip
PHASE = {"type": "phase", "t_ns": 2, "trial": 1, "name": "create", "dur_ns": 5, "ok": True}


def write_lines(path, events) -> None:
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))


@pytest.mark.parametrize(
    "value, words",
    [
        ("5", "expected an integer 0..2**63-1, got '5'"),
        (None, "got null"),
        ([1], "got an array"),
        (2**63, "got an integer of 64 bits"),
        (-1, "got -1"),
        (1.5, "got 1.5"),
        (True, "got True"),
    ],
)
def test_a_duration_of_the_wrong_type_names_file_line_and_field(tmp_path, value, words):
    path = tmp_path / "r.jsonl"
    write_lines(path, [HEADER, {**PHASE, "dur_ns": value}])
    with pytest.raises(RecordingError) as exc:
        read_recording(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}:2: phase.dur_ns: expected an integer 0..2**63-1, ")
    assert msg.endswith(words)


def test_the_fast_check_and_the_worded_one_agree():
    good = {**PHASE}
    assert EVENT_CHECKS["phase"](good) and check_event(good) is None
    for etype, (required, optional) in EVENT_SCHEMA.items():
        for field in (*required, *optional):
            ev = {"type": etype, **dict.fromkeys(required, None), field: {"x": 1}}
            kind = {**required, **optional}[field]
            if kind in ("dict", "dict?", "any"):
                continue
            assert not EVENT_CHECKS[etype](ev)
            assert check_event(ev) is not None


def test_inputs_that_are_not_regular_files_are_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(RecordingError, match="not a regular file"):
        read_recording(fifo)
    with pytest.raises(ProfileError, match="not a regular file"):
        load_profile(fifo)
    with pytest.raises(RecordingError, match="a directory"):
        read_recording(tmp_path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[run]\ntrials = 99999999999999999999\n", ":2: run.trials: at most 100000"),
        ("[run]\nseed = 18446744073709551615\n", ":2: run.seed: at most 9223372036854775807"),
        ("\n[capacity]\ncpus = 0\n", ":3: capacity.cpus: must be at least 0.01"),
        ("[capacity]\nbatches = 0\n", ":2: capacity.batches: must be at least 1"),
        ("[timeouts]\naction = nan\n", ":2: timeouts.action: expected a finite number"),
        ("[timeouts]\nbarrier = inf\n", ":2: timeouts.barrier: expected a finite number"),
        ("[pool]\nsize = 9223372036854775808\n", ":2: pool.size: at most 4096"),
        ('[hosts.a]\naddress = "x"\nport = 70000\n', ":3: hosts.a.port: at most 65535"),
        ("x = " + "[" * 600 + "]" * 600 + "\n", ": not valid TOML: nested too deeply"),
    ],
)
def test_profile_numbers_are_bounded_at_their_own_line(tmp_path, text, message):
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert str(exc.value).startswith(f"{path}{message}")


@pytest.mark.parametrize(
    "text", ['# c\nname = "x"\nrun.trials = 0\n', "# c\n\nrun = { seed = 1, trials = 0 }\n"]
)
def test_dotted_keys_and_inline_tables_are_found_at_their_line(tmp_path, text):
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=r"p.toml:3: run.trials: must be at least 1"):
        load_profile(path)


def test_a_profile_that_is_not_utf8_names_its_line(tmp_path):
    path = tmp_path / "p.toml"
    path.write_bytes(b'[run]\nname = "\xff"\n')
    with pytest.raises(ProfileError, match=r"p.toml:2: the profile is not UTF-8"):
        load_profile(path)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["run", "t0", "--trials", "9223372036854775807"],
            "--trials: expected an integer 1..100000",
        ),
        (["run", "t0", "--trials", "x"], "--trials: expected an integer 1..100000, got 'x'"),
        (["run", "t0", "--seed", "9" * 5000], "--seed: expected an integer"),
        (["run", "t0", "--sizes", "1,0"], "--sizes: each size: expected an integer 1..4096"),
        (["run", "t0", "--pool", str(2**70)], "--pool: expected an integer 1..4096"),
        (["traj", "prepare", "x", "--repeat", str(2**70)], "--repeat: expected an integer 1..1000"),
        # an empty run id matched every run's leftovers: `cleanup --run ""` cleaned them all
        (["cleanup", "--run", ""], "--run: expected a run id"),
        (["cleanup", "--run", "../x"], "--run: expected a run id"),
    ],
)
def test_command_line_values_are_bounded_in_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "usage" not in err and "_positive" not in err


def mini(path, content: str, output: str, regex: str | None = None):
    doc: dict = {
        "trajectory_format": "mini-swe-agent-1",
        "info": {"config": {"environment": {"cwd": "/r"}}},
        "messages": [
            {"role": "assistant", "content": content},
            {"role": "user", "content": output},
        ],
    }
    if regex is not None:
        doc["info"]["config"]["agent"] = {"action_regex": regex}
    path.write_bytes(orjson.dumps(doc))
    return path


def test_a_trajectory_regex_with_catastrophic_backtracking_runs_in_linear_time(tmp_path):
    import time

    from rtax_tui.engine.traj import read_trajectories

    path = mini(tmp_path / "t.json", "a" * 50_000 + "b", "<returncode>0</returncode>", "(a+)+$")
    t0 = time.monotonic()
    read_trajectories(path)
    assert time.monotonic() - t0 < 5


def test_a_regex_re2_does_not_take_is_one_line_naming_the_field(tmp_path, capsys):
    path = mini(tmp_path / "t.json", "x", "y", r"(a)\1")
    assert main(["traj", "inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert "action_regex" in err and err.count("\n") == 1


def test_a_5000_digit_exit_code_is_unknown_not_a_crash(tmp_path):
    from rtax_tui.engine.traj import read_trajectories

    out = f"<returncode>{'9' * 5000}</returncode>"
    (traj,) = read_trajectories(mini(tmp_path / "t.json", "```bash\nls\n```", out))
    assert [s.exit_code for s in traj.steps] == [None]


def test_a_fifo_given_as_a_trajectory_is_refused_at_once(tmp_path, capsys):
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    assert main(["traj", "inspect", str(fifo)]) == 2
    assert "not a regular file" in capsys.readouterr().err


def test_ssh_urls_without_a_user_or_with_a_huge_port():
    from rtax_tui.hosts.ssh import SSHHost, parse_ssh_url
    from rtax_tui.model.spec import RtaxError

    t = parse_ssh_url("ssh://example")
    assert t.user is None and "username" not in SSHHost(t)._options()  # asyncssh's default
    for url in ("ssh://h:70000", "ssh://h:" + "9" * 5000):
        with pytest.raises(RtaxError) as exc:
            parse_ssh_url(url)
        assert len(str(exc.value)) < 200


EXAMPLES = __import__("pathlib").Path(__file__).parents[2] / "recordings" / "examples"


def test_plot_never_writes_onto_its_recording_nor_an_existing_file(tmp_path, capsys):
    rec = tmp_path / "r.jsonl"
    rec.write_bytes((EXAMPLES / "t0-local-stage.jsonl").read_bytes())
    before = rec.read_bytes()
    link = tmp_path / "r.svg"
    link.symlink_to(rec)
    for out in (rec, link):
        assert main(["plot", str(rec), "--kind", "cdf", "-o", str(out), "--force"]) == 2
    assert "is the recording" in capsys.readouterr().err
    assert rec.read_bytes() == before
    other = tmp_path / "x.svg"
    other.write_text("mine")
    assert main(["plot", str(rec), "--kind", "cdf", "-o", str(other)]) == 2
    assert "--force" in capsys.readouterr().err and other.read_text() == "mine"


def test_compare_with_no_cell_in_common_is_an_error(capsys):
    a, b = EXAMPLES / "t0-local-stage.jsonl", EXAMPLES / "t2-local-stage.jsonl"
    assert main(["compare", str(a), str(b)]) == 2
    assert "no cell with samples in common" in capsys.readouterr().err


# -- property tests: mutants end in exit 0 or 2 (one line), in time, inputs unchanged ---
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests import mutants  # noqa: E402

SEEDED = settings(
    derandomize=True,  # the same corpus every run: a failure names its seed
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(SEEDED, max_examples=40)
@given(seed=st.integers(0, 2**32))
def test_mutated_recordings_report_compare_project(tmp_path, seed):
    mutants.run_case("recordings", seed, tmp_path)


@settings(SEEDED, max_examples=40)
@given(seed=st.integers(0, 2**32))
def test_mutated_trajectories_inspect_and_prepare(tmp_path, seed):
    mutants.run_case("trajectories", seed, tmp_path)


@settings(SEEDED, max_examples=80)
@given(seed=st.integers(0, 2**32))
def test_mutated_profiles_load_or_fail_in_one_line(tmp_path, seed):
    mutants.run_case("profiles", seed, tmp_path)


@settings(SEEDED, max_examples=60)
@given(data=st.data())
def test_any_value_in_any_field_of_an_event_is_read_or_refused(tmp_path, data):
    """Hypothesis's own JSON values in an event's fields: the recording is refused with
    the line and field named, or read, and then a report of it never fails."""
    from rtax_tui.analysis.report import build_report

    lines = (mutants.EXAMPLES / "t0-local-stage.jsonl").read_bytes().split(b"\n")
    i = data.draw(st.integers(0, len(lines) - 2))
    ev = orjson.loads(lines[i])
    key = data.draw(st.sampled_from(sorted(ev)))
    ev[key] = data.draw(JSON)
    lines[i] = mutants.dumps(ev)
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines))
    try:
        rec = read_recording(path)
    except RecordingError as exc:
        assert f"r.jsonl:{i + 1}: " in str(exc) and "\n" not in str(exc)
        return
    build_report(rec)


@pytest.mark.parametrize("kind", ["recordings", "trajectories"])
def test_exit_status_of_a_mutant_from_a_real_process(tmp_path, kind):
    """A few runs as a person makes them: `rtax` in its own process, bounded in time."""
    import subprocess
    import sys

    argv, inputs = mutants.CASES[kind](7, tmp_path)[0]
    before = inputs[0].read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "rtax_tui", *argv], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode in (0, 2), proc.stderr
    assert "Traceback" not in proc.stderr
    if proc.returncode == 2:
        assert proc.stderr.count("\n") == 1
    assert inputs[0].read_bytes() == before


def test_integers_past_64_bits_in_a_drivers_options_table(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("[run]\ntrials = 3\n[drivers_options.docker]\nx = 99999999999999999999\n")
    with pytest.raises(ProfileError, match=r"p.toml:4: drivers_options.docker.x: integers are"):
        load_profile(path)


@pytest.mark.parametrize("kind", ["report", "traj"])
def test_a_line_nested_100000_deep_is_one_line_not_a_crash(tmp_path, capsys, kind):
    deep = b'{"type":"phase","a":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    path = tmp_path / "x.jsonl"
    head = orjson.dumps(HEADER) + b"\n" if kind == "report" else b""
    path.write_bytes(head + deep)
    argv = ["report", str(path)] if kind == "report" else ["traj", "inspect", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "x.jsonl" in err


OPTIONS = [
    ["run", "t0", "--trials"], ["run", "t0", "--warmup"], ["run", "t0", "--seed"],
    ["run", "t0", "--concurrency"], ["run", "t0", "--pool"], ["run", "t0", "--sizes"],
    ["project", "r.jsonl", "--trajectories"], ["project", "r.jsonl", "--steps"],
    ["traj", "prepare", "x", "--repeat"], ["traj", "prepare", "x", "--max-prefixes"],
    ["traj", "prepare", "x", "--seed"], ["serve", "--port"],
]  # fmt: skip


@settings(SEEDED, max_examples=150)
@given(
    option=st.sampled_from(OPTIONS),
    value=st.integers().map(str)
    | st.text(max_size=30).filter(lambda s: not s.startswith("-"))
    | st.sampled_from(["9" * 5000, "1e3", "0x10", " 5 ", "1,2,0", "nan", "", "٣"]),
)
def test_any_option_value_parses_or_is_one_line(capsys, option, value):
    """Parsing only (no run): a bounded value, or exit 2 with one line naming the option."""
    from rtax_tui.commands.cli import build_parser

    try:
        args = build_parser().parse_args([*option, value])
    except SystemExit as exc:
        assert exc.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and option[-1] in err and "usage" not in err
        return
    for v in vars(args).values():
        for n in v if isinstance(v, tuple) else (v,):
            if isinstance(n, int):
                assert -(2**63) <= n < 2**63


def test_traj_prepare_refuses_more_samples_than_it_holds(tmp_path, capsys):
    msgs = []
    for _ in range(1100):
        msgs += [
            {"role": "assistant", "content": "```bash\nls\n```"},
            {"role": "user", "content": "<returncode>0</returncode>"},
        ]
    doc = {"trajectory_format": "mini-swe-agent-1", "info": {}, "messages": msgs}
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps(doc))
    out = tmp_path / "p.jsonl"
    argv = ["traj", "prepare", str(path), "--repeat", "1000", "--max-prefixes", "5000"]
    assert main([*argv, "-o", str(out)]) == 2
    assert "more than 1000000 samples" in capsys.readouterr().err and not out.exists()


def test_a_run_of_more_trials_than_rtax_plans_is_refused_at_load(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('[run]\ndrivers = ["local"]\nworkloads = ["capacity"]\n'
                    "[capacity]\nsize = 4096\nbatches = 10000\n")  # fmt: skip
    with pytest.raises(ProfileError, match="40964096 trials in one run"):
        load_profile(path)


def test_a_normalized_step_of_the_wrong_type_names_its_field(tmp_path, capsys):
    """seed 1682636654 of tests/mutants.py: a record's output was `true`."""
    assert mutants.run_case("trajectories", 1682636654, tmp_path) is None
