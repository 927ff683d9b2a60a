"""Fixtures for aido's end-to-end tests.

Every test gets a fresh world under pytest's tmp_path:

    root/
      home/          HOME for the server and the CLI (what `~` means), seeded with files
      aido_home/     AIDO_HOME (journal, config.toml); never inside home unless a test says so
      outside/       a sibling of home that the default policy must never let through
      configs/       config files handed to `--config`
      logs/          the server's stderr, one file per session, printed when a test fails

The binary is `$AIDO_BIN`, or `<repo>/target/debug/aido`.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from helpers import Aido

REPO = Path(__file__).resolve().parents[2]
AIDO_BIN = Path(os.environ.get("AIDO_BIN") or REPO / "target" / "debug" / "aido")

# Seeded into every HOME. Binary and large files are made by the tests that need them.
HOME_FILES: dict[str, str] = {
    "notes.txt": "hello\nworld\n",
    "lines.txt": "".join(f"line{i}\n" for i in range(1, 11)),
    "src/app.py": "def main():\n    print('hi')\n    return 0\n",
    "src/config.json": '{"name": "demo", "debug": false}\n',
    "src/settings.toml": 'title = "demo"\n[server]\nport = 8080\n',
    ".ssh/id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n",
    "proj/.env": "SECRET=hunter2\n",
}
OUTSIDE_FILES: dict[str, str] = {"secret.txt": "top secret outside the walls\n"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# Lines a test leaves for the end of the run (times through aido beside bare, peak memory):
# printed by pytest_terminal_summary, so they show on a passing run too.
_TRAIL: list[str] = []


@pytest.fixture
def trail(request: pytest.FixtureRequest) -> Any:
    def say(line: str) -> None:
        print(line)
        _TRAIL.append(f"{request.node.name}: {line}")

    return say


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _TRAIL:
        terminalreporter.section("trail (printed, never asserted)")
        for line in _TRAIL:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def aido_bin() -> Path:
    if not (AIDO_BIN.is_file() and os.access(AIDO_BIN, os.X_OK)):
        pytest.fail(
            f"the aido binary is missing at {AIDO_BIN}: run `cargo build -p aido` "
            "(scripts/test does) or point AIDO_BIN at it",
            pytrace=False,
        )
    return AIDO_BIN


@dataclass
class World:
    root: Path
    home: Path
    aido_home: Path
    outside: Path
    bin: Path
    logs: list[Path] = field(default_factory=list)
    _counter: itertools.count = field(default_factory=itertools.count)
    # Added to every server's and CLI's environment (a test's TMPDIR, say).
    env_extra: dict[str, str] = field(default_factory=dict)

    # ---- environment -------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        """The whole environment a server or CLI process gets: nothing leaks in from ours."""
        env = {
            "HOME": str(self.home),
            "AIDO_HOME": str(self.aido_home),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "RUST_BACKTRACE": "1",
        }
        env.update(self.env_extra)
        env.update(extra)
        return env

    def write_config(self, text: str) -> Path:
        path = self.root / "configs" / f"config-{next(self._counter)}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    # ---- the CLI -----------------------------------------------------------------------
    def run(
        self, *args: str, config: str | None = None, timeout: float = 60, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run `aido ARGS [--config FILE]` and return what it did (never raises on exit code);
        `env` is added to its environment."""
        argv = [str(self.bin), *args]
        if config is not None:
            argv += ["--config", str(self.write_config(config))]
        return subprocess.run(
            argv,
            env=self.env(**(env or {})),
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def run_json(self, *args: str, config: str | None = None) -> Any:
        proc = self.run(*args, config=config)
        assert proc.returncode == 0, describe(proc)
        try:
            return json.loads(proc.stdout)
        except json.JSONDecodeError as e:
            raise AssertionError(f"`aido {' '.join(args)}` did not print JSON ({e}):\n{describe(proc)}")

    def played_back(self) -> int:
        """Play every session of this AIDO_HOME back from its journal alone (`aido replay
        playback`): none may mismatch or be unreproducible; the number of results reproduced."""
        reproduced = 0
        for session in self.run_json("replay", "sessions", "--json"):
            proc = self.run("replay", "playback", session["id"], "--json")
            assert proc.returncode == 0, describe(proc)
            played = json.loads(proc.stdout)
            assert played["mismatches"] == [], describe(proc)
            assert played["not_reproducible"] == [], describe(proc)
            reproduced += played["reproduced"]
        return reproduced

    # ---- the MCP server ----------------------------------------------------------------
    @asynccontextmanager
    async def session(
        self,
        *,
        config: str | None = None,
        elicitation_callback: Any = None,
        logging_callback: Any = None,
        message_handler: Any = None,
        list_roots_callback: Any = None,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> AsyncIterator[Aido]:
        """Start `aido mcp` (in `cwd`, default HOME) and connect the official Python SDK client
        to it over stdio.

        `config` is TOML handed to `--config`. A client gets the elicitation capability only
        when `elicitation_callback` is given (the SDK advertises it exactly then).
        """
        from mcp import ClientSession, StdioServerParameters, stdio_client

        args = ["mcp", *extra_args]
        if config is not None:
            args += ["--config", str(self.write_config(config))]
        params = StdioServerParameters(
            command=str(self.bin), args=args, env=self.env(**(env or {})), cwd=str(cwd or self.home)
        )
        log = self.root / "logs" / f"server-{next(self._counter)}.stderr"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.logs.append(log)
        kwargs: dict[str, Any] = {"read_timeout_seconds": 30}
        if elicitation_callback is not None:
            kwargs["elicitation_callback"] = elicitation_callback
        if logging_callback is not None:
            kwargs["logging_callback"] = logging_callback
        if message_handler is not None:
            kwargs["message_handler"] = message_handler
        if list_roots_callback is not None:
            kwargs["list_roots_callback"] = list_roots_callback
        try:
            with open(log, "w") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write):
                    async with ClientSession(read, write, **kwargs) as session:
                        init = await session.initialize()
                        yield Aido(session, init)
        except BaseExceptionGroup as group:
            # The SDK's task groups wrap whatever the test raised; show the test's own error.
            leaves = list(_leaves(group))
            if len(leaves) == 1:
                raise leaves[0] from None
            raise

    # ---- looking at the disk -----------------------------------------------------------
    def snapshot(self, base: Path | None = None) -> dict[str, Any]:
        """Every entry under `base` (default HOME): files with their bytes, links with their
        targets, directories, and each entry's mode. Used to prove nothing changed."""
        base = base or self.home
        out: dict[str, Any] = {}
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            for name in sorted(dirnames + filenames):
                p = Path(dirpath) / name
                rel = str(p.relative_to(base))
                st = p.lstat()
                if p.is_symlink():
                    out[rel] = ("link", os.readlink(p))
                elif p.is_dir():
                    out[rel] = ("dir", st.st_mode)
                else:
                    out[rel] = ("file", st.st_mode, p.read_bytes())
        return out


def _leaves(group: BaseExceptionGroup) -> Any:
    for e in group.exceptions:
        if isinstance(e, BaseExceptionGroup):
            yield from _leaves(e)
        else:
            yield e


def describe(proc: subprocess.CompletedProcess[str]) -> str:
    return (
        f"$ {' '.join(map(str, proc.args))}\nexit {proc.returncode}\n"
        f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    )


def make_world(root: Path, aido_bin: Path) -> World:
    """A fresh world under `root` (see the module's docs)."""
    home, aido_home, outside = root / "home", root / "aido_home", root / "outside"
    for d in (home, aido_home, outside):
        d.mkdir()
    for rel, text in HOME_FILES.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    for rel, text in OUTSIDE_FILES.items():
        (outside / rel).write_text(text)
    # Escapes the tests try: a directory link and a file link from inside HOME to outside.
    (home / "link_out").symlink_to(outside, target_is_directory=True)
    (home / "secret_link").symlink_to(outside / "secret.txt")
    return World(root=root, home=home, aido_home=aido_home, outside=outside, bin=aido_bin)


def show_logs(w: World) -> None:
    """The servers' stderr, shown by pytest only when the test failed ("Captured stdout
    teardown")."""
    for log in w.logs:
        if log.exists() and log.stat().st_size:
            text = log.read_text(errors="replace")
            tail = text[-6000:]
            sys.stdout.write(f"\n===== {log.name} (server stderr, last {len(tail)} chars) =====\n{tail}\n")


@pytest.fixture
def world(tmp_path: Path, aido_bin: Path) -> Any:
    w = make_world(tmp_path, aido_bin)
    yield w
    show_logs(w)
