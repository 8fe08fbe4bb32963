// The sandbox page's terminal: xterm.js over the terminal websocket, GET /v1/sandboxes/{id}/terminal
// (docs/terminals.md). A browser's WebSocket cannot send Authorization, so the token goes as the
// subprotocol sbx.bearer.<base64url> beside sbx.terminal.v1 (api.ts terminalProtocols), never in
// the URL. Keys and pastes go as binary frames, a resize of the panel as the JSON control frame,
// and the command's exit is written into the terminal. Opened by a button, not on page load:
// opening one starts a shell, wakes a paused sandbox and holds it active while it is open.
import { sandboxPath } from "./actions.ts";
import { call, terminalProtocols } from "./api.ts";
import { h } from "./dom.ts";
import { XTERM_GLOBAL, type XtermModule } from "./xtermTypes.ts";

type Term = InstanceType<XtermModule["Terminal"]>;

/** The service's control frames (runtime/core/terminal.ts ServerControl). */
interface ServerControl {
  type: string;
  exitCode?: number;
  timedOut?: boolean;
  oomKilled?: boolean;
  code?: string;
  message?: string;
}

let loading: Promise<XtermModule> | undefined;

/** xterm.js, loaded once on first use (a script of this origin: script-src 'self' allows it). */
function loadXterm(): Promise<XtermModule> {
  loading ??= new Promise<XtermModule>((resolve, reject) => {
    const s = document.createElement("script");
    s.src = "xterm.js";
    s.onload = () => {
      const x = (globalThis as Record<string, unknown>)[XTERM_GLOBAL] as XtermModule | undefined;
      if (x) resolve(x);
      else reject(new Error("xterm.js loaded but defined no terminal; rebuild the console"));
    };
    s.onerror = () => {
      loading = undefined;
      reject(new Error("could not load xterm.js from the service; reload the page"));
    };
    document.head.appendChild(s);
  });
  return loading;
}

/** Only http(s) links a program prints (OSC 8) open, in a new tab with no opener and no referrer. */
function openLink(_ev: MouseEvent, uri: string): void {
  try {
    const u = new URL(uri);
    if (u.protocol === "http:" || u.protocol === "https:") window.open(u.href, "_blank", "noopener,noreferrer");
  } catch {
    // not a URL: nothing to open
  }
}

function exitLine(c: ServerControl): string {
  const why = `${c.timedOut ? ", timed out" : ""}${c.oomKilled ? ", out of memory" : ""}`;
  return `\r\n\x1b[2m[exited ${c.exitCode}${why}]\x1b[0m\r\n`;
}

/** The xterm in `screen`, fitted to it and following its size; disposed when `signal` aborts. */
function createView(x: XtermModule, screen: HTMLElement, signal: AbortSignal): Term {
  const term = new x.Terminal({
    cursorBlink: true,
    fontSize: 13,
    fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
    scrollback: 5000,
    linkHandler: { activate: openLink, allowNonHttpProtocols: false },
  });
  const fit = new x.FitAddon();
  term.loadAddon(fit);
  screen.hidden = false; // measured by fit: it must be laid out
  term.open(screen);
  fit.fit();
  // the panel follows the window; each new size reaches the command as a resize frame (connect)
  let frame = 0;
  const ro = new ResizeObserver(() => {
    cancelAnimationFrame(frame);
    frame = requestAnimationFrame(() => fit.fit());
  });
  ro.observe(screen);
  signal.addEventListener(
    "abort",
    () => {
      ro.disconnect();
      term.dispose();
    },
    { once: true },
  );
  return term;
}

/**
 * One terminal session on `term`: the websocket at the terminal's size, input and resizes out,
 * output and the exit in. `closed` is told whether the socket ever opened (a refused handshake
 * does not) once it is closed.
 */
