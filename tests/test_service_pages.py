"""The service's pages a person opens: /docs renders Swagger UI from the installed package (no
CDN, so it works offline), and a gate-only server answers /answer with a 404 that says why."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from retrieval_gate.gates.trivial import always_gate
from retrieval_gate.rag.service import create_app


def test_docs_page_loads_every_asset_from_the_server_itself():
    with TestClient(create_app(always_gate())) as client:
        page = client.get("/docs")
        assert page.status_code == 200 and "swagger-ui" in page.text
        urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
        urls += re.findall(r"""url: ?["']([^"']+)["']""", page.text)
        assert urls and not [u for u in urls if "://" in u or u.startswith("//")], urls
        for url in urls:  # relative to /docs, as a browser resolves them
            asset = client.get("/" + url.lstrip("/"))
            assert asset.status_code == 200 and asset.content, url
        assert client.get("/openapi.json").json()["paths"]
        assert client.get("/redoc").status_code == 404  # its page would need a CDN too


def test_gate_mode_answer_is_404_with_a_reason():
    with TestClient(create_app(always_gate())) as client:
        r = client.post("/answer", json={"questions": ["Who wrote Hamlet?"]})
    assert r.status_code == 404
    assert "--mode gate" in r.json()["detail"] and "/score" in r.json()["detail"]
    assert "/answer" not in create_app(always_gate()).openapi()["paths"]
