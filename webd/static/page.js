// clowder's web view: the user's sessions, polled about every second, and one
// session's terminal over a WebSocket (the repaint, then live output).  Everything
// comes from this server: xterm.js is bundled at build time, never fetched.
"use strict";

const state = {sessions: [], agents: null, polls: 0, open: null, ws: null, term: null, input: false,
               attaches: 0, refused: 0, exited: null, wsState: "closed"};
window.clowder = state;  // read by tests/test_web.py

function text(s) { return s === null || s === undefined ? "" : String(s); }

async function poll() {
  try {
    const r = await fetch("/api/sessions", {cache: "no-store"});
    if (r.status === 401) { status("logged out: run `clowderctl web` again"); return; }
    const body = await r.json();
    if (!r.ok) throw new Error(body.error || r.status);
    state.sessions = body.sessions;
    notifyAttention(state.agents, body.agents);
    state.agents = body.agents;  // null: clowder-control did not answer
    state.polls += 1;
    render();
    status("live");
  } catch (e) {
    status("the PTY host is not answering: retrying (" + e.message + ")");
  }
  setTimeout(poll, 1000);
}

function status(s) { document.getElementById("status").textContent = s; }

// A browser notification when an agent comes to need attention (asking, notified,
// exited, failed) while the page is open, if the user allowed them ("notify me").
state.notified = [];  // what was shown, for tests/test_web.py
function notifyAttention(before, after) {
  if (!before || !after || !("Notification" in window)) return;
  const was = new Map(before.map(a => [a.name, a.attention]));
  for (const a of after) {
    if (!a.attention || a.attention === "none" || was.get(a.name) === a.attention) continue;
    if (!was.has(a.name)) continue;  // first seen: its state is not news
    const body = a.attention + (a.attention_cause ? ": " + a.attention_cause : "");
    state.notified.push(a.name + " " + body);
    if (Notification.permission === "granted") {
      new Notification("clowder: " + a.name, {body: body, tag: "clowder-" + a.name});
    }
  }
}

function askToNotify() {
  const button = document.getElementById("notify");
  if (!("Notification" in window)) { button.hidden = true; return; }
  const show = () => { button.hidden = Notification.permission !== "default"; };
  button.addEventListener("click", () => Notification.requestPermission().then(show));
  show();
}

function row(cells, id) {
  const tr = document.createElement("tr");
  if (id) {
    tr.dataset.id = id;
    if (state.open === id) tr.className = "open";
    tr.addEventListener("click", () => { location.hash = id; });
  }
  for (const [value, cls] of cells) {
    const td = document.createElement("td");
    td.textContent = text(value);
    if (cls) td.className = cls;
    tr.appendChild(td);
  }
  return tr;
}

function exitText(e) {
  if (!e) return "";
  return e.signal ? "signal " + e.signal : text(e.exit_code !== undefined ? e.exit_code : e.code);
}

function renderAgents() {
  const table = document.getElementById("agents");
  table.hidden = !state.agents || state.agents.length === 0;
  const rows = (state.agents || []).map(a => row([
    [a.name], [a.state, "state-" + a.state],
    [a.activity + (a.activity_reason ? " (" + a.activity_reason + ")" : ""),
     "activity-" + a.activity],
    [a.attention && a.attention !== "none"
       ? a.attention + (a.attention_cause ? " (" + a.attention_cause + ")" : "") : "",
     "attention-" + a.attention],
    [a.session], [exitText(a.last_exit)]], a.session));
  table.querySelector("tbody").replaceChildren(...rows);
}

function render() {
  renderAgents();
  const body = document.querySelector("#sessions tbody");
  const rows = state.sessions.map(s => {
    const tr = document.createElement("tr");
    tr.dataset.id = s.id;
    if (state.open === s.id) tr.className = "open";
    const exit = s.state === "exited" ? (s.signal ? "signal " + s.signal : text(s.exit_code)) : "";
    for (const [value, cls] of [[s.id], [s.name], [s.state, "state-" + s.state], [exit],
                                [(s.argv || []).join(" "), "command"]]) {
      const td = document.createElement("td");
      td.textContent = text(value);
      if (cls) td.className = cls;
      tr.appendChild(td);
    }
    tr.addEventListener("click", () => { location.hash = s.id; });
    return tr;
  });
  body.replaceChildren(...rows);
  document.getElementById("empty").hidden = rows.length > 0;
}

function openFromHash() {
  const id = decodeURIComponent(location.hash.slice(1));
  if (id && id !== state.open) show(id);
}

function show(id) {
  closeView();
  state.open = id;
  const info = state.sessions.find(s => s.id === id) || {};
  document.getElementById("view").hidden = false;
  document.getElementById("title").textContent = id + (info.name ? " (" + info.name + ")" : "");
  state.term = new Terminal({cols: info.cols || 80, rows: info.rows || 24,
                             disableStdin: true, convertEol: false, scrollback: 1000});
  state.term.open(document.getElementById("terminal"));
  state.term.onData(data => {
    if (state.input && state.ws && state.ws.readyState === WebSocket.OPEN)
      state.ws.send(JSON.stringify({input: data}));
  });
  connect(id);
  render();
}

function closeView() {
  if (state.ws) { state.ws.onclose = null; state.ws.close(); state.ws = null; }
  if (state.term) { state.term.dispose(); state.term = null; }
  state.open = null;
}

// One attach; when it ends for any reason but the session's end (a host restart, the
// daemon restarting, the network), attach again after a short pause: the new attach
// repaints the screen, so nothing is lost.
function connect(id) {
  const term = state.term;
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host +
      "/ws/" + encodeURIComponent(id) + "?cols=" + term.cols + "&rows=" + term.rows;
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  state.wsState = "connecting";
  ws.onopen = () => { state.wsState = "open"; };
  ws.onmessage = ev => {
    if (typeof ev.data !== "string") { term.write(new Uint8Array(ev.data)); return; }
    const msg = JSON.parse(ev.data);
    if (msg.attached) {
      state.attaches += 1;
      state.input = msg.input;
      term.reset();
      term.options.disableStdin = !msg.input;
      document.getElementById("mode").textContent = msg.input ? "typing" : "read-only";
    } else if (msg.exited) {
      state.exited = msg.exited;
    } else if (msg.refused) {
      state.refused += 1;
    }
  };
  ws.onclose = () => {
    state.wsState = "closed";
    if (state.ws !== ws || state.exited) return;
    status("reattaching…");
    // A session the list no longer has (removed) is not attached again and again.
    setTimeout(() => {
      if (state.ws === ws && state.open === id && state.sessions.some(s => s.id === id))
        connect(id);
    }, 500);
  };
}

window.addEventListener("hashchange", openFromHash);
askToNotify();
poll().then(openFromHash);
