"""The page at / in a real browser: Debian's Chromium driven by Playwright,
against a real uvicorn server."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import httpx
import pytest

from mlx_speech.server import ServerSettings
from tests.tts.support.decoding import decode
from tests.tts.support.idle import wait_until_idle
from tests.tts.support.server import RunningServer

pytestmark = pytest.mark.slow  # a browser against a real server

playwright_api = pytest.importorskip("playwright.sync_api")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(
        "no Chromium here (.ci/run installs Debian's: apt-get install -y chromium)",
        allow_module_level=True,
    )

# The README's picture, rewritten only when asked, so a test run leaves the
# tree clean: MLX_SPEECH_SCREENSHOT=docs/page.png pytest tests/tts/page
SCREENSHOT = os.environ.get("MLX_SPEECH_SCREENSHOT")
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
    "--use-fake-device-for-media-stream",
    "--use-fake-ui-for-media-stream",
]
MAX_INPUT_CHARS = 300
CLIP_OPTION = "the clip below (not saved)"


@contextlib.contextmanager
def _without_preload():
    """Playwright's driver dies under an OpenBLAS LD_PRELOAD (pthread_create)."""
    preload = os.environ.pop("LD_PRELOAD", None)
    try:
        yield
    finally:
        if preload is not None:
            os.environ["LD_PRELOAD"] = preload


@pytest.fixture(scope="module")
def browser():
    with _without_preload():  # Playwright gives it a new empty profile
        driver = playwright_api.sync_playwright().start()
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
    yield launched
    launched.close()
    driver.stop()


