// The page at /: speak with a voice, hear it while it is generated with the
// sentence being heard highlighted, clone and save voices. Plain script, no
// build step; it talks to the same API every other client uses
// (docs/speech.md).
"use strict";

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = "mlx-speech-api-key";
const CLIP_VOICE = ""; // the option that clones the clip below, unsaved: no voice id is empty

const session = {
  key: sessionStorage.getItem(KEY_STORAGE),
  controller: null, // aborts the running request
  player: null,
  pcm: [], // Int16Array chunks of what was just spoken
  captions: [], // {index, text, start_sample, end_sample} of each sentence, at rate
  rate: 24000,
  body: null, // the last request, to download it in another format
  clip: null, // {blob, name}: the clip to clone or save
};

// Talking to the server

class ServerError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers(extra = {}) {
  const all = { ...extra };
  if (session.key) all.Authorization = `Bearer ${session.key}`;
  return all;
}

async function call(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers(options.headers) });
  if (response.ok) return response;
  let message = response.statusText;
  try {
    message = (await response.json()).error.message;
  } catch (_) {
    // not our JSON error shape; the status text will do
  }
  if (response.status === 401) $("key-panel").hidden = false;
  throw new ServerError(response.status, message);
}

function inWords(error) {
  if (!(error instanceof ServerError)) return `Could not reach the server: ${error.message}`;
  const said = error.message;
  switch (error.status) {
    case 400: return `The server refused the request: ${said}`;
    case 401: return session.key
      ? "The server refused this API key: enter the right one above."
      : "This server needs its API key: enter it above.";
    case 403: return `Refused: ${said}`;
    case 404: return `Not found: ${said}`;
    case 409: return `Name taken: ${said}`;
    case 413: return `Too large: ${said}`;
    case 429: return `The server is busy; try again in a moment (${said}).`;
    case 503: return `The server is not ready: ${said}`;
    default: return `The server failed (${error.status}): ${said}`;
  }
}

function showError(error) {
  const message = $("message");
  message.textContent = inWords(error);
  message.hidden = false;
}

function clearError() {
  $("message").hidden = true;
  $("message").textContent = "";
}

function setStatus(state, text) {
  $("status").dataset.state = state;
  $("status").textContent = text;
}

// The model

async function showModel() {
  let health;
  try {
    health = await (await fetch("/health")).json();
  } catch (error) {
    $("model").textContent = `Model: the server did not answer (${error.message})`;
    return;
  }
  if (health.status === "loading") {
    $("model").textContent = "Model: loading…";
    setTimeout(showModel, 1000);
  } else if (health.status === "failed") {
    $("model").textContent = `Model: it failed to load: ${health.error}`;
  } else {
    $("model").textContent = `Model: ${health.model}, on ${health.backend} (${health.device})`;
  }
}

// Voices

async function loadVoices(select) {
  let listing;
  try {
    listing = await (await call("/v1/audio/voices")).json();
  } catch (error) {
    showError(error);
    return;
  }
  const picker = $("voice");
  const chosen = select || picker.value;
  picker.replaceChildren();
  const groups = { default: "Default", preset: "Presets", saved: "Saved voices" };
  for (const [kind, label] of Object.entries(groups)) {
    const voices = listing.voices.filter((voice) => voice.kind === kind);
    if (!voices.length) continue;
    const group = document.createElement("optgroup");
    group.label = label;
    for (const voice of voices) group.append(new Option(voice.name, voice.id));
    picker.append(group);
  }
  picker.append(new Option("the clip below (not saved)", CLIP_VOICE));
  if ([...picker.options].some((option) => option.value === chosen)) picker.value = chosen;
  showSaved(listing.voices.filter((voice) => voice.kind === "saved"));
}

function showSaved(voices) {
  const list = $("saved-voices");
  list.replaceChildren();
  for (const voice of voices) {
    const item = document.createElement("li");
    item.textContent = `${voice.name} (${voice.duration_s.toFixed(1)} s)`;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "delete-voice";
    remove.dataset.voice = voice.name;
    remove.textContent = "Delete";
    remove.addEventListener("click", () => deleteVoice(voice.name));
    item.append(remove);
    list.append(item);
  }
}

