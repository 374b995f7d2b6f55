"""The rest of the suite runs on two xdist workers (tests/tiers.py): each daemon or image
belongs to one group's worker, and a test goes where what it asks for lives."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests import tiers


def _item(file: str, name: str, fixtures: tuple[str, ...] = (), **params: Any) -> Any:
    base = name.partition("[")[0]
    callspec = SimpleNamespace(params=params) if params else None
    return SimpleNamespace(
        path=Path("tests/x") / file,
        name=name,
        originalname=base,
        fixturenames=list(fixtures),
        callspec=callspec,
    )


def test_every_backend_fixture_has_one_owner() -> None:
    """A daemon fixture with no owner would be brought up by both workers' sessions, and
    the first to end would stop it under the other's tests."""
    owned = [tiers.VM_FIXTURES, tiers.OTHER_FIXTURES, tiers.ALONE_FIXTURES]
    assert tiers.BACKEND_FIXTURES <= set().union(*owned)
    for i, a in enumerate(owned):
        for b in owned[i + 1 :]:
            assert not a & b


def test_a_test_goes_where_what_it_asks_for_lives() -> None:
    g = tiers.group
    assert g(_item("test_contract.py", "test_x[libvirt-exec]", driver="libvirt")) == tiers.VMS
    assert g(_item("test_contract.py", "test_x[docker-exec]", driver="docker")) == tiers.OTHERS
    assert g(_item("test_contract.py", "test_x[swerex[local]]", d="swerex[local]")) == "others"
    assert g(_item("test_a.py", "test_boots_a_microvm")) == tiers.VMS
    assert g(_item("test_a.py", "test_uses", ("libvirtd",))) == tiers.VMS
    assert g(_item("test_a.py", "test_uses", ("dockerd", "tmp_path"))) == tiers.OTHERS
    assert g(_item("test_vm_libvirt.py", "test_anything")) == tiers.VMS
    # the machine alone: global counts, and what needs both workers' daemons
    assert g(_item("test_probe_cli.py", "test_anything")) == "alone"
    assert g(_item("test_probe_stage.py", "test_over_ssh[x]", ("ssh_doc",), c="x")) == "alone"
    assert g(_item("test_a.py", "test_both", ("x_doc", "dockerd", "libvirtd"))) == "alone"
    # a word inside another word is not a VM's name
    assert g(_item("test_a.py", "test_environments_move", d="process_vm")) == tiers.OTHERS
