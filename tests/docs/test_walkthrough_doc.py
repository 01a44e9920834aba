"""docs/walkthrough.md, run as a new user would: right after ``make run``."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import certs
from admission.settings import Settings

REPO = Path(__file__).resolve().parents[2]
WALKTHROUGH = REPO / "docs" / "walkthrough.md"


def shell_commands() -> list[str]:
    blocks = re.findall(r"^```sh\n(.*?)^```", WALKTHROUGH.read_text(), re.MULTILINE | re.DOTALL)
    return [re.sub(r"\\\n\s*", "", block).strip() for block in blocks]


def certs_init() -> list[str]:
    (command,) = [c for c in shell_commands() if c.startswith("tenantgate certs init")]
    return shlex.split(command)


def test_certs_init_works_after_make_run(tmp_path: Path) -> None:
    # `make run` is `tenantgate serve` on the defaults, which creates TLS material in the
    # default cert dir as it starts (admission.server).
    made_by_run = tmp_path / Settings.model_fields["cert_dir"].default
    certs.ensure(made_by_run, service="tenantgate", namespace="tenantgate-system")

    result = subprocess.run(
        [sys.executable, "-m", "admission.cli", *certs_init()[1:]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    directory = certs_init()[certs_init().index("--dir") + 1]
    assert (tmp_path / directory / "ca.crt").is_file()


def test_the_walkthrough_uses_the_certificates_it_made() -> None:
    directory = certs_init()[certs_init().index("--dir") + 1]
    commands = "\n".join(shell_commands())
    assert f"--webhook-ca {directory}/ca.crt" in commands
    assert f"--cert-dir {directory}" in commands
    assert not re.search(r"\.tenantgate/certs\b(?!`)", commands.replace(directory, ""))
