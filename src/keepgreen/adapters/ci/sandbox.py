"""The box around a PR's CI command: what it may see, where it may write, who it runs as.

A pull request's command is untrusted code. `Bubblewrap` runs it with bubblewrap (`bwrap`)
in new user, mount, pid, network, ipc, uts and cgroup namespaces:

- the file system is the system's programs and libraries read-only (`/usr` and the usual
  links into it, a short list of `/etc` files), the operator's extra read-only paths, the
  repository's git objects read-only (so `git log` works in the checkout), and the run's own
  directory read-write as `/workspace` (the checkout) and `/tmp`; nothing else exists in the
  box: not the data dir, not the database, not other checkouts or other repositories, not
  `/root` or `/home`;
- there is no network but a loopback of its own, so neither the API nor the database is
  reachable, over TCP or a socket;
- it sees only its own processes, is `nobody` (uid 65534) inside with no capabilities, and
  cannot make user namespaces of its own.

Outside the namespaces the box's processes keep the uid of keepgreen's service user, so files
the box is shown are read with that user's rights: run keepgreen as a user of its own in
production, not as root.

`Unboxed` runs the command as a plain child process: for an operator who has chosen another
isolation (a throwaway VM or container per worker) and said so with KEEPGREEN_CI_SANDBOX=none.
Either way the command's environment is built from nothing (see `command_environment`).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from keepgreen.core.names import variable_name_problem

SandboxKind = Literal["bwrap", "none"]

# Inside the box: the checkout and the scratch space.
WORKSPACE = "/workspace"
SCRATCH = "/tmp"  # noqa: S108 - the box's own /tmp, a directory of the run's

# `nobody`: who the command is inside the box.
UNPRIVILEGED_ID = 65534

# The system's programs and libraries. On a merged-/usr system the top-level ones are links
# into /usr; both layouts are handled.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What programs read from /etc to start (the dynamic linker, users, name service, time zone,
# certificates, alternatives). Not the whole /etc: operators keep keys and passwords there.
_ETC_FILES = (
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/group",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/locale.alias",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/nsswitch.conf",
    "/etc/os-release",
    "/etc/passwd",
    "/etc/protocols",
    "/etc/services",
    "/etc/ssl/certs",
    "/etc/timezone",
)
_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"


class SandboxUnavailable(Exception):
    """The box cannot be made on this machine; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start one boxed command: argv, environment and working directory."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path


@dataclass(frozen=True, slots=True)
class RunDirectory:
    """A run's own directory on the host: the checkout and the box's scratch space."""

    root: Path

    @property
    def checkout(self) -> Path:
        return self.root / "workspace"

    @property
    def scratch(self) -> Path:
        return self.root / "tmp"


class Sandbox(Protocol):
    """Turns a shell command into a boxed launch inside a run's directory."""

    @property
    def kind(self) -> SandboxKind:
        """`bwrap` or `none`, as KEEPGREEN_CI_SANDBOX says."""
        ...

    def check(self, scratch_root: Path) -> None:
        """Raise `SandboxUnavailable` when boxed commands cannot run here; `scratch_root` is
        where a trial run directory may be made.
        """
        ...

    def prepare(self, run: RunDirectory) -> None:
        """Make what the box needs in the run's directory besides the checkout."""
        ...

    def launch(
        self,
        command: str,
        *,
        run: RunDirectory,
        env: Mapping[str, str],
        git_objects: Sequence[Path],
    ) -> Launch:
        """The launch of `command` in `run.checkout`; `git_objects` are object stores the
        checkout borrows from (its alternates), shown read-only.
        """
        ...


def command_environment(
    *, extra: Mapping[str, str], passed: Iterable[str], source: Mapping[str, str]
) -> dict[str, str]:
    """The whole environment of a CI command: a fixed base, `extra` (the run's own values), and
    the variables named in `passed` (a repository's `ci_env`) copied from `source`; keepgreen's
    own `KEEPGREEN_*` settings never, whatever a repository names.
    """
    env = {
        "PATH": _PATH,
        "HOME": SCRATCH,
        "TMPDIR": SCRATCH,
        "LANG": "C.UTF-8",
        "CI": "true",
    }
    for name in passed:
        if name in source and variable_name_problem(name) is None:
            env[name] = source[name]
    env.update(extra)
    return env


