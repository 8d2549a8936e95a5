"""The console script, run as users run it: in a subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import mlx.core as mx
import pytest
import soundfile

from tests.tts.support.cli import MLX_SPEECH, run, start_serving
from tests.tts.support.tmpfs import run_on_a_tmpfs

pytestmark = pytest.mark.slow  # the command in subprocesses


def test_speak_writes_the_file_and_reports_timing(speaking_dir, tmp_path):
    out = tmp_path / "hello.flac"
    result = run(
        "speak",
        "Hello there.",
        "--model",
        str(speaking_dir),
        "-o",
        str(out),
        "--temperature",
        "0",
        "--max-new-tokens",
        "12",
    )
    assert result.returncode == 0, result.stderr
    samples, rate = soundfile.read(out)
    assert rate == 48000 and len(samples) == 12 * 960
    summary = result.stdout.splitlines()[0]
    assert summary.startswith(f"wrote {out} (flac, 48000 Hz, mono): 0.24 s of audio; ")
    assert "model loaded in" in summary and "then first audio" in summary
    assert "real-time factor" in summary


def test_speak_dash_with_nothing_on_standard_input_is_an_error(speaking_dir, tmp_path):
    out = tmp_path / "empty.wav"
    result = run("speak", "-", "--model", str(speaking_dir), "-o", str(out), stdin=" \n")
    assert result.returncode == 1 and not out.exists()
    assert "standard input was empty: nothing to speak" in result.stderr


def test_speak_says_which_fields_the_model_ignored(speaking_dir, tmp_path):
    out = tmp_path / "styled.wav"
    result = run(
        "speak",
        "Hi.",
        "--model",
        str(speaking_dir),
        "-o",
        str(out),
        "--instructions",
        "Whisper.",
        "--max-new-tokens",
        "2",
    )
    assert result.returncode == 0, result.stderr
    assert "ignored (this model does not use them): instructions" in result.stdout


def test_speak_reads_standard_input_and_honours_format(speaking_dir, tmp_path):
    out = tmp_path / "speech.out"
    result = run(
        "speak",
        "-",
        "--model",
        str(speaking_dir),
        "-o",
        str(out),
        "--format",
        "wav",
        "--seed",
        "3",
        "--max-new-tokens",
        "5",
        stdin="Read from standard input.",
    )
    assert result.returncode == 0, result.stderr
    assert soundfile.info(out).format == "WAV"


def test_speak_clones_from_a_reference_file(speaking_dir, reference_clip, tmp_path):
    out = tmp_path / "clone.wav"
    result = run(
        "speak",
        "Hello.",
        "--model",
        str(speaking_dir),
        "--ref-audio",
        str(reference_clip),
        "-o",
        str(out),
        "--max-new-tokens",
        "4",
        "--seed",
        "1",
    )
    assert result.returncode == 0, result.stderr
    assert len(soundfile.read(out)[0]) == 4 * 960


@pytest.mark.parametrize(
    "args, message",
    [
        (["speak", "Hi", "--model", "/nowhere/at/all"], "model directory not found"),
        (["speak", "", "--model", "{model}"], "text must be a non-empty string"),
        (
            ["speak", "Hi", "--model", "{model}", "--temperature", "-1"],
            "temperature must be >= 0",
        ),
        (
            ["speak", "Hi", "--model", "{model}", "-o", "x.wma"],
            "unknown audio format 'wma'",
        ),
        (
            ["speak", "Hi", "--model", "{model}", "-o", "."],
            "cannot write .: it is a directory; name a file in it",
        ),
        (
            ["speak", "Hi", "--model", "{model}", "-o", "speech"],
            "cannot tell the audio format of 'speech': its name has no suffix",
        ),
        (
            [
                "speak",
                "Hi",
                "--model",
                "{model}",
                "--max-new-tokens",
                "1",
                "-o",
                "/dev/full",
            ]
            + ["--format", "wav"],
            "cannot write /dev/full: No space left on device",
        ),
        (
            ["speak", "Hi", "--model", "{model}", "--voice", "nobody"],
            "unknown voice 'nobody': not a saved voice",
        ),
        (
            ["speak", "Hi", "--model", "{model}", "--voice", "nosuch.wav"],
            "unknown voice 'nosuch.wav': no file 'nosuch.wav' exists, and no saved voice",
        ),
        (
            ["speak", "Hi", "--model", "{model}", "--ref-audio", "missing.wav"],
            "reference audio 'missing.wav' cannot be read: No such file or directory",
        ),
    ],
)
def test_errors_are_one_line_and_exit_non_zero(speaking_dir, tmp_path, args, message):
    args = [arg.replace("{model}", str(speaking_dir)) for arg in args]
    if "-o" not in args:
        args += ["-o", str(tmp_path / "out.wav")]
    result = subprocess.run(
        [MLX_SPEECH, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


@pytest.mark.parametrize("command", ["speak", "serve"])
def test_help_lists_every_flag(command):
    result = run(command, "--help")
    assert result.returncode == 0
    expected = {
        "speak": [
            "--model",
            "--voice",
            "--ref-audio",
            "--ref-text",
            "--instructions",
            "--language",
            "--output",
            "--format",
            "--seed",
            "--temperature",
            "--max-new-tokens",
        ],
        "serve": [
            "--model",
            "--host",
            "--port",
            "--api-key",
            "--max-queue",
            "--max-batch",
            "--max-input-chars",
            "--max-ref-bytes",
            "--stream-idle-timeout",
        ],
    }[command]
    for flag in expected:
        assert flag in result.stdout


@contextlib.contextmanager
def _speaking(url: str):
    """A long stream under way (its answer begun) for the block's life. Its
    client reads no more, through a 4 KB receive buffer: the tiny model
    makes the 80 s of audio in about 2 s, which the kernel's buffers would
    otherwise take whole, ending the request before a signal's handler ran
    on a busy machine."""
    address = urlparse(url)
    body = json.dumps(
        {"input": "Hello.", "max_new_tokens": 4000, "response_format": "pcm"}
        | {"sample_rate": 48000}  # 7.7 MB, more than the server's send buffer
    ).encode()
    head = (
        "POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.socket() as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.settimeout(30)
        client.connect((address.hostname, address.port))
        client.sendall(head.encode() + body)
        assert client.recv(12) == b"HTTP/1.1 200"
        yield


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_logs_its_url_and_exits_zero_on_signal(speaking_dir, sig):
    server, url = start_serving(speaking_dir, "--shutdown-timeout", "2")
    try:
        with _speaking(url):
            server.send_signal(sig)
            started = time.monotonic()
            assert server.wait(timeout=30) == 0
        assert time.monotonic() - started < 15
    finally:
        if server.poll() is None:
            server.kill()
    output = server.stdout.read()
    assert f"listening on {url}" in output
    assert "loaded" in output
    lines = output.strip().splitlines()
    assert all(line[:4].isdigit() for line in lines), output  # one format: ours
    assert "Uvicorn running" not in output and "garbage collector" not in output
    assert "POST /v1/audio/speech" not in output  # no access log by default
    assert "Traceback" not in output and "Exception in ASGI application" not in output


def test_ctrl_c_says_what_it_waits_for_and_a_second_stops_at_once(speaking_dir):
    server, url = start_serving(speaking_dir, "--shutdown-timeout", "600")
    said = queue.Queue()
    threading.Thread(
        target=lambda: [said.put(line) for line in server.stdout], daemon=True
    ).start()
    try:
        with _speaking(url):
            server.send_signal(signal.SIGINT)
            line = ""
            while "stopping" not in line:
                line = said.get(timeout=30)
            assert line.rstrip().endswith(
                "stopping: what is being spoken (1 request(s), 0 WebSocket or Wyoming "
                "session(s)) may finish for up to 600 s (--shutdown-timeout); press "
                "Ctrl-C again to stop now"
            )
            server.send_signal(signal.SIGINT)
            assert server.wait(timeout=30) == 0  # not the 600 s grace
    finally:
        if server.poll() is None:
            server.kill()
    time.sleep(0.2)  # the reader's last lines
    rest = "".join(said.get() for _ in range(said.qsize()))
    assert "stopping now" in rest
    assert "Traceback" not in rest and "CancelledError" not in rest, rest


def test_on_sigterm_running_streams_finish_or_end_cleanly(speaking_dir):
    """A short stream finishes whole within the grace; a long one ends with
    an SSE error event at the deadline; new requests are refused; exit 0."""
    server, url = start_serving(speaking_dir, "--shutdown-timeout", "1.5")
    try:
        with httpx.Client(timeout=30) as client:
            with (
                client.stream(
                    "POST",
                    f"{url}/v1/audio/speech",
                    json={"input": "Hi.", "stream_format": "sse", "max_new_tokens": 4000},
                ) as long,
                client.stream(
                    "POST",
                    f"{url}/v1/audio/speech",
                    json={"input": "Hi.", "response_format": "pcm", "max_new_tokens": 20},
                ) as short,
            ):
                lines = long.iter_lines()
                assert next(lines).startswith("data: ")
                server.send_signal(signal.SIGTERM)
                time.sleep(0.3)
                try:
                    refused = httpx.post(
                        f"{url}/v1/audio/speech", json={"input": "Hi."}, timeout=5
                    ).status_code
                except httpx.TransportError:
                    refused = "connection refused"
                assert refused in (503, "connection refused")
                assert len(short.read()) == 20 * 480 * 2  # finished whole, 24 kHz
                events = [
                    json.loads(line.removeprefix("data: "))
                    for line in lines
                    if line.startswith("data: ")
                ]
            assert events[-1]["type"] == "speech.audio.error"
            assert "shutting down" in events[-1]["error"]["message"]
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
    output = server.stdout.read()
    assert "Traceback" not in output and "Exception in ASGI application" not in output


def test_speak_dash_speaks_each_sentence_before_standard_input_ends(speaking_dir, tmp_path):
    out = tmp_path / "piped.wav"
    command = [MLX_SPEECH, "speak", "-", "--model", str(speaking_dir), "-o", str(out)]
    command += ["--seed", "2", "--max-new-tokens", "6"]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        process.stdin.write(b"The first sentence. ")
        process.stdin.flush()
        # Read while standard input is still open: the first sentence is being spoken.
        assert process.stderr.readline().decode().strip() == "speaking: The first sentence."
        process.stdin.write(b"And the last")
        process.stdin.close()
        assert process.stderr.readline().decode().strip() == "speaking: And the last"
        process.wait(timeout=300)
        stderr = process.stderr.read().decode()
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    samples, rate = soundfile.read(out)
    assert len(samples) == 2 * 6 * 960  # both segments, each to the frame budget


def test_speak_play_says_what_is_missing_where_no_sound_library_works(speaking_dir):
    pytest.importorskip("mlx_speech.cli.playback")
    try:
        import sounddevice  # noqa: F401
    except (ImportError, OSError):
        pass
    else:
        pytest.skip("this machine can play sound: the message is not reachable")
    result = run("speak", "Hi.", "--model", str(speaking_dir), "--play")
    assert result.returncode == 1
    line = result.stderr.strip()
    assert line.startswith("mlx-speech: error: ") and "\n" not in line
    assert "sounddevice" in line or "PortAudio" in line


HELP_WITHOUT_MLX = """
import sys
print("started", flush=True)
sys.modules["mlx"] = sys.modules["mlx_audio"] = None  # importing either fails
sys.argv = ["mlx-speech", *sys.argv[1:]]
from mlx_speech.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize(
    ("args", "status"), [(["--help"], 0), (["speak", "--help"], 0), (["speak"], 2)]
)
def test_help_and_usage_errors_load_no_model_code_and_run_once(args, status):
    result = subprocess.run(
        [sys.executable, "-c", HELP_WITHOUT_MLX, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == status, result.stderr
    assert result.stdout.count("started") == 1  # not re-executed for the BLAS
    assert "usage: mlx-speech" in result.stdout or "(see mlx-speech" in result.stderr


@pytest.mark.parametrize(
    ("command", "how"),
    [
        (["speak", "Hi."], "pass --model DIR"),
        (["serve", "--port", "0"], "serve --model DIR"),
    ],
)
def test_offline_without_a_model_names_the_flag_to_use(tmp_path, command, how):
    offline = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run(
        [MLX_SPEECH, *command, "--voices-dir", str(tmp_path / "voices")],
        capture_output=True,
        text=True,
        timeout=120,
        env=offline,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("mlx-speech: error: ") and "could not fetch" in last
    assert f"Without the network, {how}, a directory that holds the checkpoint" in last
    # the command it names is the installed huggingface_hub's
    named = last.split("'")[-2].split()
    assert named[:2] == ["hf", "download"], last
    hf = Path(sys.executable).with_name("hf")
    assert subprocess.run([hf, *named[1:2], "--help"], capture_output=True).returncode == 0


def _first_use_notices(tmp_path, command: list[str], compiled_before: bool) -> str:
    """What ``command`` (failing: no such model) says on a terminal, with an
    MLX kernel cache that is empty or not."""
    temporary = tmp_path / ("warm" if compiled_before else "cold")
    if compiled_before:
        kept = temporary / "mlx" / mx.__version__ / "cpu"
        kept.mkdir(parents=True)
        (kept / "kernel.so").write_bytes(b"")
    temporary.mkdir(exist_ok=True)
    terminal, side = pty.openpty()
    env = {**os.environ, "TMPDIR": str(temporary)}
    flags = ["--model", str(tmp_path / "missing"), "--voices-dir", str(tmp_path / "v")]
    with subprocess.Popen([MLX_SPEECH, *command, *flags], stderr=side, env=env):
        os.close(side)
        said = b""
        with contextlib.suppress(OSError):  # the terminal closes with the process
            while chunk := os.read(terminal, 4096):
                said += chunk
    os.close(terminal)
    return said.decode()


@pytest.mark.parametrize("command", [["speak", "Hi."], ["serve", "--port", "0"]])
def test_the_first_mlx_compile_on_a_machine_is_announced(tmp_path, command):
    notice = "first use of MLX on this machine: it compiles its CPU kernels"
    assert notice in _first_use_notices(tmp_path, command, compiled_before=False)
    assert notice not in _first_use_notices(tmp_path, command, compiled_before=True)


@pytest.mark.parametrize(
    "flags, flag",
    [([], "--port"), (["--wyoming-port", "BUSY"], "--wyoming-port")],
    ids=["http", "wyoming"],
)
def test_a_busy_port_is_one_line_naming_it_and_its_flag(
    speaking_dir, tmp_path, flags, flag
):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            http_port = busy if flag == "--port" else free.getsockname()[1]
        command = [MLX_SPEECH, "serve", "--model", str(speaking_dir), "--port"]
        command += [str(http_port), *(str(busy) if f == "BUSY" else f for f in flags)]
        result = subprocess.run(
            [*command, "--voices-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "loading" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"mlx-speech: error: port {busy} on 127.0.0.1 is in use (another server "
        f"listens there): pass {flag} with another port"
    )


def test_version_and_serves_description_say_what_there_is():
    from importlib.metadata import version

    done = run("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"mlx-speech {version('mlx-speech-server')}"
    described = " ".join(run("serve", "--help").stdout.split())
    for part in ("book jobs", "the page", "WebSocket", "Wyoming"):
        assert part in described


@pytest.mark.parametrize("place", ["-o", "--captions"])
def test_speak_into_a_read_only_folder_is_refused_before_the_model_loads(tmp_path, place):
    folder = tmp_path / "ro"
    args = ["-o", str(tmp_path / "a.wav"), "--captions", str(tmp_path / "a.vtt")]
    args[args.index(place) + 1] = str(folder / ("a.wav" if place == "-o" else "a.vtt"))
    done = run_on_a_tmpfs(folder, "ro", "speak", "Hi.", *args, "--model", "/no/such/model")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "read-only disk" in done.stderr and not (tmp_path / "a.wav").exists()