async function deleteVoice(name) {
  clearError();
  try {
    await call(`/v1/audio/voices/${encodeURIComponent(name)}`, { method: "DELETE" });
  } catch (error) {
    showError(error);
  }
  await loadVoices();
}

async function saveVoice() {
  clearError();
  const name = $("voice-name").value.trim();
  if (!session.clip) return showError(new Error("choose or record a clip first"));
  if (!name) return showError(new Error("give the voice a name"));
  const form = new FormData();
  form.append("audio_sample", session.clip.blob, session.clip.name);
  form.append("name", name);
  form.append("consent", name);
  if ($("ref-text").value.trim()) form.append("ref_text", $("ref-text").value.trim());
  try {
    await call("/v1/audio/voices", { method: "POST", body: form });
  } catch (error) {
    return showError(error);
  }
  await loadVoices(name);
}

// Clips: any file the browser can decode is sent as WAV (the server reads
// WAV, FLAC, Ogg and MP3; a recording is WebM); others go as they are, and
// the server says what is wrong with them.

async function useClip(blob, name) {
  let wav = null;
  try {
    const context = new AudioContext();
    const decoded = await context.decodeAudioData(await blob.arrayBuffer());
    context.close();
    wav = wavFile([toInt16(decoded.getChannelData(0))], decoded.sampleRate);
  } catch (_) {
    // not decodable here: let the server judge it
  }
  session.clip = wav ? { blob: wav, name: "clip.wav" } : { blob, name };
  $("clip-status").textContent = `Clip: ${name} (${(session.clip.blob.size / 1024).toFixed(0)} KiB)`;
}

let recorder = null;

async function startRecording() {
  clearError();
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (error) {
    return showError(new Error(`no microphone: ${error.message}`));
  }
  const parts = [];
  recorder = new MediaRecorder(stream);
  recorder.ondataavailable = (event) => parts.push(event.data);
  recorder.onstop = () => {
    stream.getTracks().forEach((track) => track.stop());
    useClip(new Blob(parts, { type: recorder.mimeType }), "recording");
  };
  recorder.start();
  $("record").disabled = true;
  $("stop-record").disabled = false;
  $("clip-status").textContent = "Recording…";
}

function stopRecording() {
  recorder.stop();
  $("record").disabled = false;
  $("stop-record").disabled = true;
}

function blobAsDataUri(blob) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(blob);
  });
}

// Examples of what a text may hold (docs/speech.md: Pauses, SSML)

const EXAMPLES = {
  pause: "Ready? [pause:700ms] Go!",
  dialogue:
    '<speak>\n  <voice name="default">Who is there?</voice>\n  <break time="400ms"/>\n' +
    '  <voice name="default"><prosody rate="slow">It is me.</prosody></voice>\n</speak>',
};

function showExample() {
  const example = EXAMPLES[$("example").value];
  if (example) $("text").value = example;
}

// Speaking

const NUMBER_FIELDS = {
  seed: "seed", temperature: "temperature", "top-p": "top_p", "top-k": "top_k",
  "repetition-penalty": "repetition_penalty", "max-new-tokens": "max_new_tokens",
};

async function requestBody() {
  // SSE with captions: the PCM, and where each sentence lies in it (read-along)
  const body = {
    input: $("text").value, response_format: "pcm", stream_format: "sse", captions: true,
  };
  const language = $("language").value.trim();
  if (language && language !== "auto") body.language = language;
  for (const [id, field] of Object.entries(NUMBER_FIELDS)) {
    if ($(id).value !== "") body[field] = Number($(id).value);
  }
  // A seed makes the download the same audio as what was heard.
  if (body.seed === undefined) body.seed = Math.floor(Math.random() * 2 ** 31);
  if ($("voice").value === CLIP_VOICE) {
    if (!session.clip) throw new Error("choose or record a clip first, under Clone a voice");
    body.ref_audio = await blobAsDataUri(session.clip.blob);
  } else {
    body.voice = $("voice").value;
  }
  return body;
}

class Player {
  // Plays 16-bit PCM chunks back to back as they arrive (Web Audio), and
  // knows which sample is being heard (a chunk that came late starts late).
  constructor(rate) {
    this.context = new AudioContext();
    this.rate = rate;
    this.next = 0;
    this.firstStart = null;
    this.placed = []; // {at, offset, length}: each chunk's start time and first sample
    this.samples = 0;
  }

