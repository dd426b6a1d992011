"""`python -m decision_server [serve] [--port N]`: the container's entrypoint.

SageMaker starts the container as `docker run IMAGE serve`; `serve` is accepted and ignored.
`batch` runs the batch scorer instead (`decision-server batch --help`; batch.py), as a SageMaker
Processing job's container arguments do.
Settings and the model file are checked before the port opens, so a bad variable stops
start-up at once with a message naming it; the model then loads in the background.
"""

from __future__ import annotations

import argparse
import logging
import sys

import uvicorn

from .app import create_app
from .engine import GpuUnavailable, require_gpu_backend
from .ggml_backends import BackendError
from .model_files import ModelFileError, find_gguf
from .request_ids import RequestIdFilter
from .settings import Settings, SettingsError


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s [request_id=%(request_id)s] %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["batch"]:
        from .batch import main as batch_main

        return batch_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m decision_server", description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", choices=["serve"], help="accepted for SageMaker; optional")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=None, help="default: SM_LLAMA_CPP_PORT or 8080")
    args = parser.parse_args(argv)

    try:
        settings = Settings.from_env(**({"port": args.port} if args.port is not None else {}))
    except SettingsError as exc:
        print(f"decision_server: start-up stopped: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    ignored = Settings.ignored_variables()
    if ignored:
        logging.getLogger("decision_server").warning(
            "ignoring variables this server has no equivalent for: %s", ", ".join(ignored)
        )
    try:
        require_gpu_backend(settings)
        find_gguf(settings)
    except (BackendError, GpuUnavailable, ModelFileError) as exc:
        print(f"decision_server: start-up stopped: {exc}", file=sys.stderr)
        return 2

    app = create_app(settings=settings)
    server = uvicorn.Server(
        uvicorn.Config(app, host=args.host, port=settings.port, log_config=None, access_log=False)
    )

    def stop(reason: str) -> None:
        server.should_exit = True

    app.state.runtime.on_failure = stop
    server.run()
    return 1 if app.state.runtime.error else 0


if __name__ == "__main__":
    sys.exit(main())
