// One sandbox: its state and actions, a terminal (xterm.js over the terminal websocket), the
// command runner (kept beside it: one-shot commands with stdout and stderr apart, and a way in
// where a proxy passes no websocket), files, logs (followed), exposed ports
// with their preview links, resource charts (only when the service has the metrics route), and
// the events this page saw, pause and resume with their durations among them.
import { eventsOf, kill, observe, pause, resume, sandboxPath } from "./actions.ts";
import { call, isMissingRoute, type Sandbox, stream } from "./api.ts";
import { numericFields, sparkline } from "./chart.ts";
import { duration, h, replace } from "./dom.ts";
import { filesPanel } from "./filesPanel.ts";
import { runnerPanel } from "./runner.ts";
import { fail, type PageContext } from "./shell.ts";
import { terminalPanel } from "./terminalPanel.ts";

const POLL_MS = 2000;

interface Exposure {
  port: number;
  public: boolean;
  url: string;
  hostUrl?: string;
}

function facts(s: Sandbox): HTMLElement {
  const now = Date.now();
  const row = (k: string, v: string) => [h("dt", {}, k), h("dd", {}, v)];
  const meta = Object.entries(s.metadata ?? {});
  return h(
    "dl",
    { class: "facts" },
    ...row("state", s.phase + (s.reason ? ` (${s.reason})` : "") + (s.ready ? ", ready" : "")),
    ...row("profile · size", `${s.profile} · ${s.size}`),
    ...row("created", `${new Date(s.createdAt).toLocaleString()} (${duration(now - Date.parse(s.createdAt))} ago)`),
    ...row("ends", `${new Date(s.expiresAt).toLocaleString()} (in ${duration(Date.parse(s.expiresAt) - now)})`),
    h("dt", {}, "metadata"),
    h(
      "dd",
      { data: { test: "metadata" } },
      ...(meta.length ? meta.map(([k, v]) => h("span", { class: "meta" }, `${k}=${v}`)) : ["none"]),
    ),
    ...(s.message ? row("message", s.message) : []),
  );
}

function logsPanel(id: string, signal: AbortSignal): HTMLElement {
  const out = h("pre", { class: "out", data: { test: "logs" } });
  const err = h("div", { class: "error" });
  let ac: AbortController | undefined;
  const button = h("button", { data: { action: "follow" } }, "Follow");
  button.addEventListener("click", () => {
    if (ac) {
      ac.abort();
      ac = undefined;
      button.textContent = "Follow";
      return;
    }
    ac = new AbortController();
    signal.addEventListener("abort", () => ac?.abort(), { once: true });
    button.textContent = "Stop";
    replace(out);
    err.textContent = "";
    stream(
      "GET",
      `${sandboxPath(id)}/logs?follow=true&tailLines=200`,
      undefined,
      (l) => {
        out.appendChild(document.createTextNode(`${l}\n`));
        out.scrollTop = out.scrollHeight;
      },
      ac.signal,
    ).catch((e) => {
      if (!ac?.signal.aborted) fail(err, e);
    });
  });
  return h("section", { class: "panel", data: { panel: "logs" } }, h("h2", {}, "Logs"), button, err, out);
}

export function sandboxPage(ctx: PageContext, id: string): () => void {
  const ac = new AbortController();
  const head = h("div");
  const actions = h("div", { class: "actions" });
  const err = h("div", { class: "error", data: { test: "sandbox-error" } });
  const ports = h("ul", { data: { test: "ports" } });
  const events = h("ul", { data: { test: "events" } });
  const metrics = h("section", { class: "panel", data: { panel: "metrics" } }, h("h2", {}, "Resources"));
  metrics.hidden = true; // shown once GET .../metrics answers (the route may not exist yet)
  const series: Record<string, number[]> = {};
  let metricsRoute = true;
  let phase = "";

  const act = (label: string, run: () => Promise<unknown>, cls = "") =>
    h(
      "button",
      {
        class: cls,
        data: { action: label },
        on: {
          click: (ev) => {
            (ev.target as HTMLButtonElement).disabled = true;
            err.textContent = "";
            run()
              .catch((e) => fail(err, e))
              .finally(poll);
          },
        },
      },
      label,
    );

  function show(s: Sandbox): void {
    observe(s);
    replace(
      head,
      h(
        "h1",
        {},
        "Sandbox ",
        h("code", {}, s.id),
        " ",
        h("span", { class: `phase phase-${s.phase}`, data: { test: "phase" } }, s.phase),
      ),
      facts(s),
    );
    if (s.phase !== phase) {
      phase = s.phase;
      replace(
        actions,
        s.phase === "Running" ? act("pause", () => pause(id)) : null,
        s.phase === "Paused" ? act("resume", () => resume(id)) : null,
        act("kill", () => kill(id).then(() => (location.hash = "#/")), "danger"),
      );
    }
    replace(events, ...eventsOf(id).map((e) => h("li", {}, `${e.at.toLocaleTimeString()} ${e.text}`)));
  }

  async function pollMetrics(): Promise<void> {
    if (!metricsRoute) return;
    try {
      const m = await call<unknown>("GET", `${sandboxPath(id)}/metrics`, undefined, ac.signal);
      for (const [k, v] of Object.entries(numericFields(m))) {
        series[k] ??= [];
        series[k].push(v);
      }
      for (const k of Object.keys(series)) if (series[k].length > 60) series[k].shift();
      metrics.hidden = false;
      replace(
        metrics,
        h("h2", {}, "Resources"),
        ...Object.entries(series)
          .slice(0, 6)
          .map(([k, v]) => sparkline(v, k)),
      );
    } catch (e) {
      if (isMissingRoute(e)) metricsRoute = false;
    }
  }

  let timer: ReturnType<typeof setTimeout> | undefined;
  async function poll(): Promise<void> {
    clearTimeout(timer);
    try {
      show(await call<Sandbox>("GET", sandboxPath(id), undefined, ac.signal));
      const p = await call<{ ports?: Exposure[] } | Exposure[]>(
        "GET",
        `${sandboxPath(id)}/exposed-ports`,
        undefined,
        ac.signal,
      ).catch(() => []);
      const list = Array.isArray(p) ? p : (p.ports ?? []);
      replace(
        ports,
        ...list.map((x) => h("li", {}, `port ${x.port}${x.public ? " (public)" : ""}: `, link(x.hostUrl ?? x.url))),
      );
      if (!list.length) ports.appendChild(h("li", { class: "muted" }, "no exposed ports (sbx expose ID PORT)"));
      await pollMetrics();
      performance.mark("sbx:meaningful");
    } catch (e) {
      if (!ac.signal.aborted) fail(err, e);
    }
    if (!ac.signal.aborted) timer = setTimeout(poll, POLL_MS);
  }

  replace(
    ctx.root,
    h("p", {}, h("a", { href: "#/" }, "‹ all sandboxes")),
    h("section", { class: "panel" }, head, actions, err),
    h(
      "div",
      { class: "grid" },
      terminalPanel(id, ac.signal),
      runnerPanel(id, ac.signal),
      filesPanel(id, ac.signal),
      logsPanel(id, ac.signal),
      h("section", { class: "panel", data: { panel: "ports" } }, h("h2", {}, "Exposed ports"), ports),
      metrics,
      h("section", { class: "panel", data: { panel: "events" } }, h("h2", {}, "Events seen here"), events),
    ),
  );
  void poll();
  return () => {
    ac.abort();
    clearTimeout(timer);
  };
}

/** A preview link opens apart from the console: no opener, no referrer (the token stays here). */
function link(url: string): HTMLAnchorElement {
  const a = h("a", { href: url }, url);
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  return a;
}