  play(samples) {
    const buffer = this.context.createBuffer(1, samples.length, this.rate);
    buffer.getChannelData(0).set(Float32Array.from(samples, (s) => s / 32768));
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    const start = Math.max(this.next, this.context.currentTime + 0.05);
    source.start(start);
    if (this.firstStart === null) this.firstStart = start;
    this.next = start + buffer.duration;
    this.placed.push({ at: start, offset: this.samples, length: samples.length });
    this.samples += samples.length;
  }

  heardSeconds() {
    return this.firstStart === null ? 0 : Math.max(0, this.context.currentTime - this.firstStart);
  }

  heardSample() {
    // The sample playing now; -1 before the first, the end after the last.
    const now = this.context.currentTime;
    let heard = -1;
    for (const chunk of this.placed) {
      if (chunk.at > now) break;
      heard = chunk.offset + Math.min(chunk.length, Math.floor((now - chunk.at) * this.rate));
    }
    return heard;
  }

  playing() {
    return this.firstStart !== null && this.context.currentTime < this.next;
  }

  stop() {
    this.context.close();
  }
}

// Read-along: the sentences as their captions arrive; the one being heard
// is marked (class "now", aria-current) on every animation frame.

function showCaption(caption) {
  session.captions.push(caption);
  const span = document.createElement("span");
  span.textContent = caption.text;
  span.dataset.index = String(caption.index);
  const readAlong = $("read-along");
  if (readAlong.childElementCount) readAlong.append(" ");
  readAlong.append(span);
  readAlong.hidden = false;
}

function followPlayback(player) {
  const readAlong = $("read-along");
  const mark = () => {
    if (session.player !== player) return; // stopped, or another request began
    const going = session.controller || player.playing();
    const heard = going ? player.heardSample() : -1; // once it ended, none is heard
    const now = session.captions.findIndex((c) => c.start_sample <= heard && heard < c.end_sample);
    for (const span of readAlong.children) {
      const current = Number(span.dataset.index) === now;
      span.classList.toggle("now", current);
      if (current) span.setAttribute("aria-current", "true");
      else span.removeAttribute("aria-current");
    }
    readAlong.dataset.heardSample = String(heard);
    readAlong.dataset.heardAt = String(player.heardSeconds()); // when that sample was heard
    if (going) requestAnimationFrame(mark);
  };
  requestAnimationFrame(mark);
}

async function speak() {
  clearError();
  setStatus("streaming", "Preparing…");
  let body;
  try {
    body = await requestBody();
  } catch (error) {
    setStatus("error", "Failed.");
    return showError(error);
  }
  session.controller = new AbortController();
  session.pcm = [];
  session.captions = [];
  session.body = body;
  $("read-along").replaceChildren();
  $("read-along").hidden = true;
  if (session.player) session.player.stop();
  session.player = null;
  $("speak").disabled = true;
  $("stop").disabled = false;
  $("download").disabled = true;
  $("ttfa").textContent = "–";
  $("rtf").textContent = "–";
  setStatus("streaming", "Generating…");
  const status = $("status");
  status.dataset.bytes = "0";
  delete status.dataset.heardMs;
  const started = performance.now();
  try {
    const response = await call("/v1/audio/speech", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal: session.controller.signal,
    });
    session.rate = Number(response.headers.get("x-audio-sample-rate")) || 24000;
    session.player = new Player(session.rate);
    followPlayback(session.player);
    await readEvents(response, started);
    const seconds = (performance.now() - started) / 1000;
    const audioSeconds = receivedSeconds();
    status.dataset.heardMs = String(Math.round(session.player.heardSeconds() * 1000));
    $("rtf").textContent = audioSeconds ? (seconds / audioSeconds).toFixed(2) : "–";
    setStatus("done", `Done: ${audioSeconds.toFixed(1)} s of audio in ${seconds.toFixed(1)} s.`);
    $("download").disabled = false;
  } catch (error) {
    if (error.name === "AbortError") {
      setStatus("idle", "Stopped.");
    } else {
      setStatus("error", "Failed.");
      showError(error);
    }
  } finally {
    $("speak").disabled = false;
    $("stop").disabled = true;
    session.controller = null;
  }
}