@dataclass(frozen=True, slots=True)
class Unboxed:
    """No box: the command runs as keepgreen's user, in the run's directory, with the clean
    environment (KEEPGREEN_CI_SANDBOX=none; for machines isolated by other means).
    """

    kind: SandboxKind = "none"

    def check(self, scratch_root: Path) -> None:  # noqa: ARG002 - the port's signature
        return None  # nothing to make, nothing that can be missing

    def prepare(self, run: RunDirectory) -> None:
        run.scratch.mkdir(exist_ok=True)

    def launch(
        self,
        command: str,
        *,
        run: RunDirectory,
        env: Mapping[str, str],
        git_objects: Sequence[Path],  # noqa: ARG002 - the port's signature; all is visible
    ) -> Launch:
        # Outside a box HOME and TMPDIR name the run's scratch directory on the host.
        outside = {**env, "HOME": str(run.scratch), "TMPDIR": str(run.scratch)}
        return Launch(argv=["/bin/sh", "-c", command], env=outside, cwd=run.checkout)


@dataclass(slots=True)
class Bubblewrap:
    """The box made by bubblewrap; see the module's docstring for what it allows."""

    readonly_paths: tuple[Path, ...] = ()
    program: str = "bwrap"
    kind: SandboxKind = "bwrap"
    _checked: bool = field(default=False, repr=False)

    def check(self, scratch_root: Path) -> None:
        """Start a trivial box once (in a run directory under `scratch_root`); a machine without
        bubblewrap or user namespaces fails here with a sentence, not in every PR's log.
        """
        if self._checked:
            return
        if shutil.which(self.program) is None:
            raise SandboxUnavailable(
                "bubblewrap (bwrap) is not installed, so PR code cannot be boxed: install it "
                "(Debian and Ubuntu: apt-get install bubblewrap), or set KEEPGREEN_CI_SANDBOX=none "
                "on a machine isolated by other means"
            )
        scratch_root.mkdir(parents=True, exist_ok=True)
        run = RunDirectory(Path(tempfile.mkdtemp(prefix="probe-", dir=scratch_root)))
        try:
            run.checkout.mkdir()
            self.prepare(run)
            probe = self.launch("true", run=run, env={"PATH": _PATH}, git_objects=())
            result = subprocess.run(
                probe.argv,
                cwd=probe.cwd,
                env=probe.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        finally:
            shutil.rmtree(run.root, ignore_errors=True)
        if result.returncode != 0:
            words = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
            raise SandboxUnavailable(
                f"bubblewrap cannot make a box here ({words[0]}): user namespaces may be "
                "disabled (sysctl kernel.unprivileged_userns_clone, or an AppArmor profile); "
                "or set KEEPGREEN_CI_SANDBOX=none on a machine isolated by other means"
            )
        self._checked = True

    def prepare(self, run: RunDirectory) -> None:
        run.scratch.mkdir(exist_ok=True)

    def launch(
        self,
        command: str,
        *,
        run: RunDirectory,
        env: Mapping[str, str],
        git_objects: Sequence[Path],
    ) -> Launch:
        argv = [
            self.program,
            "--die-with-parent",  # the box dies with the runner's worker, never outlives it
            "--new-session",  # no terminal to push keystrokes into (TIOCSTI)
            "--unshare-all",  # mount, pid, network, ipc, uts, cgroup, user if it can...
            "--unshare-user",  # ... which it must: the box is not made without one
            "--disable-userns",
            "--cap-drop",
            "ALL",
            "--hostname",
            "keepgreen-ci",
        ]
        for directory in _SYSTEM_DIRS:
            argv += _system_mount(Path(directory))
        for name in _ETC_FILES:
            argv += ["--ro-bind-try", name, name]
        argv += ["--bind", str(run.checkout), WORKSPACE, "--bind", str(run.scratch), SCRATCH]
        # After /tmp, which would otherwise hide a repository that lives under the host's /tmp.
        for path in (*self.readonly_paths, *git_objects):
            argv += ["--ro-bind", str(path), str(path)]
        argv += ["--uid", str(UNPRIVILEGED_ID), "--gid", str(UNPRIVILEGED_ID)]
        argv += ["--proc", "/proc", "--dev", "/dev", "--chdir", WORKSPACE]
        argv += ["--", "/bin/sh", "-c", command]
        # The environment goes through bwrap's own (inherited by the command), never through
        # --setenv: arguments show in every process listing on the machine, values too.
        return Launch(argv=argv, env=dict(env), cwd=run.root)


def _system_mount(path: Path) -> list[str]:
    """A system directory read-only, or the link it is (merged /usr), or nothing."""
    if path.is_symlink():
        return ["--symlink", str(path.readlink()), str(path)]
    if path.is_dir():
        return ["--ro-bind", str(path), str(path)]
    return []


def make_sandbox(kind: SandboxKind, *, readonly_paths: Sequence[Path] = ()) -> Sandbox:
    """The sandbox KEEPGREEN_CI_SANDBOX names."""
    if kind == "none":
        return Unboxed()
    return Bubblewrap(readonly_paths=tuple(readonly_paths))
