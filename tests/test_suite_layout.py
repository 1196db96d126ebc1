"""How `make test` splits the suite over pytest-xdist workers (`--dist loadgroup`): the group a
test carries decides its worker (tests/conftest.py). One group holds every test of the vLLM
engine, so the session starts one engine, not one per worker; every other test keeps to its
module's group, so a module fixture (a training run, an export) is built once."""

from __future__ import annotations

from conftest import VLLM_FIXTURES, group_of


def test_engine_tests_share_one_group_and_the_others_keep_to_their_module(request):
    items = request.session.items
    assert request.node in items
    for item in items:
        engine = set(item.fixturenames) & VLLM_FIXTURES or item.get_closest_marker("vllm")
        module = item.nodeid.split("::")[0]
        # a module's test may join the engine's group by hand (test_docs' runnable pages)
        assert group_of(item) in (("vllm",) if engine else ("vllm", module)), item.nodeid
    runnable = [i for i in items if i.nodeid.startswith("tests/test_docs.py::test_runnable")]
    assert {group_of(i) for i in runnable} <= {"vllm"}


def test_under_xdist_each_test_carries_its_group_in_its_id(request):
    """The mark alone does nothing: pytest-xdist's worker turns it into an `@group` suffix of
    the test's id in its collection hook, and the scheduler sends equal suffixes to one worker.
    Our marks were added after that hook had run (and pytest 9.2's test ids ignore the suffix
    xdist sets), so no test had one and the engine's tests (and every module) were spread over
    the workers. Serially there is nothing to check."""
    if not request.config.getoption("loadgroup", False):
        return
    order: list[str] = []
    slow: dict[str, int] = {}
    for item in request.session.items:
        assert item.nodeid.endswith(f"@{group_of(item)}"), item.nodeid
        if not order or order[-1] != group_of(item):
            assert group_of(item) not in order, f"group {group_of(item)} is split"
            order.append(group_of(item))
        slow[group_of(item)] = slow.get(group_of(item), 0) + ("slow" in item.keywords)
    # the scheduler hands groups out in this order: the ones with the most slow tests first
    assert [slow[g] for g in order] == sorted(slow.values(), reverse=True)