async function readEvents(response, started) {
  // Server-Sent Events: "data: {json}" blocks, each ended by a blank line.
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    text += value;
    let end;
    while ((end = text.indexOf("\n\n")) >= 0) {
      const block = text.slice(0, end);
      text = text.slice(end + 2);
      if (block.startsWith("data: ")) handleEvent(JSON.parse(block.slice(6)), started);
    }
  }
}

function handleEvent(event, started) {
  if (event.type === "speech.audio.delta") {
    const bytes = Uint8Array.from(atob(event.audio), (c) => c.charCodeAt(0));
    if (!bytes.length) return;
    const samples = new Int16Array(bytes.buffer, 0, bytes.length >> 1);
    if (!session.pcm.length) $("ttfa").textContent = String(Math.round(performance.now() - started));
    session.pcm.push(samples);
    session.player.play(samples);
    const status = $("status");
    status.dataset.bytes = String(Number(status.dataset.bytes) + samples.length * 2);
    $("progress").textContent = `${receivedSeconds().toFixed(1)} s of audio`;
  } else if (event.type === "speech.audio.caption") {
    showCaption(event);
  } else if (event.type === "speech.audio.error") {
    throw new Error(event.error.message);
  }
}

function receivedSeconds() {
  return session.pcm.reduce((total, chunk) => total + chunk.length, 0) / session.rate;
}

function stop() {
  if (session.controller) session.controller.abort();
  if (session.player) session.player.stop();
  session.player = null;
}

// Downloading what was just spoken: WAV from the audio heard, any other
// format by asking again with the same seed, sentence by sentence as it was
// spoken (the same audio): Kokoro-FastAPI's captioned speech, whole.

async function download() {
  clearError();
  const format = $("format").value;
  let blob;
  if (format === "wav") {
    blob = wavFile(session.pcm, session.rate);
  } else {
    const body = { ...session.body, response_format: format, stream: false };
    delete body.stream_format;
    delete body.captions;
    delete body.sample_rate;
    try {
      const answer = await (await call("/dev/captioned_speech", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      })).json();
      const bytes = Uint8Array.from(atob(answer.audio), (c) => c.charCodeAt(0));
      blob = new Blob([bytes], { type: answer.audio_format });
    } catch (error) {
      return showError(error);
    }
  }
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = `speech.${format}`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 60000);
}

function toInt16(floats) {
  return Int16Array.from(floats, (s) => Math.max(-32768, Math.min(32767, Math.round(s * 32767))));
}

function wavFile(chunks, rate) {
  const length = chunks.reduce((total, chunk) => total + chunk.length, 0);
  const header = new DataView(new ArrayBuffer(44));
  const text = (offset, value) => [...value].forEach((c, i) => header.setUint8(offset + i, c.charCodeAt(0)));
  text(0, "RIFF");
  header.setUint32(4, 36 + length * 2, true);
  text(8, "WAVE");
  text(12, "fmt ");
  header.setUint32(16, 16, true);
  header.setUint16(20, 1, true); // PCM
  header.setUint16(22, 1, true); // mono
  header.setUint32(24, rate, true);
  header.setUint32(28, rate * 2, true);
  header.setUint16(32, 2, true);
  header.setUint16(34, 16, true);
  text(36, "data");
  header.setUint32(40, length * 2, true);
  return new Blob([header, ...chunks], { type: "audio/wav" });
}

// Wiring

$("speak").addEventListener("click", speak);
$("example").addEventListener("change", showExample);
$("stop").addEventListener("click", stop);
$("download").addEventListener("click", download);
$("save-voice").addEventListener("click", saveVoice);
$("record").addEventListener("click", startRecording);
$("stop-record").addEventListener("click", stopRecording);
$("clip").addEventListener("change", (event) => {
  const file = event.target.files[0];
  if (file) useClip(file, file.name);
});
$("key-panel").addEventListener("submit", (event) => {
  event.preventDefault();
  session.key = $("api-key").value.trim();
  sessionStorage.setItem(KEY_STORAGE, session.key);
  $("key-panel").hidden = true;
  clearError();
  loadVoices();
});
showModel();
loadVoices();
