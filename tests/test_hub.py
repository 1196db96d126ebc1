"""Without a network (the Hub's name does not resolve), a Hub name is looked up in the Hugging
Face cache alone, so one that is not there is refused at once, saying why: `datasets` and
transformers retried the Hub for ~24 s first. The libraries' offline flags are put back."""

from __future__ import annotations

import socket
import time

import pytest

from retrieval_gate.errors import DataError, InputError

NO_HUB = r"Hub cannot be reached from here \(huggingface.co: Name or service not known\)"


@pytest.fixture
def no_dns(monkeypatch):
    import datasets
    from huggingface_hub import constants

    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if host == "huggingface.co":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    monkeypatch.setattr(constants, "ENDPOINT", "https://huggingface.co")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    start = time.monotonic()
    yield
    assert time.monotonic() - start < 10
    assert constants.HF_HUB_OFFLINE is False and datasets.config.HF_HUB_OFFLINE is False


def test_an_hf_questions_spec(no_dns):
    from retrieval_gate.data.user_questions import read_questions

    with pytest.raises(DataError, match=rf"'no-such/set'.* The {NO_HUB}: offline"):
        read_questions("hf:no-such/set@test")


def test_a_generator_or_backbone_hub_name(no_dns):
    from retrieval_gate.generation.model_folders import read_config

    with pytest.raises(InputError, match=rf"not a model transformers knows \(.*; the {NO_HUB}\)"):
        read_config("no-such/model")
