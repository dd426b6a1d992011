"""The stock llama-server, for the benchmark's side-by-side figures: llama.cpp's own C++ server
(its HTTP listener, slots, continuous batching and slot prompt cache) from the `xllamacpp`
wheel (bench/requirements-peer.txt), run in a subprocess of its own so its llama.cpp build
never shares a process with ours.

    python -m bench.llama_server --model M.gguf --threads 2 --parallel 8 --ctx-size 8192 [--gpu-layers 999]

prints `{"url": "http://127.0.0.1:PORT"}` once it listens, and serves until its stdin closes.
`LlamaServer` starts and stops it from the benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

INSTALL_HINT = ".venv/bin/pip install -r bench/requirements-peer.txt"


def unavailable() -> str | None:
    """Why the peer cannot run here (None: it can)."""
    try:
        import xllamacpp  # noqa: F401
    except ImportError as exc:
        return f"xllamacpp is not installed ({exc}); {INSTALL_HINT}"
    return None


def serve(model: Path, *, threads: int, parallel: int, ctx_size: int, gpu_layers: int) -> None:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(model)
    params.n_ctx = ctx_size
    params.n_parallel = parallel
    params.n_gpu_layers = gpu_layers
    # One KV pool for all slots, as our unified cache: any slot may use the whole context.
    params.kv_unified = True
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.hostnames = ["127.0.0.1"]
    params.port = 0  # a free port; the server says which
    server = xllamacpp.Server(params)
    print(json.dumps({"url": server.listening_address}), flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin


class LlamaServer:
    """`python -m bench.llama_server` as a context manager: `.url` once healthy."""

    def __init__(self, model: Path, *, threads: int, parallel: int, ctx_size: int, gpu_layers: int,
                 log_path: Path) -> None:
        self.command = [sys.executable, "-m", "bench.llama_server", "--model", str(model), "--threads", str(threads),
                        "--parallel", str(parallel), "--ctx-size", str(ctx_size), "--gpu-layers", str(gpu_layers)]
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> "LlamaServer":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        root = Path(__file__).resolve().parents[1]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.command, cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=log, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.__exit__()
            raise RuntimeError(f"llama-server did not start; see {self.log_path}")
        self.url = json.loads(line)["url"].rstrip("/")
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            if time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"llama-server at {self.url} was not healthy after 120 s; see {self.log_path}")
            time.sleep(0.2)

    def __exit__(self, *exc: Any) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            process.stdin.close()  # type: ignore[union-attr]
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--ctx-size", type=int, default=8192)
    parser.add_argument("--gpu-layers", type=int, default=0)
    args = parser.parse_args(argv)
    serve(args.model, threads=args.threads, parallel=args.parallel, ctx_size=args.ctx_size, gpu_layers=args.gpu_layers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
