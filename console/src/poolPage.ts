// The pool and the budget: warm slots per profile (GET /v1/pool), the admission budget live
// against its total, 429s, creates per second (from /metrics, sampled between two looks), and
// per-team usage when the service has teams (GET /v1/usage answers; otherwise the panel says so).
import { ApiError, call, isMissingRoute } from "./api.ts";
import { bytes, h, replace } from "./dom.ts";
import { parsePromText, type Sample, sum } from "./promText.ts";
import { fail, type PageContext } from "./shell.ts";

const POLL_MS = 2000;

interface Pool {
  profile: string;
  size: string;
  target: number;
  ready: number;
  starting: number;
}

const table = (head: string[], rows: (string | number)[][]) =>
  h(
    "table",
    {},
    h("thead", {}, h("tr", {}, ...head.map((t) => h("th", {}, t)))),
    h("tbody", {}, ...rows.map((r) => h("tr", {}, ...r.map((c) => h("td", {}, String(c)))))),
  );

function usageRows(u: unknown): (string | number)[][] {
  const list = Array.isArray(u) ? u : ((u as { teams?: unknown[] })?.teams ?? []);
  return (list as Record<string, unknown>[]).map((t) => [
    String(t.team ?? t.name ?? ""),
    JSON.stringify(Object.fromEntries(Object.entries(t).filter(([k]) => k !== "team" && k !== "name"))),
  ]);
}

export function poolPage(ctx: PageContext): () => void {
  const pools = h("div", { data: { test: "pools" } });
  const budget = h("div", { data: { test: "budget" } });
  const teams = h("div", { data: { test: "teams" } });
  const err = h("div", { class: "error" });
  const ac = new AbortController();
  let last: { at: number; creates: number } | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;

  function showBudget(samples: Sample[]): void {
    const now = performance.now();
    const creates = sum(samples, "sbx_create_accept_seconds_count");
    const rate = last ? ((creates - last.creates) * 1000) / (now - last.at) : undefined;
    last = { at: now, creates };
    const rejects = samples.filter((s) => s.name === "sbx_admission_rejects_total");
    const cpu = (n: string) => sum(samples, n, { resource: "cpu_millis" });
    const mem = (n: string) => sum(samples, n, { resource: "memory_bytes" });
    replace(
      budget,
      table(
        ["", "used", "total", "free"],
        [
          [
            "CPU (millicores)",
            cpu("sbx_budget_used"),
            cpu("sbx_budget_total"),
            cpu("sbx_budget_total") - cpu("sbx_budget_used"),
          ],
          [
            "memory",
            bytes(mem("sbx_budget_used")),
            bytes(mem("sbx_budget_total")),
            bytes(mem("sbx_budget_total") - mem("sbx_budget_used")),
          ],
        ],
      ),
      h("p", {}, `creates per second: ${rate === undefined ? "measuring…" : rate.toFixed(2)}`),
      h("h2", {}, "429s (admission refusals)"),
      table(
        ["reason", "count"],
        rejects.length ? rejects.map((s) => [Object.values(s.labels).join(", ") || "(all)", s.value]) : [["(none)", 0]],
      ),
    );
  }

  async function poll(): Promise<void> {
    err.textContent = "";
    try {
      const p = await call<{ pools: Pool[] }>("GET", "/v1/pool", undefined, ac.signal).catch((e) => {
        if (e instanceof ApiError && e.status === 409) return undefined;
        throw e;
      });
      replace(
        pools,
        p
          ? table(
              ["profile", "size", "warm ready", "starting", "target"],
              p.pools.map((x) => [x.profile, x.size, x.ready, x.starting, x.target]),
            )
          : h("p", { class: "muted" }, "this service's backend has no warm pool"),
      );
      const res = await fetch("/metrics", { credentials: "omit", signal: ac.signal });
      if (res.ok) showBudget(parsePromText(await res.text()));
      try {
        replace(
          teams,
          table(["team", "usage"], usageRows(await call<unknown>("GET", "/v1/usage", undefined, ac.signal))),
        );
      } catch (e) {
        if (!isMissingRoute(e)) throw e;
        replace(teams, h("p", { class: "muted" }, "no teams on this service (GET /v1/usage does not exist)"));
      }
      performance.mark("sbx:meaningful");
    } catch (e) {
      if (!ac.signal.aborted) fail(err, e);
    }
    if (!ac.signal.aborted) timer = setTimeout(poll, POLL_MS);
  }

  replace(
    ctx.root,
    h("h1", {}, "Pool & budget"),
    err,
    h(
      "div",
      { class: "grid" },
      h("section", { class: "panel" }, h("h2", {}, "Warm pool"), pools),
      h("section", { class: "panel" }, h("h2", {}, "Budget"), budget),
      h("section", { class: "panel" }, h("h2", {}, "Teams"), teams),
    ),
  );
  void poll();
  return () => {
    ac.abort();
    clearTimeout(timer);
  };
}
