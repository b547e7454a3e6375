"""Shared pytest helpers: start a fake from tests/fakes/ on a loopback port."""
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

FAKES = pathlib.Path(__file__).resolve().parent.parent / "fakes"


class Fake:
    def __init__(self, name, *args):
        self.dir = tempfile.mkdtemp(prefix=f"fake-{name}-")
        self.log = os.path.join(self.dir, "requests.jsonl")
        self.proc = subprocess.Popen(
            [sys.executable, str(FAKES / f"{name}.py"), "--port", "0", "--log", self.log, *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.port = int(self.proc.stdout.readline().strip())
        self.url = f"http://127.0.0.1:{self.port}"

    def requests(self):
        import json

        try:
            with open(self.log) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def start_fake():
    started = []

    def start(name, *args):
        fake = Fake(name, *args)
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()
