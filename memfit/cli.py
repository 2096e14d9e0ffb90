"""The `memfit` command."""

from __future__ import annotations

import argparse
import logging
import sys
from fractions import Fraction

from memfit.config import default_state_dir, model_roots
from memfit.estimator.budget import BudgetSetting
from memfit.estimator.registry import ModelIndex
from memfit.estimator.service import FitService, Settings

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9998


def _margin(text: str) -> Fraction:
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a fraction: {text!r}") from None
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError("the margin is a fraction between 0 and 10")
    return value


def _service(args: argparse.Namespace) -> FitService:
    index = ModelIndex(model_roots(args.models, usual=not args.no_usual_dirs))
    return FitService(index, settings=Settings(margin=args.margin, budget=BudgetSetting(args.budget)))


def _add_service_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", action="append", metavar="PATH",
                        help="a model directory (repeatable); default: MEMFIT_MODELS, an os.pathsep list")
    parser.add_argument("--no-usual-dirs", action="store_true",
                        help="do not look in the Hugging Face hub cache, llama.cpp's cache or LM Studio's folder")
    parser.add_argument("--margin", type=_margin, default=Fraction(1, 10),
                        help="presentation margin for the verdict (default 0.10)")
    parser.add_argument("--budget", choices=[b.value for b in BudgetSetting], default=BudgetSetting.AVAILABLE.value,
                        help="judge against available (default) or total host memory")


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from memfit.app import create_app
    from memfit.auth import load_token

    state_dir = default_state_dir()
    token = load_token(state_dir)
    service = _service(args)
    app = create_app(service, token.value)
    where = f"in {token.path}" if token.path else "from MEMFIT_TOKEN"
    print(f"memfit serving http://{args.host}:{args.port} (API at /v1, docs at /v1/ui/)", flush=True)
    print(f"bearer token: {where}", flush=True)
    print(f"model directories: {', '.join(f'{r.path} ({r.kind})' for r in service.index.roots) or '(none)'}",
          flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", timeout_keep_alive=5,
                timeout_graceful_shutdown=5, limit_concurrency=256, h11_max_incomplete_event_size=64 * 1024)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memfit", description="Will this local LLM fit in this machine's memory?")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("serve", help="run the HTTP server")
    p.add_argument("--host", default=DEFAULT_HOST)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    _add_service_flags(p)
    p.set_defaults(run=serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
