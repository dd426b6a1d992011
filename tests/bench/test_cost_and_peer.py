"""bench.cost (prices as dated data, cost of 1,000 decisions) and bench.peer / bench.llama_server
(the stock llama-server beside ours)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from bench import cost, peer
from bench.llama_server import LlamaServer, unavailable


def test_the_shipped_prices_are_dated_and_complete():
    prices = cost.load_prices()
    assert prices["as_of"] and prices["region"] and prices["currency"] == "USD" and prices["check"].startswith("https://")
    types = {row["type"] for row in prices["instances"]}
    assert {"ml.c6i.8xlarge", "ml.g6e.xlarge", "ml.g6.2xlarge", "ml.g5.2xlarge", "ml.g4dn.2xlarge"} <= types  # the template's


def test_cost_of_a_thousand_decisions_follows_throughput_and_price(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"as_of": "2026-01-01", "region": "r", "currency": "USD", "check": "https://x", "instances": [
        {"type": "cpu.small", "vcpus": 2, "gpu": None, "usd_per_hour": 0.36},
        {"type": "cpu.big", "vcpus": 8, "gpu": None, "usd_per_hour": 2.88},
        {"type": "gpu.one", "vcpus": 4, "gpu": "G", "usd_per_hour": 3.6},
    ]}))
    report = cost.costs(decisions_per_second=1.0, threads=2, on_gpu=False, prices=cost.load_prices(path))
    by = {row["type"]: row for row in report["instances"]}
    # $0.36 an hour at 1 decision/s: 3600 decisions for $0.36, so $0.10 per 1,000
    assert by["cpu.small"]["usd_per_1000"] == pytest.approx(0.10)
    assert by["cpu.big"]["decisions_per_second"] == pytest.approx(4.0)  # scaled by vCPUs
    assert by["cpu.big"]["usd_per_1000"] == pytest.approx(0.20)
    assert report["cheapest_cpu"] == "cpu.small"
    # the GPU type was not measured; it beats cpu.small per decision only beyond 10x its throughput
    assert "usd_per_1000" not in by["gpu.one"]
    assert by["gpu.one"]["break_even_x_cpu"] == pytest.approx(10.0)
    on_gpu = cost.costs(decisions_per_second=100.0, threads=2, on_gpu=True, prices=cost.load_prices(path))
    assert {r["type"]: r.get("usd_per_1000") for r in on_gpu["instances"]}["gpu.one"] == pytest.approx(0.01)


def test_invalid_prices_are_refused(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"as_of": "x", "region": "r", "currency": "USD", "check": "https://x",
                                "instances": [{"type": "t", "vcpus": 2, "gpu": None, "usd_per_hour": 0}]}))
    with pytest.raises(ValueError, match="t needs a positive usd_per_hour"):
        cost.load_prices(path)


def test_without_xllamacpp_the_peer_is_skipped_with_the_install_command(monkeypatch):
    monkeypatch.setattr(peer, "unavailable", lambda: "xllamacpp is not installed; pip install -r bench/requirements-peer.txt")
    report = peer.compare(Path("m.gguf"), threads=1, parallel=1, ctx_size=64, gpu_layers=0, fresh=list,
                          second_question=lambda d: d, batch_questions=list, serial=1, rounds=1, clients=[1],
                          per_client=1, log_dir=Path("."), progress=print)
    assert report == {"skipped": "xllamacpp is not installed; pip install -r bench/requirements-peer.txt"}


@pytest.mark.model
@pytest.mark.server
@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_the_stock_llama_server_answers_a_decision_prompt_and_caches_it(tmp_path):
    from decision_contract import Decision
    from decision_server.model_files import embedded_model_path

    decision = Decision(id="p", state="I was charged twice this month.", question="Which queue?",
                        options=[{"id": "b", "description": "Billing"}, {"id": "t", "description": "Technical"}])
    with LlamaServer(embedded_model_path(), threads=1, parallel=2, ctx_size=2048, gpu_layers=0,
                     log_path=tmp_path / "llama-server.log") as server, httpx.Client(timeout=120) as http:
        stock = peer.Stock("llama-server", http, server.url)
        assert stock.decide(decision) > 0
        body = http.post(f"{server.url}/v1/chat/completions", json={
            "messages": peer.messages(decision), "max_tokens": 1, "logprobs": True, "top_logprobs": 20}).json()
        assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == body["usage"]["prompt_tokens"] - 1
        assert len(body["choices"][0]["logprobs"]["content"][0]["top_logprobs"]) == 20