function connect(
  term: Term,
  id: string,
  status: HTMLElement,
  signal: AbortSignal,
  closed: (opened: boolean) => void,
): WebSocket {
  const url = new URL(`${sandboxPath(id)}/terminal`, location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  url.search = new URLSearchParams({ cols: String(term.cols), rows: String(term.rows) }).toString();
  const sock = new WebSocket(url, terminalProtocols());
  sock.binaryType = "arraybuffer";
  let opened = false;
  let ended = false;
  const pending: Uint8Array[] = []; // typed before the socket opened
  const enc = new TextEncoder();
  const send = (bytes: Uint8Array) => {
    if (sock.readyState === WebSocket.OPEN) sock.send(bytes);
    else if (sock.readyState === WebSocket.CONNECTING) pending.push(bytes);
  };
  const subs = [
    term.onData((d) => send(enc.encode(d))),
    // mouse reports in the X10 encoding: one byte per character
    term.onBinary((d) => send(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff))),
    term.onResize(({ cols, rows }) => {
      if (sock.readyState !== WebSocket.OPEN) return;
      sock.send(JSON.stringify({ type: "resize", cols, rows }));
      status.textContent = `open: ${cols}×${rows}`;
    }),
  ];
  status.textContent = "opening…";
  sock.onopen = () => {
    opened = true;
    status.textContent = `open: ${term.cols}×${term.rows}`;
    for (const b of pending.splice(0)) sock.send(b);
    term.focus();
  };
  sock.onmessage = (ev: MessageEvent<ArrayBuffer | string>) => {
    if (typeof ev.data !== "string") return term.write(new Uint8Array(ev.data));
    const c = JSON.parse(ev.data) as ServerControl;
    if (c.type === "exit") term.write(exitLine(c));
    else if (c.type === "error") term.write(`\r\n[error ${c.code}: ${c.message}]\r\n`);
    else return;
    ended = true;
    status.textContent = c.type === "exit" ? `exited ${c.exitCode}` : `failed: ${c.code}`;
  };
  sock.onclose = (ev) => {
    for (const s of subs) s.dispose();
    // after the page is left the terminal is disposed: nothing more to write
    if (opened && !ended && !signal.aborted) {
      term.write(`\r\n\x1b[2m[closed: ${ev.code}${ev.reason ? ` ${ev.reason}` : ""}]\x1b[0m\r\n`);
      status.textContent = "closed";
    }
    closed(opened);
  };
  return sock;
}

export function terminalPanel(id: string, signal: AbortSignal): HTMLElement {
  const screen = h("div", { class: "term", data: { test: "terminal" } });
  screen.hidden = true;
  const status = h("span", { class: "muted", data: { test: "terminal-status" } }, "not open");
  const err = h("div", { class: "error", data: { test: "terminal-error" } });
  const button = h("button", { class: "primary", data: { action: "terminal" } }, "Open a terminal");
  let term: Term | undefined;
  let ws: WebSocket | undefined;

  /** A refused handshake shows the browser no status: say so, and what the sandbox itself answers. */
  async function refused(): Promise<void> {
    status.textContent = "not open";
    err.textContent = "the service refused the terminal, or the connection failed";
    try {
      const s = await call<{ phase: string }>("GET", sandboxPath(id), undefined, signal);
      err.textContent += ` (the sandbox is ${s.phase})`;
    } catch (e) {
      if (e instanceof Error) err.textContent += `: ${e.message}`;
    }
  }

  const closed = (opened: boolean) => {
    ws = undefined;
    button.textContent = "Open a new terminal";
    button.disabled = false;
    if (!opened && !signal.aborted) void refused();
  };
  button.addEventListener("click", () => {
    err.textContent = "";
    if (ws) return ws.close(1000, "closed from the console");
    button.disabled = true;
    loadXterm()
      .then((x) => {
        term ??= createView(x, screen, signal);
        ws = connect(term, id, status, signal, closed);
        button.textContent = "Close the terminal";
        button.disabled = false;
      })
      .catch((e) => {
        err.textContent = e instanceof Error ? e.message : String(e);
        button.disabled = false;
      });
  });
  signal.addEventListener("abort", () => ws?.close(1000, "left the page"), { once: true });

  return h(
    "section",
    { class: "panel wide", data: { panel: "terminal" } },
    h("h2", {}, "Terminal"),
    h("div", { class: "toolbar" }, button, status),
    err,
    screen,
  );
}
