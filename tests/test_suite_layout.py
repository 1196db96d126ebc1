"""How `make test` splits the suite over pytest-xdist workers (`--dist loadgroup`): the group a
test carries decides its worker (tests/conftest.py). One group holds every test of the vLLM
engine, so the session starts one engine, not one per worker; every other test keeps to its
module's group, so a module fixture (a training run, an export) is built once."""

from __future__ import annotations

from conftest import VLLM_FIXTURES


def group_of(item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return mark.args[0] if mark.args else mark.kwargs.get("name")


def test_engine_tests_share_one_group_and_the_others_keep_to_their_module(request):
    items = request.session.items
    assert request.node in items
    for item in items:
        engine = set(item.fixturenames) & VLLM_FIXTURES
        want = "vllm" if engine else item.nodeid.split("::")[0]
        assert group_of(item) == want, item.nodeid