@pytest.fixture(scope="module")
def server(speaking_dir, nano_backend, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("page-voices"),
        max_input_chars=MAX_INPUT_CHARS,
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        yield running


@pytest.fixture
def page(browser, server):
    context = browser.new_context(permissions=["microphone"])
    opened = context.new_page()
    opened.goto(server.url + "/")
    opened.wait_for_selector("#voice option[value=default]", state="attached")
    yield opened
    context.close()


def set_field(page, selector: str, value: str) -> None:
    page.locator("#advanced").evaluate("details => { details.open = true; }")
    page.fill(selector, value)


def speak(page, text: str = "Hello from the page.", frames: int = 5) -> None:
    page.fill("#text", text)
    set_field(page, "#max-new-tokens", str(frames))
    page.click("#speak")


def wait_for_state(page, state: str, timeout: float = 120_000) -> None:
    page.wait_for_selector(f"#status[data-state={state}]", timeout=timeout)


def test_the_page_names_the_model_and_what_runs_it(page, speaking_dir):
    health = httpx.get(page.url + "health").json()
    page.wait_for_selector(f"#model:has-text('{speaking_dir.name}')")
    runs = f"on {health['backend']} ({health['device']})"
    assert page.text_content("#model") == f"Model: {speaking_dir.name}, {runs}"


def test_the_page_says_when_the_model_failed_to_load(browser, tmp_path):
    settings = ServerSettings(model=str(tmp_path / "missing"), voices_dir=tmp_path)
    with RunningServer(settings, wait_until_healthy=False) as running:
        context = browser.new_context()
        opened = context.new_page()
        opened.goto(running.url + "/")
        opened.wait_for_selector("#model:has-text('it failed to load')")
        assert "model directory not found" in opened.text_content("#model")
        context.close()


def test_the_page_plays_audio_while_it_is_generated(page):
    frames = 1200  # generation goes on for seconds after playback starts
    speak(page, "A longer text, to hear while it is generated.", frames)
    wait_for_state(page, "streaming", 10_000)
    wait_for_state(page, "done")
    status = page.locator("#status")
    assert int(status.get_attribute("data-bytes")) == frames * 480 * 2  # 24 kHz s16
    assert int(status.get_attribute("data-heard-ms")) > 0  # it was playing already
    assert int(page.text_content("#ttfa")) > 0
    assert float(page.text_content("#rtf")) > 0
    assert page.is_hidden("#message")
    picture = page.screenshot(path=SCREENSHOT, full_page=True)
    assert picture.startswith(b"\x89PNG")


def test_stop_cancels_the_request_on_the_server(page):
    speak(page, "This would take a long time to say.", 4000)
    page.wait_for_selector("#status[data-bytes]:not([data-bytes='0'])", timeout=60_000)
    page.click("#stop")
    wait_for_state(page, "idle", 10_000)
    assert page.text_content("#status") == "Stopped."
    wait_until_idle(timeout=30)


def test_a_clip_saved_as_a_voice_speaks_and_can_be_deleted(page, server, reference_clip):
    page.locator("#clone").evaluate("details => { details.open = true; }")
    page.set_input_files("#clip", str(reference_clip))
    page.wait_for_selector("#clip-status:has-text('Clip:')")
    page.fill("#voice-name", "page-voice")
    page.click("#save-voice")
    page.wait_for_selector("#voice option[value=page-voice]", state="attached")
    assert page.input_value("#voice") == "page-voice"
    speak(page)
    wait_for_state(page, "done")
    page.click("button.delete-voice[data-voice=page-voice]")
    page.wait_for_selector("#voice option[value=page-voice]", state="detached")


def test_a_saved_voice_of_any_name_is_not_taken_for_the_clip(page, server, reference_clip):
    with open(reference_clip, "rb") as clip:
        saved = httpx.post(
            f"{server.url}/v1/audio/voices",
            data={"name": "__clip__"},
            files={"audio_sample": ("c.wav", clip, "audio/wav")},
        )
    assert saved.status_code == 201, saved.text
    try:
        page.reload()
        page.wait_for_selector("#voice option[value=__clip__]", state="attached")
        page.select_option("#voice", "__clip__")
        speak(page)  # with no clip chosen: the saved voice, not the clip option
        wait_for_state(page, "done")
    finally:
        httpx.delete(f"{server.url}/v1/audio/voices/__clip__")


def test_a_recorded_clip_clones_once(page):
    page.locator("#clone").evaluate("details => { details.open = true; }")
    page.click("#record")
    page.wait_for_timeout(1500)  # the fake microphone plays a tone
    page.click("#stop-record")
    page.wait_for_selector("#clip-status:has-text('Clip: recording')")
    page.select_option("#voice", label=CLIP_OPTION)
    speak(page)
    wait_for_state(page, "done")
    assert page.is_hidden("#message")


def test_server_errors_are_shown_in_words(page, tmp_path):
    speak(page, "x" * (MAX_INPUT_CHARS + 100))
    wait_for_state(page, "error")
    message = page.text_content("#message")
    assert message.startswith("The server refused the request: the text is 400 characters")
    page.locator("#clone").evaluate("details => { details.open = true; }")
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("these are not audio samples")
    page.set_input_files("#clip", str(not_audio))
    page.wait_for_selector("#clip-status:has-text('Clip: notes.wav')")
    page.select_option("#voice", label=CLIP_OPTION)
    speak(page)
    wait_for_state(page, "error")
    assert "reference audio bytes could not be decoded" in page.text_content("#message")


def test_the_page_asks_for_the_api_key(browser, speaking_dir, tmp_path):
    settings = ServerSettings(model=str(speaking_dir), voices_dir=tmp_path, api_key="k3y")
    with RunningServer(settings) as running:
        context = browser.new_context()
        page = context.new_page()
        page.goto(running.url + "/")
        page.wait_for_selector("#key-panel", state="visible")
        assert "needs its API key" in page.text_content("#message")
        page.fill("#api-key", "wrong")
        page.press("#api-key", "Enter")
        page.wait_for_selector("#message:has-text('refused this API key')")
        page.fill("#api-key", "k3y")
        page.click("#save-key")
        page.wait_for_selector("#voice option[value=default]", state="attached")
        speak(page)
        wait_for_state(page, "done")
        context.close()


PLAY_IN_AUDIO_ELEMENT = """async (format) => {
  const response = await fetch("/v1/audio/speech", {
    method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({input: "Hello.", response_format: format, max_new_tokens: 25,
                          seed: 1}),
  });
  const blob = await response.blob();
  const audio = new Audio(URL.createObjectURL(blob));
  audio.muted = true;
  const ended = new Promise((resolve, reject) => {
    audio.onended = () => resolve(audio.duration);
    audio.onerror = () => reject(new Error(`cannot play: code ${audio.error.code}`));
  });
  await audio.play();
  return await ended;
}"""


@pytest.mark.parametrize("response_format", ["mp3", "opus", "aac", "wav", "flac"])
def test_every_streamed_format_plays_in_an_audio_element(page, response_format):
    """The bodies the server streams (no ``stream`` field: the file as it is
    made) play whole in Chromium's <audio>; pcm plays through the page."""
    duration = page.evaluate(PLAY_IN_AUDIO_ELEMENT, response_format)
    assert 0.4 < duration < 0.7  # 25 frames of 20 ms, plus codec padding


@pytest.mark.parametrize("response_format", ["wav", "mp3"])
def test_download_is_the_audio_just_heard(page, tmp_path, response_format):
    set_field(page, "#seed", "5")
    speak(page, "Keep this one.", 30)
    wait_for_state(page, "done")
    page.select_option("#format", response_format)
    with page.expect_download() as downloading:
        page.click("#download")
    path = tmp_path / downloading.value.suggested_filename
    downloading.value.save_as(path)
    assert path.name == f"speech.{response_format}"
    rate = 24000 if response_format == "wav" else 48000  # the heard pcm, or the model's
    samples, found_rate = decode(path.read_bytes(), response_format, rate)
    assert found_rate == rate
    assert abs(len(samples) / rate - 30 * 0.02) < 0.06  # 30 frames, plus mp3 padding


READ_ALONG_NOW = """() => {
    const readAlong = document.querySelector('#read-along');
    const now = readAlong.querySelector('span.now');
    const heard = Number(readAlong.dataset.heardSample);
    const heardAt = Number(readAlong.dataset.heardAt);
    const caption = now && session.captions[Number(now.dataset.index)];
    const player = session.player;
    // silence the player left between chunks it had no audio for yet
    let silent = 0;
    if (player) {
      const heardTime = player.firstStart + heardAt;
      let end = player.firstStart;
      for (const chunk of player.placed) {
        if (chunk.at > heardTime) break;
        silent += chunk.at - end;
        end = chunk.at + chunk.length / player.rate;
      }
      silent += Math.max(0, heardTime - end); // in a gap now
    }
    return {
      text: now && now.textContent,
      inStep: !now || (caption.start_sample <= heard && heard < caption.end_sample),
      clock: player ? heardAt - silent - heard / player.rate : 0,
      current: now && now.getAttribute('aria-current'),
      done: document.querySelector('#status').dataset.state === 'done' && !player.playing(),
    };
}"""


def test_the_sentence_being_heard_is_highlighted_in_step_with_playback(page):
    sentences = ["The first sentence is here.", "Then a second one.", "And the last."]
    speak(page, " ".join(sentences), 40)  # 0.8 s of audio each
    seen = []  # the highlighted sentence, whenever it changes
    for _ in range(750):  # 30 s at most
        state = page.evaluate(READ_ALONG_NOW)
        assert state["inStep"]
        if state["text"]:
            # the highlight follows the audio clock at the frame it was
            # marked, less any silence where the model fell behind playback
            assert abs(state["clock"]) < 0.02, state
            if not seen or seen[-1] != state["text"]:
                seen.append(state["text"])
                assert state["current"] == "true"
        if state["done"]:
            break
        page.wait_for_timeout(40)
    assert seen == sentences
    assert page.locator("#read-along span").all_text_contents() == sentences
    # playback ended: the next frame marks none
    page.wait_for_selector("#read-along span.now", state="detached", timeout=2000)


def test_the_dialogue_example_is_spoken_as_ssml(page):
    page.select_option("#example", "dialogue")
    assert page.input_value("#text").startswith("<speak>")
    set_field(page, "#max-new-tokens", "5")
    page.click("#speak")
    wait_for_state(page, "done")
    assert int(page.locator("#status").get_attribute("data-bytes")) > 0
    # the caption shows what was said, not the markup
    captions = page.locator("#read-along span").all_text_contents()
    assert captions == ["Who is there? It is me."]
    assert page.is_hidden("#message")
